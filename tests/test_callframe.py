"""judge/boundary/callframe.py, through real runners on the CPU: what a kernel leaves behind in its process after its
call (a hook, a thread, a torch mode, a kernel of its own for an operator judge copies with) is named on the
call that left it, before anything could use it; an output is taken apart without running anything of the
kernel's, and one judge does not take (a tensor subclass, a tuple or dict subclass, a class with a metaclass) is
refused; what it changed of torch or builtins is named by the audit.""" 

import collections
import importlib.util
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from judge.boundary import callframe, output_copy
from judge.sandbox import worker
from judge.stages.check import check
from judge.stages.evaluation import Evaluator
from judge.targets import load_target
from judge.stages.timing import turns
from judge.stages.timing.stage import run_timing

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "gpumode" / "vecadd"
BASE = (FIXTURE / "variants" / "correct.py").read_text()


def judged(tmp_path, mixin: str):
    target = load_target(FIXTURE)
    target.arch = "cpu"
    target.tests = target.tests[:1]
    target.benchmarks = [{"size": 20000, "seed": 1}]
    workspace = target.assemble(tmp_path / "k", BASE + "\n\n_rt_base = custom_kernel\n\n" + mixin)
    with Evaluator(target, tmp_path / "round", secret=5) as evaluator:
        return check(evaluator, workspace, nonce=0)


def test_a_profile_function_the_call_leaves_is_named(tmp_path):
    result = judged(tmp_path, "import sys\n\ndef custom_kernel(data):\n"
                              "    sys.setprofile(lambda *a: None)\n    return _rt_base(data)\n")
    assert result.status == "tampered"
    assert result.summary == "tampered: its call left a profile or trace function set"


def test_an_error_in_judge_s_copy_of_the_output_is_the_kernel_s_crash_not_a_forged_reply(tmp_path):
    """An output judge cannot copy (a meta tensor holds no data; on a GPU, a fault of the kernel's work surfaces at
    judge's sync after the call) is the kernel's error. It was read as a forged reply: the error left the call
    frame and the runner answered a command whose answer the parent already had."""
    result = judged(tmp_path, "import torch\n\ndef custom_kernel(data):\n"
                              "    out = _rt_base(data)\n    return torch.empty(out.shape, device='meta')\n")
    assert result.status == "crashed"
    assert result.summary.startswith("crashed: NotImplementedError: Cannot copy out of meta tensor; no data! "
                                     "(test 0 (size=127), first call (seed "), result.summary


def test_a_call_s_output_and_its_working_memory_are_freed_when_its_stretch_ends(tmp_path):
    """The frame's count of threads took sys._current_frames(), whose own frame held that dict: a cycle through
    the frames kept the last call's output (and an autograd graph hanging on it) alive after its stretch, until a
    collection ran. trimul's runner so held 38.5 GiB of an H200 while the oracle checked its output, which ran out
    of room (2026-11-29). Here the kernel turns collections off, so only reference counts free anything."""
    target = load_target(FIXTURE)
    target.arch = "cpu"
    target.tests = target.tests[:2]
    kernel = ("import gc, weakref\n\ngc.disable()\n_last = []\n\ndef custom_kernel(data):\n"
              "    if _last and _last[0]() is not None:\n"
              "        raise RuntimeError('the last call left its output alive')\n"
              "    out = _rt_base(data)\n    _last[:] = [weakref.ref(out)]\n    return out\n")
    workspace = target.assemble(tmp_path / "k", BASE + "\n\n_rt_base = custom_kernel\n\n" + kernel)
    with Evaluator(target, tmp_path / "round", secret=5) as evaluator:
        result = check(evaluator, workspace, nonce=0)
    assert result.status == "passed", result.summary


def test_a_thread_a_correctness_call_starts_is_a_library_pool_not_tampering(tmp_path):
    """torch.compile starts its compile workers in a shape's first call: on a correctness call that is honest."""
    result = judged(tmp_path, "import threading, time\n\ndef custom_kernel(data):\n"
                              "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                              "    return _rt_base(data)\n")
    assert result.status == "passed", result.summary


def timed(tmp_path, mixin: str):
    target = load_target(FIXTURE)
    target.arch = "cpu"
    target.benchmarks = [{"size": 20000, "seed": 1}]
    target.speed_of_light_us = []
    base = target.assemble(tmp_path / "base", BASE)
    cand = target.assemble(tmp_path / "cand", BASE + "\n\n_rt_base = custom_kernel\n\n" + mixin)
    return run_timing(target, cand, base, budget_s=1, timeout_s=300)


def test_a_timed_call_s_reply_says_when_it_arrived_and_what_its_parts_took(tmp_path):
    """Each timed call's round trip, split by the runner's own account (on the clock both processes share) into the
    way there, its parts and the way back, which add up to the parent's wall clock: tallied for
    benchmarks/pair_breakdown.py, never read by a verdict."""
    worker.COMMAND_SECONDS.clear()
    timed(tmp_path, "def custom_kernel(data):\n    return _rt_base(data)\n")
    tally, calls = worker.COMMAND_SECONDS, worker.COMMAND_SECONDS["timed"][0]
    legs = ["to the worker", "before the call", "the call and its syncs", "the checks and the output copy",
            "the rest", "back from the worker"]
    assert calls >= 2 * 3 * turns.FEWEST_STEADY  # two runners, three pairs at least
    assert [tally[f"timed.{leg} (its own account)"][0] for leg in legs] == [calls] * len(legs)
    assert math.isclose(sum(tally[f"timed.{leg} (its own account)"][1] for leg in legs), tally["timed"][1],
                        rel_tol=1e-6)
    lines = _pair_breakdown().turn_lines(tally)  # its table: one row per leg and the oracle's step
    assert lines[0].startswith(f"a timed turn: {calls} calls, ") and len(lines) == 4 + len(legs) + 1
    assert [line.split(" | ")[0] for line in lines[4:-1]] == \
        [f"| the record's round trip: {leg} (the runner's own account)" for leg in legs]


def test_pair_breakdown_splits_each_benchmark_s_turns_into_the_call_the_spin_and_judge_s_own_parts():
    module = _pair_breakdown()
    legs = {f"timed.{leg} (its own account)": [4, seconds] for leg, seconds in zip(
        module.TURN_LEGS, (0.0004, 0.002, 0.012, 0.001, 0.0002, 0.0004))}
    tally = {"timed": [4, 0.016], "turn": [5, 0.006], "call us": [4, 20_000.0], **legs}
    assert module.benchmark_turn_lines({3: tally, 4: {"timed": [0, 0.0]}})[2:] == [
        "| benchmark | calls | the kernel's call | before the call | the call, spin and syncs | checks and output copy "
        "| to, back and the rest | the oracle's step | the turn |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| 3 | 4 | 5.00 | 0.50 | 3.00 | 0.25 | 0.25 | 1.50 | 5.50 |"]


def _pair_breakdown():
    spec = importlib.util.spec_from_file_location("pair_breakdown", ROOT / "benchmarks" / "pair_breakdown.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_thread_a_timed_call_starts_is_named(tmp_path):
    result = timed(tmp_path, "import threading, time\n\ndef custom_kernel(data):\n"
                             "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                             "    return _rt_base(data)\n")
    assert result.status == "tampered"
    # The first reason is the thread's; the timing audits may add one of their own, as they read this machine's
    # clock beside other tests (a suite run on 2026-11-30 added "calls on input sets it had seen before ran 1.42x
    # faster than calls on new ones (the base: 0.46x)").
    assert result.summary.split("; ")[0] == "tampered: its call started a Python thread that was still alive after it"


def test_the_cpu_a_thread_spends_between_timed_calls_is_recorded(tmp_path):
    """A thread started at import, running only library code (no frame of the kernel's file to find): the CPU
    time it spends between the candidate's calls is recorded (honest torch.compile threads spend some too, so it
    is a fact, not a verdict); what it costs the kernel's own calls is timed, and it is never judged faster."""
    result = timed(tmp_path, "import threading, timeit\n"
                             "threading.Thread(target=timeit.timeit, kwargs={'number': 10**12}, daemon=True).start()\n"
                             "\ndef custom_kernel(data):\n    return _rt_base(data)\n")
    spent = result.detail.benchmarks[0].audit["between_calls_cpu_us"]
    assert spent["base"] is None or spent["base"] < 100  # the base has no other Python thread
    assert spent["cand"] > 1000
    assert result.status == "tampered" or result.detail.decision in ("slower", "unchanged", "inconclusive")


def test_a_torch_mode_left_active_stops_the_copy_and_is_named(tmp_path):
    result = judged(tmp_path, "from torch.utils._python_dispatch import TorchDispatchMode\n\n"
                              "class Mode(TorchDispatchMode):\n"
                              "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                              "        return func(*args, **(kwargs or {}))\n\n"
                              "def custom_kernel(data):\n    out = _rt_base(data)\n    Mode().__enter__()\n"
                              "    return out\n")
    assert result.status == "tampered"
    assert result.summary == "tampered: a torch function or dispatch mode was active after its call"


def test_a_kernel_registered_for_an_operator_judge_copies_with_is_named_on_entry(tmp_path):
    result = judged(tmp_path, "import torch\n_lib = torch.library.Library('aten', 'IMPL')\n"
                              "_lib.impl('copy_', lambda self, src, non_blocking=False: self, 'CPU')\n\n"
                              "def custom_kernel(data):\n    return _rt_base(data)\n")
    assert result.status == "tampered"
    assert result.summary == "tampered: the kernel registered a kernel of its own for an operator judge's copy uses"


BUILTINS_REPLACED = [
    ("import builtins\n_real = builtins.isinstance\n\ndef custom_kernel(data):\n"
     "    builtins.isinstance = lambda *a: _real(*a)\n    builtins.len = builtins.len\n    return _rt_base(data)\n",
     "its call replaced builtins.isinstance"),
    ("import builtins\n_real = builtins.max\nbuiltins.max = lambda *a, **k: _real(*a, **k)\ndel builtins.hash\n\n"
     "def custom_kernel(data):\n    return _rt_base(data)\n",
     "builtins.hash, builtins.max replaced since before the kernel's import"),
    ("import builtins\n_real = builtins.isinstance\n\ndef _rt_broken(*args):\n    raise TypeError('arg 2 must be a type')\n\n"
     "def custom_kernel(data):\n    out = _rt_base(data)\n    builtins.isinstance = builtins.len = _rt_broken\n"
     "    return out\n",
     "its call replaced builtins.isinstance, builtins.len"),
    (RAISES_WITH_HOOK := "import builtins, sys\n_real = builtins.isinstance\n\ndef custom_kernel(data):\n"
     "    if sys._getframe(1).f_code.co_name == 'serve_calls':  # judge's calls, not the warm-up's\n"
     "        builtins.isinstance = lambda *a: _real(*a)\n        raise TypeError('arg 2 must be a type')\n"
     "    return _rt_base(data)\n",
     "its call replaced builtins.isinstance"),
]


@pytest.mark.parametrize("mixin, found", BUILTINS_REPLACED, ids=["on-the-call", "at-import", "breaking-the-runner-after", "on-a-call-that-raised"])
def test_a_replaced_builtin_is_named_on_the_call_that_replaced_it_or_on_entry(tmp_path, mixin, found):
    """The frame looks no builtin up, but a hook the kernel hangs on one reaches the runner's own code after the
    stretch: on an H200 (2026-11-29) the red team's one-shot hooks broke the runner's torch.cuda.is_available, and the
    FP8 kernel's half-zero output came out `crashed`. The call's flags are now read before the runner runs again, and
    a call that raised is named too: the hook, not the crash, is the verdict. Putting a builtin back is no change."""
    result = judged(tmp_path, mixin)
    assert (result.status, result.summary) == ("tampered", f"tampered: {found}")


def test_a_timed_call_that_raised_after_replacing_a_builtin_is_tampered_not_crashed(tmp_path):
    """The frame's flag, then the runner's audit after the stage, which finds the builtin still replaced."""
    result = timed(tmp_path, RAISES_WITH_HOOK)
    assert (result.status, result.summary) == (
        "tampered", "tampered: its call replaced builtins.isinstance; builtins.isinstance replaced")


def test_an_output_that_is_not_plain_tensors_is_refused(tmp_path):
    result = judged(tmp_path, "import torch\n\nclass Lazy(torch.Tensor):\n    pass\n\n"
                              "def custom_kernel(data):\n    return _rt_base(data).as_subclass(Lazy)\n")
    assert result.status == "failed"
    assert result.detail.cases[0].reason == "output is a tensor subclass (Lazy): judge copies plain tensors only"


def test_a_tensor_method_replaced_to_finish_work_later_is_named_and_reaches_nothing(tmp_path):
    result = judged(tmp_path, "import torch\n_real = torch.Tensor.double\n_late = {}\n\n"
                              "def _finish(self, *a, **k):\n"
                              "    job = _late.pop(id(self), None)\n"
                              "    if job is not None:\n        self.copy_(job)\n"
                              "    return _real(self, *a, **k)\n\n"
                              "torch.Tensor.double = _finish\n\n"
                              "def custom_kernel(data):\n    out = _rt_base(data)\n    _late[id(out)] = out.clone()\n"
                              "    out.zero_()\n    return out\n")
    assert result.status == "tampered"
    assert result.summary == "tampered: torch.Tensor.double replaced (shadowing its base class's)"
    assert not any(c.passed for c in result.detail.cases)  # judge never called it: the zeros were what it read


def test_an_audit_hook_is_refused_and_never_runs(tmp_path):
    """The hook would zero every output in judge's own calls after the clock; refused, it never runs, and a
    refusal is no evidence (libraries such as filelock add one)."""
    result = judged(tmp_path, "import sys\n_outs = []\n\ndef _spoil(event, args):\n    for t in _outs:\n"
                              "        t.zero_()\n\nsys.addaudithook(_spoil)\n\n"
                              "def custom_kernel(data):\n    out = _rt_base(data)\n    _outs.append(out)\n"
                              "    return out\n")
    assert result.status == "passed", result.summary


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="torch.compile on a CPU needs a C++ compiler")
def test_a_torch_compile_kernel_changes_nothing_judge_compares(tmp_path):
    """torch.compile patches torch on its first compile; judge lets torch do so before its snapshot."""
    result = judged(tmp_path, "import torch\n\ncustom_kernel = torch.compile(_rt_base)\n")
    assert result.status == "passed", result.summary


def test_the_frame_refuses_primitives_that_are_not_c_code():
    # os.write, not print: Ray's driver replaces builtins.print with a Python function (ray.experimental.tqdm_ray)
    values = {"read": len, "write": os.write, "perf": lambda: 0.0, "type": type, "mine": object}
    assert callframe.not_c_level(values) == ["perf"]
    assert callframe.command(7, callframe.OP_CALL, "gpu", 3, 100, 5, 60) == callframe.COMMAND.pack(
        b"JCAL", 7, 1, 1, 3, 100, 5, 60)
    assert callframe.COMMAND.size == 36


# ---- the frame's copy of an output, in this process -------------------------------------------------------

torch = pytest.importorskip("torch")
OUTBOX = 1 << 16


@pytest.fixture(scope="module")
def take():
    prims = callframe.Primitives()
    assert callframe.not_c_level(prims.values) == []
    return output_copy.taker(prims.values, prims.objects)


def taken(take, out):
    """(the description as the oracle reads it, the tensors it reads back, the problem) of the frame's copy."""
    from judge.boundary import exchange

    box = torch.zeros(OUTBOX, dtype=torch.uint8)
    leaves, structure, problem, _ = take(out, {"host": (box, OUTBOX), "device": (None, 0)})
    if problem:
        assert (leaves, structure) == (b"", b"null")
        return None, [], problem
    tensors = []
    for area, dtype, offset, shape, stride in json.loads(b"[" + leaves + b"]"):
        layout = {"offset": offset, "dtype": callframe.DTYPE_NAMES[dtype], "shape": shape, "stride": stride}
        size = exchange.span(shape, stride, exchange.itemsize(layout["dtype"]))
        tensors.append(box[offset:offset + size].view(getattr(torch, layout["dtype"])).as_strided(shape, stride))
    return json.loads(structure), tensors, ""


def test_the_frame_describes_named_tuples_numbers_and_dicts_as_judge_s_skeleton_does(take):
    """Its description is judge.boundary.exchange's, written with the frame's own primitives: the same text the
    trusted skeleton gives, and the oracle rebuilds the same output from it."""
    from judge.boundary import exchange

    Pair = collections.namedtuple("Pair", "left right")
    x = torch.randn(3, 4)
    out = (torch.max(x, dim=1), 2.5, [True, None, -7, float("-inf")], {"k": Pair(x.t(), 1e300), 3: torch.linalg.qr(x)})
    tree, tensors, problem = taken(take, out)
    assert problem == ""
    assert tree == exchange.skeleton(out, output=True)[0]
    assert tree["tuple"][0] == {"fields": ["values", "indices"], "tuple": [{"tensor": 0}, {"tensor": 1}]}
    assert tree["tuple"][3]["dict"][1][0] == 3  # an int key stays an int
    rebuilt = exchange.build_output(tree, tensors, like=out)
    assert type(rebuilt[0]) is torch.return_types.max and type(rebuilt[3][3]) is torch.return_types.linalg_qr
    assert type(rebuilt[3]["k"]) is Pair  # the reference's own class, the fields matching
    assert torch.equal(rebuilt[3]["k"].left, x.t()) and rebuilt[3]["k"].left.stride() == x.t().stride()
    assert rebuilt[1:3] == (2.5, [True, None, -7, float("-inf")]) and rebuilt[3]["k"].right == 1e300


def test_a_named_tuple_is_read_through_tuple_s_own_slots_never_its_class_s(take):
    """A class collections.namedtuple could have made (its own _fields, tuple its only base, metaclass type) is
    taken; its items are the ones the tuple holds, whatever its __iter__, __len__ or __getitem__ would say."""
    ran = []

    class Sly(tuple):
        _fields = ("a", "b")

        def __iter__(self):
            ran.append("__iter__")
            return iter((torch.zeros(1), 0))

        def __len__(self):
            ran.append("__len__")
            return 2

        def __getitem__(self, index):
            ran.append("__getitem__")
            return torch.zeros(1)

    tree, tensors, problem = taken(take, Sly((torch.ones(2), 5)))
    assert problem == "" and ran == []
    assert tree == {"fields": ["a", "b"], "tuple": [{"tensor": 0}, {"value": 5}]}
    assert torch.equal(tensors[0], torch.ones(2))


def test_outputs_that_could_run_code_when_read_are_refused_with_their_place_and_nothing_of_theirs_runs(take):
    ran = []

    class Meta(type):
        def __getattribute__(cls, name):
            ran.append(name)
            return type.__getattribute__(cls, name)

        def __eq__(cls, other):
            ran.append("__eq__")
            return False

        def __hash__(cls):
            ran.append("__hash__")
            return 0

    class Posing(tuple, metaclass=Meta):  # a named tuple in all but its metaclass
        _fields = ("a",)

    class Sneaky(tuple):  # no _fields: a tuple subclass that is no named tuple
        def __iter__(self):
            ran.append("__iter__")
            return iter(())

        def __len__(self):
            ran.append("__len__")
            return 0

    class Mapping(dict):
        def items(self):
            ran.append("items")
            return {}.items()

    class Lazy(torch.Tensor):
        pass

    class Key(str):
        def __eq__(self, other):
            ran.append("Key.__eq__")
            return False

        def __hash__(self):
            return hash("_fields")

    # a namespace key that is no str, hashed as "_fields": a lookup of "_fields" there would run its __eq__
    Keyed = type("Keyed", (tuple,), {Key("x"): 0, "_fields": ("a",)})
    ran.clear()  # making the namespace compared the two keys

    def problem(out):
        return taken(take, out)[2]

    x = torch.ones(2)
    assert problem((x, Posing((x,)))) == ("output[1] is a Posing: an output is made of plain tensors, Python numbers "
                                          "(int, float, bool), None, and tuples (torch's and collections' named "
                                          "tuples included), lists and dicts of them")
    assert problem([Sneaky((x,))]) == ("output[0] is a Sneaky, a tuple subclass that is no named tuple (neither "
                                       "torch's nor one made by collections.namedtuple)")
    assert problem({"m": Mapping(a=x)}).startswith("output['m'] is a Mapping: an output is made of plain tensors")
    assert problem((x, x.as_subclass(Lazy))) == "output[1] is a tensor subclass (Lazy): judge copies plain tensors only"
    assert problem(Keyed((x,))) == "output is a Keyed, a tuple subclass whose namespace has keys that are not str"
    bad_key = "output is a dict with a key that is not a str (of at most 200 characters) or an int"
    assert problem({Key("k"): x}) == bad_key and problem({1.5: x}) == bad_key
    assert problem([x, "text"]).startswith("output[1] is a str: an output is made of plain tensors")
    assert problem((x, 1 << 64)) == "output[1] is an int past 2**64, which judge does not compare"
    assert problem(collections.namedtuple("Two", "a b")(x, x)[:1] + (x,)) == ""  # a plain tuple again
    nested = x
    for _ in range(17):
        nested = [nested]
    assert problem(nested) == "output[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0] is nested more than 16 deep"
    assert problem([0] * 1024) == "the output has more than 1024 parts"
    assert ran == []


def test_an_output_larger_than_the_device_outbox_goes_to_the_host_outbox():
    """A runner's device outbox holds the reference's output once (judge.boundary.staging.outbox_need); a kernel
    that returns a wider dtype or a padded layout, which a problem's checker may still accept, has that tensor
    copied to its host outbox instead of being refused. Here CPU tensors stand in for GPU ones."""
    prims = callframe.Primitives()
    values = {**prims.values, "is_cuda": lambda tensor: True}
    take_here = output_copy.taker(values, prims.objects)
    device, host = torch.zeros(8192, dtype=torch.uint8), torch.zeros(OUTBOX, dtype=torch.uint8)
    fits, wider = torch.arange(1024, dtype=torch.float32), torch.arange(1024, dtype=torch.float64)
    leaves, _, problem, _ = take_here((fits, wider), {"device": (device, 4096), "host": (host, OUTBOX)})
    assert problem == ""
    assert json.loads(b"[" + leaves + b"]") == [["device", 0, 0, [1024], [1]], ["host", 3, 0, [1024], [1]]]  # float64
    assert torch.equal(device[:4096].view(torch.float32), fits) and torch.equal(host[:8192].view(torch.float64), wider)
    _, _, problem, _ = take_here((wider,), {"device": (device, 4096), "host": (host, 4096)})
    assert problem == "the output is larger than the outbox judge sized from the reference's outputs"
