"""Per-benchmark claims in the scorecard: a range claimed for a benchmark is set against that benchmark's
measured speedup, line by line."""

from judge.ledger import Ledger
from judge.records import Claim
from judge.report import render_round

from test_report import (B200, BASE_1, BASE_COMPILE, CORRECT, FASTER, PATCHED, TARGET, compiled, evaluate,  # noqa: F401
                         ledger, proposal)


def test_each_claimed_benchmark_is_compared_with_its_measured_speedup(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    claimed = proposal("tma-store-epilogue", "team-epilogue", 1, "epilogue", None, "EPILOGUE_STORE = 'tma'",
                       old_line="EPILOGUE_STORE = 'simt'")
    claimed = claimed.model_copy(update={"claim": Claim(low=1.05, high=1.10, per_benchmark={0: (1.0, 1.05), 3: (1.2, 1.3)})})
    revision = ledger.submit(claimed, "test").revision_id
    r1 = ledger.create_round(TARGET, 1, BASE_1, f"kernels/{TARGET}/submission.py")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    evaluate(ledger, run, r1, None, "unchanged", "base kernel", [BASE_COMPILE, CORRECT], B200)
    evaluate(ledger, run, r1, revision, "faster", FASTER.summary,
             [PATCHED, compiled(120, 97280, 2, "smem", 900, 1800, epilogue_store="tma"), CORRECT, FASTER], B200)
    ledger.finish_run(run, "finished")
    text = render_round(ledger, 1, tmp_path / "reports").read_text().splitlines()
    # FASTER: benchmark 0 at 373/350 = 1.066x (above 1.0-1.05), benchmark 3 at 156/147 = 1.061x (below 1.2-1.3)
    assert ("Per benchmark, tma-store-epilogue r1: benchmark 0 claimed 1-1.05x, measured 1.066x, above; "
            "benchmark 3 claimed 1.2-1.3x, measured 1.061x, below.") in text


def test_each_sharks_fund_calls_are_set_against_the_measurements(ledger, tmp_path):
    """The oracle funded pipeline-stages-3 (measured slower) and passed on tma-store-epilogue (measured faster,
    the winner): both calls wrong; tile-64-rows was never measured (a compile error), so it is no call at all."""
    text = render_round(ledger, 1, tmp_path / "reports").read_text().splitlines()
    at = text.index("### The sharks' calls against the measurements")
    assert text[at + 4:at + 8] == [
        "| shark | calls right | funded: stood faster | not funded: did not |",
        "|---|---|---|---|",
        "| measured-referee | 1 of 1 | 0 of 0 | 1 of 1 |",
        "| performance-oracle | 0 of 2 | 0 of 1 | 0 of 1 |",
    ]
    assert text[at + 11:at + 14] == [
        "| measured-referee | 1 | pipeline-stages-3 r1 | no | slower | 0.735x | right | #2 |",
        "| performance-oracle | 1 | pipeline-stages-3 r1 | yes | slower | 0.735x | wrong | #2 |",
        "| performance-oracle | 1 | tma-store-epilogue r1 | no | faster | 1.060x | wrong | #4 |",
    ]
