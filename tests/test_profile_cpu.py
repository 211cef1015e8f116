"""Issue 41 for real on the CPU example: vecadd_cpu's base profiled in a confined runner of its own (torch.profiler's
host ops), kept in the ledger and reused; a kernel that raises gives the profile's one line, never an exception."""

from __future__ import annotations

from pathlib import Path

from judge import profiles
from judge.ledger import Ledger
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]


def test_vecadd_cpu_profile_is_where_the_host_time_goes_and_a_raising_kernel_is_unavailable(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    heard = []
    done = profiles.profile_source(ledger, target, target.kernel_source(), "base", tmp_path / "base",
                                   progress=lambda **info: heard.append((info["benchmark"], info["label"])))
    profile = done["profile"]
    assert (done["reused"], profile["status"], profile["tool"], profile["peaks"]) == (
        False, "ok", "torch.profiler (host ops)", None)
    assert heard == [(1, "size=262144"), (2, "size=1048576")]
    for bench in profile["benchmarks"]:
        top = bench["kernels"][0]
        assert (top["name"], top["launches"]) == ("aten::add", 1.0)
        assert 0 < top["share"] <= 1 and bench["call_us"] > 0
        assert bench["bounds"][0].startswith("host: aten::add takes ")
    assert profiles.profile_source(ledger, target, target.kernel_source(), "base", tmp_path / "base")["reused"]

    raising = target.kernel_source().replace("def custom_kernel(data", "def custom_kernel(data, _=None):\n"
                                             "    raise ValueError('no')\n\n\ndef unused(data")
    failed = profiles.profile_source(ledger, target, raising, "candidate", tmp_path / "raising")["profile"]
    assert failed["status"] == "unavailable"
    assert failed["reason"].startswith("ValueError: no")
