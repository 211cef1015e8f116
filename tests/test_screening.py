"""The static screen flags what a judge should look at in a patched kernel, and stays quiet on honest kernels."""

import glob
import sqlite3
import textwrap
import tomllib
from pathlib import Path

import pytest

from harness import EXAMPLE_LEDGERS, example_ledger

from judge.errors import JudgeError
from judge.stages.patch import apply_patch
from judge.stages.screen.stage import RULES, Flag, added_lines, screen, screen_patch
from judge.targets import load_target

ROOT = Path(__file__).resolve().parent.parent
FP8 = ROOT / "kernels/fp8_group_gemm_sm90/submission.py"
NVFP4 = ROOT / "kernels/nvfp4_group_gemm/submission.py"
FIXTURES = ROOT / "tests/fixtures/screening"
FRAMES = "reads the call stack: its callers' frames and their locals (judge's runner, the input sets it holds)"


def flags(source: str) -> list[tuple[str, int, str]]:
    return [(f.rule, f.line, f.why) for f in screen(textwrap.dedent(source))]


def found(source: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in screen(textwrap.dedent(source))]


# ---- the honest kernels ------------------------------------------------------------------------------

# The only flags on the honest kernels: their compile, SM-count and launch-metadata caches, module-level state
# kept across calls, reported with their keys. The NVFP4 base keys its metadata (pointers, sizes, strides on
# the device) on the inputs' addresses: state a shark should see named, though it holds no answers.
BASE_FLAGS = {
    "kernels/fp8_group_gemm_sm90/submission.py": [
        ("cache-by-identity", 383, "writes module-level dict _compiled in _get_compiled(), keyed on _config()"),
        ("cache-by-identity", 401, "writes module-level dict _num_sms in custom_kernel(), keyed on device"),
    ],
    "kernels/nvfp4_group_gemm/submission.py": [
        ("cache-by-identity", 777, "writes module-level OrderedDict _metadata in _launch_arguments(), keyed on "
         "metadata_key(abc_tensors, sf_reordered, problem..."),
        ("cache-by-identity", 779, "mutates module-level OrderedDict _metadata with .popitem() in _launch_arguments()"),
        ("cache-by-identity", 792,
         "writes module-level dict _compiled in custom_kernel(), keyed on tuple(sorted(_knobs().items()))"),
    ],
}


def test_the_base_kernels_give_only_their_keyed_caches():
    for path, expected in BASE_FLAGS.items():
        assert [(f.rule, f.line, f.why) for f in screen((ROOT / path).read_text())] == expected, path
    assert screen(FP8.read_text())[0].text == "_compiled[key] = _compile()"


@pytest.mark.parametrize(
    "path",
    sorted({str(Path(p).relative_to(ROOT)) for pattern in ("kernels/*/submission.py", "tests/fixtures/**/submission.py")
            for p in glob.glob(str(ROOT / pattern), recursive=True)}),
)
def test_every_honest_kernel_in_the_repository_screens_clean(path):
    assert [(f.rule, f.line, f.why) for f in screen((ROOT / path).read_text())] == BASE_FLAGS.get(path, [])


# The CPU example target ships cheats on purpose: what the sharks see for each. The Hopper contest's cluster
# proposals keep the SM count per device in a module-level dict: state a shark should see named.
CLUSTERS = [("cache-by-identity", 494), ("cache-by-identity", 496)]
EXAMPLE_FLAGS = {
    "vecadd_cpu/faster-clock": [("timing", 16), ("timing", 17), ("monkeypatch", 18), ("timing", 18)],
    "vecadd_cpu/reuse-answer": [("cache-by-identity", 14), ("cache-by-identity", 15), ("cache-by-identity", 16)],
    "fp8_group_gemm_sm90/cluster-1x2-multicast-a": [("cache-by-identity", 454), ("cache-by-identity", 456)],
    "fp8_group_gemm_sm90/cluster-1x2-multicast-a-v2": CLUSTERS,
    "fp8_group_gemm_sm90/cluster-1x4-multicast-a": CLUSTERS,
}
CONTEST = ROOT / "docs/examples/fp8-contest/fp8-contest.db.xz"  # shipped compressed: the tree travels to GPUs


@pytest.fixture(scope="module")
def contest(tmp_path_factory) -> Path:
    return example_ledger(CONTEST, tmp_path_factory.mktemp("contest"))


def _round_base(target: str, round: int, contest: Path) -> str:
    """A proposal's base: the target's kernel in round 1, later the Hopper contest's compounded base."""
    if round == 1:
        return (ROOT / "kernels" / target / "submission.py").read_text()
    with sqlite3.connect(contest) as con:
        [(source,)] = con.execute("select base_source from rounds where target = ? and round = ?", (target, round))
    return source


@pytest.mark.parametrize("patch", sorted(glob.glob(str(ROOT / "proposals/**/patch.diff"), recursive=True)))
def test_the_example_proposals_flags(patch, contest):
    meta = tomllib.loads((Path(patch).parent / "proposal.toml").read_text())
    base = _round_base(meta["target"], meta["round"], contest)
    text = Path(patch).read_text()
    forbidden = load_target(ROOT / "kernels" / meta["target"]).forbidden
    flags = screen_patch(base, apply_patch(base, text, "submission.py"), text, forbidden)
    assert [(f.rule, f.line) for f in flags] == EXAMPLE_FLAGS.get(f"{meta['target']}/{meta['id']}", [])


@pytest.mark.parametrize("shipped", EXAMPLE_LEDGERS, ids=lambda p: p.name)
def test_the_patches_of_the_example_ledgers_get_the_flags_of_their_proposals(shipped, tmp_path):
    with sqlite3.connect(example_ledger(shipped, tmp_path)) as con:
        bases = dict(con.execute("select round, base_source from rounds"))
        rows = con.execute("select proposal_id, target, round, patch from revisions where patch is not null").fetchall()
    assert rows
    for proposal, target, round, patch in rows:
        flags = screen_patch(bases[round], apply_patch(bases[round], patch, "submission.py"), patch)
        assert [(f.rule, f.line) for f in flags] == EXAMPLE_FLAGS.get(f"{target}/{proposal}", []), proposal


def test_a_patch_that_caches_results_on_data_ptr_is_flagged_on_its_added_lines():
    base = FP8.read_text()
    patch = (FIXTURES / "result-cache.diff").read_text()
    patched = apply_patch(base, patch, "submission.py")
    assert sorted(added_lines(patch)) == [388, 394, 395, 396, 424, 425]
    assert [(f.rule, f.line, f.text, f.why) for f in screen_patch(base, patched, patch)] == [
        ("cache-by-identity", 395, "if key in _results:", "tests whether data_ptr() is in _results"),
        ("cache-by-identity", 396, "return _results[key]", "looks up _results[...] keyed on data_ptr()"),
        ("timing", 424, "torch.cuda.synchronize()", "calls torch.cuda.synchronize"),
        ("cache-by-identity", 425, "_results[key] = c",
         "writes module-level dict _results in custom_kernel(), keyed on data_ptr()"),
    ]
    # The whole file still has the base's caches (moved down by four lines); the patch screen leaves them out.
    assert ("cache-by-identity", 405) in [(f.rule, f.line) for f in screen(patched)]


# ---- added lines and screen_patch ---------------------------------------------------------------------

BASE = "".join(f"x{i} = {i}\n" for i in range(1, 21))
TWO_HUNKS = """--- a/submission.py
+++ b/submission.py
@@ -2,3 +2,4 @@
 x2 = 2
+import time
 x3 = 3
 x4 = 4
@@ -15,3 +16,4 @@
 x15 = 15
-x16 = 16
+x16 = time.perf_counter()
+x16b = 1
 x17 = 17
"""


def test_added_lines_of_a_two_hunk_diff():
    assert added_lines(TWO_HUNKS) == {3, 17, 18}


def test_added_lines_refuses_what_judge_refuses():
    with pytest.raises(JudgeError):
        added_lines("not a diff\n")


def test_screen_patch_flags_only_the_added_lines():
    base = BASE + "import os\nos.system('true')\n"
    patched = apply_patch(base, TWO_HUNKS, "submission.py")
    assert [(f.rule, f.line, f.why) for f in screen_patch(base, patched, TWO_HUNKS)] == [
        ("timing", 17, "calls time.perf_counter"),
    ]
    assert ("subprocess", 24) in [(f.rule, f.line) for f in screen(patched)]  # the base's own line: not reported


def test_a_hunk_header_that_lies_about_its_lines_does_not_hide_them():
    lying = TWO_HUNKS.replace("@@ -15,3 +16,4 @@", "@@ -15,3 +2,4 @@")
    patched = apply_patch(BASE, lying, "submission.py")  # judge applies the hunk at its context
    assert [(f.rule, f.line) for f in screen_patch(BASE, patched, lying)] == [("timing", 17)]


def test_an_untouched_line_whose_meaning_the_patch_changes_is_reported_and_says_so():
    base = textwrap.dedent("""\
        _cache = {}
        def custom_kernel(data):
            a, out = data
            key = (a.shape[0], a.dtype)
            if key not in _cache:
                _cache[key] = out
            return _cache[key]
        """)
    patch = "--- a/submission.py\n+++ b/submission.py\n@@ -4,1 +4,1 @@\n-    key = (a.shape[0], a.dtype)\n+    key = a.data_ptr()\n"
    patched = apply_patch(base, patch, "submission.py")
    assert [(f.rule, f.line, f.why) for f in screen_patch(base, patched, patch)] == [
        ("cache-by-identity", 5, "untouched line, new with this patch: tests whether data_ptr() is in _cache"),
        ("cache-by-identity", 6,
         "untouched line, new with this patch: writes module-level dict _cache in custom_kernel(), keyed on data_ptr()"),
        ("cache-by-identity", 7, "untouched line, new with this patch: looks up _cache[...] keyed on data_ptr()"),
    ]
    assert flags(base) == [("cache-by-identity", 6, "writes module-level dict _cache in custom_kernel(), keyed on dtypes, shapes")]


def test_a_patched_file_that_does_not_parse_gives_one_unparsable_flag():
    patch = "--- a/submission.py\n+++ b/submission.py\n@@ -3,1 +3,1 @@\n-x3 = 3\n+def f(:\n"
    patched = apply_patch(BASE, patch, "submission.py")
    assert [(f.rule, f.line, f.text) for f in screen_patch(BASE, patched, patch)] == [("unparsable", 3, "def f(:")]
    variant = (ROOT / "tests/fixtures/compile/scale/variants/syntax.py").read_text()
    assert flags(variant) == [("unparsable", 4, "does not parse: expected ':'")]


# ---- the API ------------------------------------------------------------------------------------------

def test_flags_round_trip_and_name_known_rules_with_short_text():
    flag = Flag("timing", 3, "t = time.time()", "calls time.time")
    assert Flag.from_json(flag.to_json()) == flag
    assert flag.to_json() == {"rule": "timing", "line": 3, "text": "t = time.time()", "why": "calls time.time"}
    assert set(RULES) == {"monkeypatch", "sys-modules", "threads", "hooks", "subprocess", "file-io", "network",
                          "cache-by-identity", "sleep", "timing", "reference", "indirection", "frames", "introspection",
                          "env", "dynamic-code", "forbidden-call", "unparsable"}
    long = "import time\nx = time.time()" + " + 1" * 60 + "\n"
    [only] = screen(long)
    assert len(only.text) == 120 and only.text.startswith("x = time.time() + 1")


def test_only_lines_and_one_flag_per_rule_and_line():
    source = "import time\na = time.time(); b = time.perf_counter()\nc = time.monotonic()\n"
    assert found(source) == [("timing", 2), ("timing", 3)]
    assert [f.line for f in screen(source, only_lines={3})] == [3]


# ---- each rule: a positive and a near miss ---------------------------------------------------------------

def test_monkeypatch():
    assert flags("""\
        import torch, time, builtins
        from reference import check_implementation as chk
        torch.cuda.Event.elapsed_time = lambda self, end: 0.001
        setattr(time, "perf_counter", lambda: 0.0)
        builtins.print = None
        chk.__code__ = (lambda *a: (True, "")).__code__
        torch.__dict__["matmul"] = None
        """) == [
        ("reference", 2, "imports reference.check_implementation"),
        ("monkeypatch", 3, "assigns torch.cuda.Event.elapsed_time"),
        ("timing", 3, "assigns torch.cuda.Event.elapsed_time"),
        ("monkeypatch", 4, "calls setattr on time.perf_counter"),
        ("monkeypatch", 5, "assigns builtins.print"),
        ("introspection", 6, "uses (lambda *a: (True, '')).__code__"),
        ("monkeypatch", 6, "assigns reference.check_implementation.__code__: swaps the function's code: same name and "
                           "identity, other behaviour"),
        ("reference", 6, "assigns reference.check_implementation.__code__"),
        ("introspection", 7, "reads torch.__dict__"),
        ("monkeypatch", 7, "writes torch.__dict__[...]"),
    ]
    # Near miss: attributes of its own objects, outputs written in place, torch functions named add.
    assert found("""\
        import torch
        class K:
            def __init__(self):
                self.tile = 128
        def custom_kernel(data):
            a, b, out = data
            out[0] = 1
            torch.add(a, b, out=out)
            setattr(K, "tile", 64)
            return out
        """) == []


def test_sys_modules():
    assert flags("""\
        import sys, importlib
        sys.modules["reference"].ref_kernel = lambda d: d
        importlib.reload(sys)
        m = __import__("os")
        """) == [
        ("monkeypatch", 2, "assigns reference.ref_kernel"),
        ("reference", 2, "assigns reference.ref_kernel"),
        ("sys-modules", 2, "uses sys.modules"),
        ("sys-modules", 3, "calls importlib.reload"),
        ("sys-modules", 4, "calls __import__"),
    ]
    assert found("import sys\nprint(sys.version_info >= (3, 11))\n") == []


def test_threads():
    assert flags("""\
        import threading
        from concurrent.futures import ThreadPoolExecutor
        threading.Thread(target=print).start()
        """) == [
        ("threads", 1, "imports threading"),
        ("threads", 2, "imports concurrent.futures.ThreadPoolExecutor"),
        ("threads", 3, "calls threading.Thread"),
    ]
    assert found("import cutlass\ndef f(pipeline):\n    pipeline.producer_tail(1)\n    cutlass.range(4)\n") == []


def test_subprocess():
    assert flags("import os\nos.system('nvidia-smi')\nos.execv('/bin/sh', [])\n") == [
        ("subprocess", 2, "calls os.system"), ("subprocess", 3, "calls os.execv"),
    ]
    assert found("import os\nn = os.cpu_count()\np = os.path.join('a', 'b')\n") == []


def test_file_io():
    assert flags("""\
        import torch
        from pathlib import Path
        def custom_kernel(data):
            with open("/tmp/answers.pt", "rb") as f:
                pass
            Path("/tmp/x").write_text("1")
            return torch.load("/tmp/answers.pt")
        """) == [
        ("file-io", 2, "imports pathlib.Path"),
        ("file-io", 4, "calls open"),
        ("file-io", 6, "calls Path('/tmp/x').write_text"),
        ("file-io", 7, "calls torch.load"),
    ]
    # Near miss: a method named open on a local object; the builtin shadowed by the kernel's own function.
    assert found("def open(x):\n    return x\ndef f(tmem):\n    tmem.open(1)\n    return open(2)\n") == []


def test_network():
    assert flags("import urllib.request\nurllib.request.urlopen('http://x')\n") == [
        ("network", 1, "imports urllib.request"), ("network", 2, "calls urllib.request.urlopen"),
    ]
    assert found("url = 'https://github.com/NVIDIA/cutlass'\n") == []


def test_cache_by_identity_keyed_on_data_ptr():
    assert flags("""\
        _cache = {}
        _last = None
        def custom_kernel(data):
            global _last
            a, b, c = data
            key = (a.data_ptr(), b.data_ptr())
            if key in _cache:
                return _cache[key]
            if id(a) == _last:
                return c
            _last = id(a)
            _cache[key] = c
            return c
        """) == [
        ("cache-by-identity", 7, "tests whether data_ptr() is in _cache"),
        ("cache-by-identity", 8, "looks up _cache[...] keyed on data_ptr()"),
        ("cache-by-identity", 9, "compares id() with module-level _last"),
        ("cache-by-identity", 11, "stores id() in module-level _last"),
        ("cache-by-identity", 12, "writes module-level dict _cache in custom_kernel(), keyed on data_ptr()"),
    ]


def test_cache_by_identity_reports_honest_caches_with_their_key():
    assert flags("""\
        import functools
        _plans = {}
        _seen = []
        def custom_kernel(data, _memo={}):
            a, b, out = data
            m, k = a.shape
            n = b.shape[0]
            _plans[(m, n, k)] = 1
            _plans[a] = 2
            _seen.append(hash(a))
            return out
        @functools.lru_cache(maxsize=None)
        def plan(m, n, k):
            return m
        """) == [
        ("cache-by-identity", 4, "custom_kernel() has a mutable default _memo={} (kept across calls)"),
        ("cache-by-identity", 8, "writes module-level dict _plans in custom_kernel(), keyed on shapes"),
        ("cache-by-identity", 9, "writes module-level dict _plans in custom_kernel(), keyed on a, from argument data"),
        ("cache-by-identity", 10, "passes hash() to module-level _seen.append()"),
        ("cache-by-identity", 12, "memoizes plan() with functools.lru_cache, keyed on its arguments (m, n, k)"),
    ]


def test_cache_by_identity_near_misses():
    # Pointers handed to a launch, a local dict keyed on sizes, a barrier's data_ptr() inside a pipeline,
    # an aliasing check between two arguments, a module-level table only read.
    assert found("""\
        TABLE = {128: 4}
        def custom_kernel(data):
            a, out = data
            launch(a.data_ptr(), out.data_ptr(), stages=TABLE[128])
            ptrs = [t.data_ptr() for t in data]
            pipe = make_pipeline(barrier_storage=storage.data_ptr())
            stage = pipe.acquire()
            local = {}
            local[a.shape[0]] = ptrs[0]
            x = buffers[stage.index]
            if a.data_ptr() == out.data_ptr():
                raise ValueError("in place")
            return out
        """) == []


def test_sleep():
    assert flags("""\
        import time, torch
        torch.cuda._sleep(1_000_000)
        start = time.perf_counter()
        while time.perf_counter() - start < 0.001:
            pass
        """) == [
        ("sleep", 2, "calls torch.cuda._sleep"),
        ("timing", 3, "calls time.perf_counter"),
        ("sleep", 4, "busy-waits on time.perf_counter"),
        ("timing", 4, "calls time.perf_counter"),
    ]
    assert found("def f(n):\n    while n > 0:\n        n -= 1\n") == []


def test_timing():
    assert flags("""\
        import torch
        from time import perf_counter as clock
        import cuda.bindings.driver as cuda
        def custom_kernel(data):
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                pass
            side.synchronize()
            cuda.cuEventRecord(None, 0)
            return clock()
        """) == [
        ("timing", 2, "imports time.perf_counter"),
        ("timing", 5, "calls torch.cuda.Stream"),
        ("timing", 6, "calls torch.cuda.stream"),
        ("timing", 8, "calls side.synchronize"),
        ("timing", 9, "calls cuda.bindings.driver.cuEventRecord"),
        ("timing", 10, "calls time.perf_counter"),
    ]
    # Near miss: launching on the current stream, as the fp8 kernel does.
    assert found("""\
        import torch
        import cuda.bindings.driver as cuda
        s = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
        h = torch._C._cuda_getCurrentRawStream(0)
        """) == []


def test_reference():
    assert flags("""\
        import reference
        from reference import ref_kernel
        def custom_kernel(data):
            spec = open("task.yml").read()
            return reference.check_implementation(data, ref_kernel(data))
        """) == [
        ("reference", 1, "imports reference"),
        ("reference", 2, "imports reference.ref_kernel"),
        ("file-io", 4, "calls open"),
        ("reference", 4, "names task.yml in a string"),
        ("reference", 5, "calls reference.check_implementation"),
    ]
    # Near miss: the task's types, and task.yml named in a docstring.
    assert found('from task import input_t, output_t\ndef compile_kernel(spec):\n    """One task.yml spec."""\n') == []


def test_introspection():
    assert flags("""\
        import sys, gc, ctypes, torch
        from torch.utils._python_dispatch import TorchDispatchMode
        def custom_kernel(data):
            caller = sys._getframe(1).f_back
            everything = gc.get_objects()
            globals()["custom_kernel"] = None
            return torch._C._set_grad_enabled(False)
        class Lazy(torch.Tensor):
            pass
        """)[1:] == [
        ("introspection", 2, "imports torch.utils._python_dispatch.TorchDispatchMode"),
        ("frames", 4, "uses sys._getframe(1).f_back: " + FRAMES),
        ("introspection", 5, "calls gc.get_objects: walks the process's live objects: reaches judge's runner, its inputs "
                             "and its outputs"),
        ("introspection", 6, "writes globals()[...]"),
        ("monkeypatch", 6, "writes globals()['custom_kernel']: replaces that name for everyone who reads it"),
        ("introspection", 7, "calls torch._C._set_grad_enabled"),
        ("introspection", 8, "class Lazy subclasses torch.Tensor"),
    ]
    assert found("import gc\ngc.collect()\ndef f(x):\n    return x.__class__.__name__\n") == []


def test_env():
    assert flags("""\
        import os
        def custom_kernel(data):
            seed = os.environ.get("JUDGE_SEED")
            os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
            os.kill(os.getppid(), 9)
            return {k: v for k, v in os.environ.items()}
        """) == [
        ("env", 3, "reads os.environ['JUDGE_SEED']"),
        ("env", 4, "writes os.environ['CUDA_LAUNCH_BLOCKING']"),
        ("env", 5, "calls os.kill"),
        ("env", 6, "reads the whole os.environ (.items)"),
    ]
    # Near miss: the nvfp4 kernel's own read of the DSL's arch variable.
    assert found('import os\narch = os.environ.get("CUTE_DSL_ARCH")\nif "CUTE_DSL_ARCH" in os.environ:\n    pass\n') == []


def test_dynamic_code():
    assert flags("""\
        import base64, importlib, pickle
        exec(base64.b64decode(b"cHJpbnQoMSk="))
        mod = importlib.import_module("ti" + "me")
        importlib.import_module("time").sleep(1)
        state = pickle.loads(b"")
        """) == [
        ("dynamic-code", 1, "imports base64"),
        ("dynamic-code", 2, "calls exec on a string computed at run time: the screen cannot read the code it runs"),
        ("dynamic-code", 3, "calls importlib.import_module"),
        ("indirection", 3, "imports a module by a name built from pieces ('time')"),
        ("dynamic-code", 4, "calls importlib.import_module"),
        ("sleep", 4, "calls time.sleep"),
        ("dynamic-code", 5, "calls pickle.loads"),
    ]
    # Near miss: CuTe DSL's compile, and a kernel's own function named compile.
    assert found("""\
        import cutlass.cute as cute
        def compile(x):
            return x
        k = cute.compile(compile, 1)
        """) == []


def test_names_are_resolved_through_aliases_and_getattr():
    assert flags("""\
        import time as t
        nap = t.sleep
        nap(1)
        getattr(t, "sleep")(1)
        getattr(t, "sl" + "eep")(1)
        getattr(t, input())(1)
        """) == [
        ("sleep", 2, "uses time.sleep"),
        ("sleep", 3, "calls time.sleep"),
        ("sleep", 4, "calls time.sleep"),
        ("indirection", 5, "getattr on time with a name built from pieces ('sleep')"),
        ("sleep", 5, "calls time.sleep"),
        ("indirection", 6, "getattr on time with a name computed at run time"),
    ]


def test_cache_by_identity_state_in_globals_and_class_attributes():
    assert flags("""\
        class Plans:
            table = {}
        _out = None
        def custom_kernel(data):
            global _out
            a, b = data
            Plans.table[a.dtype] = b
            _out = b
            return b
        def helper(_out):
            _out = 1
        """) == [
        ("cache-by-identity", 7, "writes module-level Plans.table in custom_kernel(), keyed on dtypes"),
        ("cache-by-identity", 8, "rebinds module-level variable _out in custom_kernel() (kept across calls)"),
    ]


def test_flag_text_is_the_line_python_numbers_even_with_odd_line_breaks_in_comments():
    source = "import time  # \x0c\x1c looks like two more lines to str.splitlines\nt = time.time()\n"
    assert [(f.line, f.text) for f in screen(source)] == [(2, "t = time.time()")]
