"""scripts/sampling/summary.py: the seconds a device run's sampled stacks spent in each frame."""

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("sampling_summary",
                                              Path(__file__).parent.parent / "scripts" / "sampling" / "summary.py")
summary = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(summary)


def test_inclusive_seconds_count_each_stack_once_per_frame(tmp_path):
    path = tmp_path / "sample-cli-1.txt"
    path.write_text("# wall 3.0 s, one sample every 10 ms\n"
                    "main (a.py:1);run (b.py:5);wait (c.py:9) 200\n"
                    "main (a.py:1);run (b.py:6) 50\n"
                    "main (a.py:1);run (b.py:5);run (b.py:5) 10\n")
    seconds, total, period = summary.inclusive(str(path), functions=False)
    assert (round(total, 6), period) == (2.6, 0.01)
    assert {k: round(v, 6) for k, v in seconds.items()} == {
        "main (a.py:1)": 2.6, "run (b.py:5)": 2.1, "wait (c.py:9)": 2.0, "run (b.py:6)": 0.5}
    by_function, _, _ = summary.inclusive(str(path), functions=True)
    assert round(by_function["run (b.py)"], 6) == 2.6
