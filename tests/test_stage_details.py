"""The stage details' contract: typed records that round-trip the ledger's JSON byte for byte, and the docs'
schema tables, which must say what the types say."""

import dataclasses
import json
import os
import pickle
import re
import sqlite3
from pathlib import Path

import pytest

from harness import EXAMPLE_LEDGERS, example_ledger

from judge.stages.compile import resources
from judge.stages import details as stage_details
from judge.stages.details import (ABSENT, CheckDetail, CompileDetail, CompiledConfig, CompileError, KernelResources,
                                 Occupancy, TimedBenchmark, TimingDetail, detail_type, schema_markdown)
from judge.stages.result import StageResult, not_run
from judge.stages.compile.tracebacks import describe_error

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = re.compile(r"<!-- schema: ([\w ]+) -->\n(.*?)<!-- end schema -->", re.S)
DOCS = {"docs/compile.md": ["CompileDetail"], "docs/stage_details.md": ["ScreenDetail", "StaticDetail", "CheckDetail",
                                                                        "TimingDetail"]}


def _stored(detail) -> str:
    return json.dumps(detail.to_json(), sort_keys=True, default=str)  # as judge.ledger writes detail_json


@pytest.mark.parametrize("shipped", EXAMPLE_LEDGERS, ids=lambda p: p.name)
def test_every_stored_detail_of_an_example_ledger_round_trips_byte_for_byte(shipped, tmp_path):
    with sqlite3.connect(example_ledger(shipped, tmp_path)) as con:
        rows = con.execute("select stage, detail_json from stage_results").fetchall()
    assert rows
    for stage, text in rows:
        detail = detail_type(stage).from_json(json.loads(text))
        assert isinstance(detail, detail_type(stage))
        assert _stored(detail) == text
        assert json.dumps(detail.to_json()) == json.dumps(json.loads(text))  # the order `judge show --json` prints


def test_absent_is_not_null_and_unknown_keys_are_kept():
    detail = CompileDetail.from_json({"arch": "sm_90a", "entry": None, "configs": [], "later": {"x": 1}})
    assert (detail.entry, detail.gpu, detail.exit_code) == (None, None, None)
    assert detail.to_json() == {"arch": "sm_90a", "configs": [], "entry": None, "later": {"x": 1}}
    assert CompileDetail(arch="sm_90a", exit_code=None).to_json() == {"arch": "sm_90a", "exit_code": None}
    assert CheckDetail().cases == [] and CheckDetail().to_json() == {}  # an absent list reads as empty
    changed = detail.updated(error="crashed", entry=ABSENT)
    assert changed.to_json() == {"arch": "sm_90a", "configs": [], "error": "crashed", "later": {"x": 1}}


def test_nested_records_are_typed_and_odd_old_values_stay_as_they_came():
    config = CompiledConfig.from_json({"signature": {}, "benchmarks": [0], "key": "k", "ok": False, "cached": False,
                                       "seconds": 0.1, "error": {"type": "E", "message": "m", "where": None,
                                                                 "line": "E: m"}})
    assert isinstance(config.error, CompileError) and config.error.line == "E: m"
    assert config.kernels == [] and "kernels" not in config.to_json()
    crashed = CompileDetail.from_json({"error": "killed by signal 9", "configs": ["not a record"]})
    assert crashed.error == "killed by signal 9" and crashed.configs == ["not a record"]
    assert crashed.to_json() == {"configs": ["not a record"], "error": "killed by signal 9"}


def test_timing_repetitions_stay_out_of_the_json_and_a_benchmark_row_needs_its_numbers():
    bench = TimedBenchmark(index=0, base_median_us=2.0, cand_median_us=1.0, speedup=2.0, ci_low=1.9, ci_high=2.1,
                           significant=True, reps=2, base_us=[2.0, 2.0], cand_us=[1.0, 1.0])
    assert "base_us" not in bench.to_json() and bench.require() is bench
    with pytest.raises(KeyError, match="speedup"):
        TimedBenchmark.from_json({k: v for k, v in bench.to_json().items() if k != "speedup"}).require()


def test_a_stage_result_holds_its_own_stage_detail_type():
    assert isinstance(not_run("timing", "no GPU").detail, TimingDetail)
    assert not_run("timing", "no GPU").to_dict()["detail"] == {}
    with pytest.raises(TypeError, match="a timing stage's detail is a TimingDetail, got CheckDetail"):
        StageResult("timing", "passed", "x", detail=CheckDetail())
    with pytest.raises(TypeError):
        StageResult("timing", "passed", "x", detail={"geomean": 1.0})  # a dict is no longer a detail


def test_details_survive_pickling_as_ray_sends_them():
    stage = StageResult("timing", "crashed", "crashed: x", 1.0, TimingDetail(error="x", who="base"))
    back = pickle.loads(pickle.dumps(stage))
    assert back == stage and back.to_dict() == stage.to_dict() and back.detail.geomean is None


def test_the_types_name_every_key_their_writers_write():
    """Resources, occupancy and compile errors are built as dicts elsewhere (the cache keeps them): same keys."""
    facts = resources.ARCHS["sm_90a"]
    kernel = resources._kernel("k", {"registers": 32, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0,
                                     "smem_static": 0, "barriers": 1}, None,
                               {"threads": 128, "threads_from": ".reqntid 128, 1, 1"},
                               {"kernel": "k", "dynamic_smem": 0, "threads": 128, "block": [128, 1, 1]}, facts, [])
    assert set(kernel) == _names(KernelResources)
    assert set(kernel["occupancy"]) == _names(Occupancy)
    assert set(describe_error("Traceback (most recent call last):\nValueError: no", "submission.py")) == \
        _names(CompileError)


def _names(kind) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def _blocks(text: str) -> dict[str, str]:
    return {names: body for names, body in SCHEMA.findall(text)}


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_schema_tables_are_the_types(doc):
    path = ROOT / doc
    text = path.read_text()
    blocks = _blocks(text)
    assert [names.split()[0] for names in blocks] == DOCS[doc]  # each stage's table is there
    if os.environ.get("JUDGE_WRITE_SCHEMA"):
        text = SCHEMA.sub(lambda m: f"<!-- schema: {m[1]} -->\n{_schema(m[1])}<!-- end schema -->", text)
        path.write_text(text)
        blocks = _blocks(text)
    for names, body in blocks.items():
        assert body == _schema(names), f"{doc}: the table of {names} differs from judge/stages/details.py"


def _schema(names: str) -> str:
    return schema_markdown(*(getattr(stage_details, name) for name in names.split()))
