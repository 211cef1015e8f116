"""judge.evaluation.Evaluator.outbox: which cases hand their outputs over in the oracle's device memory, when the
oracle is asked for a larger outbox or to clear it, and that a refusal sends every case back to files. The
oracle here is a stand-in that records what it is asked; the device path itself is a GPU test in test_check."""

from pathlib import Path

from judge.evaluation import Evaluator
from judge.targets import load_target

FIXTURE = Path(__file__).parent / "fixtures" / "gpumode" / "vecadd"


def layout(offset: int, elements: int) -> dict:
    return {"offset": offset, "dtype": "float32", "shape": [elements], "stride": [1]}


class Oracle:
    def __init__(self, answers: list[dict]):
        self.answers, self.asked = answers, []

    def __call__(self, op: str, **args):
        self.asked.append((op, args))
        return self.answers.pop(0)


def evaluator(tmp_path, answers: list[dict], arch: str = "any") -> tuple[Evaluator, Oracle]:
    target = load_target(FIXTURE)
    target.arch = arch
    ev = Evaluator(target, tmp_path / "round", secret=7)
    oracle = Oracle(answers)
    ev.ask = oracle
    return ev, oracle


def test_the_outbox_is_asked_for_once_and_again_only_when_a_case_needs_more(tmp_path):
    ev, oracle = evaluator(tmp_path, [{"handle": "aa", "bytes": 4096}, {"handle": "bb", "bytes": 12288},
                                      {"handle": "bb", "bytes": 12288}])
    small = {"outbox": {"layouts": [layout(0, 1000)], "bytes": 4096}}
    large = {"outbox": {"layouts": [layout(0, 1000), layout(4096, 2000)], "bytes": 12288}}
    assert ev.outbox(small) == {"handle": "aa", "layouts": small["outbox"]["layouts"]}
    assert ev.outbox(small) == {"handle": "aa", "layouts": small["outbox"]["layouts"]}
    assert ev.outbox(large) == {"handle": "bb", "layouts": large["outbox"]["layouts"]}
    assert ev.outbox(small) == {"handle": "bb", "layouts": small["outbox"]["layouts"]}
    ev.clear_outbox()
    assert oracle.asked == [("outbox", {"nbytes": 4096}), ("outbox", {"nbytes": 12288}),
                            ("outbox", {"nbytes": 12288, "clear": True})]


def test_outputs_that_are_not_all_cuda_tensors_and_cpu_targets_use_files(tmp_path):
    ev, oracle = evaluator(tmp_path, [])
    assert ev.outbox({"outbox": None}) is None
    ev.clear_outbox()  # nothing to clear before any outbox exists
    ev, oracle = evaluator(tmp_path, [], arch="cpu")
    assert ev.outbox({"outbox": {"layouts": [layout(0, 1000)], "bytes": 4096}}) is None
    assert oracle.asked == []


def test_an_oracle_that_cannot_export_memory_sends_every_case_to_files_and_is_not_asked_again(tmp_path):
    ev, oracle = evaluator(tmp_path, [{"error": "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2)"}])
    case = {"outbox": {"layouts": [layout(0, 1000)], "bytes": 4096}}
    assert ev.outbox(case) is None
    assert ev.outbox(case) is None
    ev.clear_outbox()
    assert oracle.asked == [("outbox", {"nbytes": 4096})]
