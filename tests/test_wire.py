"""The wire between judge serve and its client: every value in a declared form, a round's events typed by kind and
read back as a local run hands them over (the noise floor as a Floor), kinds the client does not know passed
through."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from judge.cli.progress import RunProgress
from judge.noise import Floor
from judge.server.jobs import Job
from judge.wire import Event, FloorEvent, JobAnswer, VerdictEvent, jsonable, read_event

CONTROLLED = Floor(effect=0.232, min_effect=0.01, source="controls", controls=1, device="AMD EPYC")


def _over_the_wire(job: Job, since: int = 0) -> JobAnswer:
    return JobAnswer.read(json.loads(json.dumps(jsonable(job.answer(since)))))


def test_a_floor_event_reaches_the_clients_progress_as_the_floor_the_round_used():
    # The served round of 2026-11-27: the client crashed on 'str' object has no attribute 'words'.
    job = Job(1, 1, None, "boss", "2026-11-27T10:00:00")
    job.event("floor", target="vecadd_cpu", floor=CONTROLLED)
    sent = json.loads(json.dumps(jsonable(job.answer())))
    assert sent["events"][0]["floor"] == {
        "effect": 0.232, "min_effect": 0.01, "source": "controls", "controls": 1, "device": "AMD EPYC",
        "faster_at": 1.232, "slower_at": pytest.approx(1 / 1.232), "words": CONTROLLED.words()}
    [event] = JobAnswer.read(sent).events
    assert isinstance(event, FloorEvent) and event.fields() == {"target": "vecadd_cpu", "floor": CONTROLLED}
    console = Console(file=io.StringIO(), width=200)
    with RunProgress(console, enabled=True) as progress:
        progress.event(event.kind, **event.fields())
    assert f"noise floor: {CONTROLLED.words()}" in console.file.getvalue()


def test_kinds_the_client_does_not_know_pass_through_and_a_value_without_a_json_form_stops_nothing():
    job = Job(1, 1, None, "boss", "2026-11-27T10:00:00")
    job.event("benchmark-progress", proposal="fast", benchmark=2, of=4)
    job.event("odd", proposal="fast", thing=object())
    job.event("verdict", proposal="fast", outcome="faster", reason="1.25x", where=None, extra={"pairs": 3})
    events = _over_the_wire(job).events
    assert [type(e) for e in events] == [Event, Event, VerdictEvent]  # a field a newer server adds is kept
    assert events[0].fields() == {"proposal": "fast", "benchmark": 2, "of": 4}
    assert events[1].fields() == {"proposal": "fast", "unsent": ["thing"]}
    assert events[2].fields()["extra"] == {"pairs": 3}
    assert [e.seq for e in events] == [0, 1, 2]
    assert [e.seq for e in _over_the_wire(job, since=2).events] == [2]
    assert read_event({"kind": "verdict", "proposal": "p", "outcome": "faster"}).outcome == "faster"


def test_jsonable_has_no_fallback_to_str():
    assert jsonable({1: Path("a/b"), "t": (1, 2)}) == {"1": "a/b", "t": [1, 2]}
    with pytest.raises(TypeError, match="builtins.object has no declared JSON form"):
        jsonable({"x": object()})
