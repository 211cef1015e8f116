"""judge/boundary/memory.py's lines in the oracle's log, with torch's CUDA counters stood in for (the oracle writes
them only on a GPU): what a user reads to put a round's peak on the oracle's step that made it."""

import io

import pytest
import torch

from judge.boundary import memory

GIB = 1 << 30


@pytest.fixture
def cuda(monkeypatch):
    """torch.cuda as the oracle would find it on a GPU, its counters set by the test."""
    counters = {"allocated": [], "reserved": 0, "peak_reserved": 0, "peak_allocated": 0, "emptied": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: counters["peak_reserved"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: counters["peak_allocated"])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: counters["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: counters["allocated"].pop(0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (42_000 << 20, 143_155 << 20))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: counters.__setitem__("emptied", counters["emptied"] + 1))
    clock = iter([100.0, 100.25])
    monkeypatch.setattr(memory.time, "perf_counter", lambda: next(clock))
    return counters


def test_a_step_past_the_release_size_writes_its_peak(cuda):
    cuda.update(peak_reserved=26_330 << 20, peak_allocated=25_687 << 20)
    log = io.StringIO()
    with memory.peak_noted("the answer to timed set 1", log):
        pass
    assert log.getvalue() == ("judge oracle: the answer to timed set 1 peaked at 26330 MiB reserved by torch "
                              "(25687 MiB of tensors) in 0.25 s; the device has 42000 of 143155 MiB free after it\n")


def test_a_step_under_the_release_size_writes_nothing(cuda):
    cuda.update(peak_reserved=memory.RELEASE_ABOVE_BYTES, peak_allocated=GIB)
    log = io.StringIO()
    with memory.peak_noted("a small case", log):
        pass
    assert log.getvalue() == ""


def test_tensors_held_past_what_is_kept_are_collected_and_said(cuda, monkeypatch, capsys):
    cuda["allocated"] = [28_162 << 20, 2_007 << 20]
    import gc
    monkeypatch.setattr(gc, "collect", lambda: 311)
    memory.Collections().collect_beyond(18_002 << 20, "after benchmark t1-0-6")
    assert capsys.readouterr().err == ("judge oracle: after benchmark t1-0-6: 28162 MiB of tensors held "
                                       "(18002 MiB kept on purpose), 2007 MiB after a collection that found 311 "
                                       "objects\n")
    assert cuda["emptied"] == 1


def test_tensors_within_the_release_size_of_what_is_kept_are_left_alone(cuda, monkeypatch, capsys):
    import gc
    cuda["allocated"] = [18_002 * (1 << 20) + memory.RELEASE_ABOVE_BYTES]
    monkeypatch.setattr(gc, "collect", lambda: pytest.fail("no collection was needed"))
    memory.Collections().collect_beyond(18_002 << 20, "after benchmark t1-0-6")
    assert capsys.readouterr().err == "" and cuda["emptied"] == 0


def test_what_a_collection_could_not_free_is_not_collected_for_again(cuda, monkeypatch, capsys):
    """fp8-mm's oracle held 4.4 GiB beyond its kept sets by design: a collection and an emptied cache after every
    benchmark found nothing to free, 90 ms each (H200, 2026-11-30). The next collection waits for as much again."""
    import gc
    collections, kept = memory.Collections(), 5_002 << 20
    found = iter([127, 40])
    monkeypatch.setattr(gc, "collect", lambda: next(found))
    held = 9_452 << 20
    cuda["allocated"] = [held, held, held, held + memory.RELEASE_ABOVE_BYTES + (1 << 20), held + (1 << 20)]
    collections.collect_beyond(kept, "after benchmark t1-0-17")  # collects: 4,450 MiB beyond the kept sets
    collections.collect_beyond(kept, "after benchmark t1-1-0")  # the same 4,450 MiB: nothing to collect for
    collections.collect_beyond(kept, "after benchmark t1-1-1")  # as much again and more: collected
    assert capsys.readouterr().err == (
        "judge oracle: after benchmark t1-0-17: 9452 MiB of tensors held (5002 MiB kept on purpose), 9452 MiB after a "
        "collection that found 127 objects\n"
        "judge oracle: after benchmark t1-1-1: 13549 MiB of tensors held (5002 MiB kept on purpose), 9453 MiB after a "
        "collection that found 40 objects\n")
    assert cuda["emptied"] == 2 and collections.unfreed == (9_453 - 5_002) << 20
