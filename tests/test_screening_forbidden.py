"""A target's forbidden calls (judge.toml [rules] forbidden_calls): found however a patch spells them, counted only
where the patch adds them, and the screen stage's verdict names the call, the file:line and the line."""

import textwrap
from pathlib import Path

from judge.stages.patch import apply_patch
from judge.stages.screen.stage import screen, screen_patch, screen_stage
from judge.stages.screen.forbidden import canonical, matches, spellings
from judge.targets import ForbiddenCall, load_target

ROOT = Path(__file__).resolve().parent.parent
FP8 = ROOT / "kernels/fp8_group_gemm_sm90"
PEER = "the peer's op: the contest is to beat it, not to call it"
FORBIDDEN = [ForbiddenCall("torch._scaled_grouped_mm", "the peer"), ForbiddenCall("torch._grouped_mm", "its twin")]


def forbidden_flags(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.why) for f in screen(textwrap.dedent(source), forbidden=FORBIDDEN) if f.rule == "forbidden-call"]


def test_the_names_torch_reaches_an_operator_by():
    assert spellings("torch._grouped_mm") == ["torch._grouped_mm", "torch.ops.aten._grouped_mm",
                                              "torch._ops.ops.aten._grouped_mm",
                                              "torch._C._VariableFunctions._grouped_mm", "torch._VF._grouped_mm"]
    assert spellings("torch.nn.functional.linear") == ["torch.nn.functional.linear"]
    assert spellings("eval") == ["builtins.eval"]
    assert canonical("torch.ops.aten._grouped_mm.default") == "torch._grouped_mm.default"
    assert matches("torch.ops.aten._grouped_mm.default", "torch._grouped_mm")
    assert not matches("torch._grouped_mm_v2", "torch._grouped_mm")
    assert not matches("torch", "torch._grouped_mm")


def test_every_static_spelling_is_found():
    assert forbidden_flags("""\
        import torch
        import torch as t
        import importlib
        from torch import _scaled_grouped_mm as f
        from torch.ops import aten
        def k(a, b):
            t._scaled_grouped_mm(a, b)
            f(a, b)
            torch.ops.aten._scaled_grouped_mm.default(a, b)
            aten._grouped_mm(a, b)
            getattr(torch, "_scaled_grouped_mm")(a, b)
            getattr(torch, "_grouped" + "_mm")(a, b)
            op = torch._C._VariableFunctions._grouped_mm
            importlib.import_module("torch")._grouped_mm(a)
            exec("torch._grouped_mm(a)")
        """) == [
        (4, "imports torch._scaled_grouped_mm, which this target forbids (the peer)"),
        (7, "calls torch._scaled_grouped_mm, which this target forbids (the peer)"),
        (8, "calls torch._scaled_grouped_mm, which this target forbids (the peer)"),
        (9, "calls torch.ops.aten._scaled_grouped_mm.default (that is torch._scaled_grouped_mm), which this target "
            "forbids (the peer)"),
        (10, "calls torch.ops.aten._grouped_mm (that is torch._grouped_mm), which this target forbids (its twin)"),
        (11, "calls torch._scaled_grouped_mm, which this target forbids (the peer)"),
        (12, "calls torch._grouped_mm, which this target forbids (its twin)"),
        (13, "uses torch._C._VariableFunctions._grouped_mm (that is torch._grouped_mm), which this target forbids "
             "(its twin)"),
        (14, "calls torch._grouped_mm, which this target forbids (its twin)"),
        (15, "in the code it runs: calls torch._grouped_mm, which this target forbids (its twin)"),
    ]


def test_a_computed_name_that_could_reach_a_forbidden_call_is_a_flag_not_a_verdict():
    source = textwrap.dedent("""\
        import torch
        def k(a, name):
            getattr(torch.ops.aten, name)(a)
            __import__(name)
            getattr(a, name)
        """)
    reach = "could reach torch._scaled_grouped_mm, torch._grouped_mm, which this target forbids"
    assert [(f.rule, f.line, f.why) for f in screen(source, forbidden=FORBIDDEN)] == [
        ("indirection", 3, f"getattr on torch.ops.aten with a name computed at run time; {reach}"),
        ("indirection", 4, f"imports a module by a name computed at run time; {reach}"),
        ("sys-modules", 4, "calls __import__"),
        ("indirection", 5, "getattr on a with a name computed at run time"),
    ]
    # Without forbidden calls the same flags stand, without the clause.
    assert screen(source)[0].why == "getattr on torch.ops.aten with a name computed at run time"


def test_names_that_only_look_alike_are_not_forbidden():
    assert forbidden_flags("""\
        import torch
        def _grouped_mm(a):
            return a
        def k(a, ops):
            ops._grouped_mm(a)
            _grouped_mm(a)
            torch._grouped_mm_reference = None
            # torch._grouped_mm in a comment, and in a string:
            return "torch._grouped_mm"
        """) == []


BASE = textwrap.dedent("""\
    import torch

    def custom_kernel(data):
        a, b, out = data
        out.copy_(torch._grouped_mm(a, b))
        return out
    """)


def patch_of(new: str, base: str = BASE) -> str:
    import difflib

    return "".join(difflib.unified_diff(base.splitlines(True), new.splitlines(True), "a/submission.py", "b/submission.py"))


def test_only_the_calls_a_patch_adds_count():
    # The base's own call, edited or moved, stays the target author's choice.
    edited = BASE.replace("torch._grouped_mm(a, b)", "torch._grouped_mm(a, b.t())")
    assert screen_patch(BASE, edited, patch_of(edited), FORBIDDEN) == []
    # A second call, or the peer's op, is the patch's own.
    more = BASE.replace("    return out\n", "    out += torch._grouped_mm(b, a)\n    return torch._scaled_grouped_mm(a, b)\n")
    assert [(f.rule, f.line, f.why) for f in screen_patch(BASE, more, patch_of(more), FORBIDDEN)] == [
        ("forbidden-call", 6, "calls torch._grouped_mm, which this target forbids (its twin)"),
        ("forbidden-call", 7, "calls torch._scaled_grouped_mm, which this target forbids (the peer)"),
    ]


def test_the_screen_stage_fails_on_a_forbidden_call_and_names_it():
    more = BASE.replace("    return out\n", "    import torch as t\n    return t.ops.aten._scaled_grouped_mm(a, b)\n")
    stage = screen_stage(BASE, more, patch_of(more), FORBIDDEN, "submission.py")
    assert (stage.stage, stage.status) == ("screen", "failed")
    assert stage.summary == ("calls torch.ops.aten._scaled_grouped_mm (that is torch._scaled_grouped_mm), which this "
                             "target forbids (the peer): submission.py:7: return t.ops.aten._scaled_grouped_mm(a, b)")
    assert [f.rule for f in stage.detail.flags] == ["forbidden-call"]
    # The same patch on a target that forbids nothing passes, with no flags.
    clean = screen_stage(BASE, more, patch_of(more))
    assert (clean.status, clean.summary) == ("passed", "no flags")


def test_the_call_site_names_the_verdict_and_the_rest_are_counted():
    more = BASE.replace("    return out\n", "    from torch import _scaled_grouped_mm as g\n    out += g(a, b)\n"
                        "    return torch._grouped_mm(b, a)\n")
    stage = screen_stage(BASE, more, patch_of(more), FORBIDDEN, "kernel.py")
    assert stage.summary == ("calls torch._scaled_grouped_mm, which this target forbids (the peer): kernel.py:7: "
                             "out += g(a, b) (and 2 more forbidden lines)")


def test_the_fp8_targets_peer_op_on_the_benchmark_shapes_is_a_verdict():
    """The held-out proposal that was crowned faster at 1.084x by calling the peer on the benchmark shapes."""
    target = load_target(FP8)
    base = target.kernel_source()
    patch = (ROOT / "tests/fixtures/screening/peer-op-on-benchmark-shapes.diff").read_text()
    patched = apply_patch(base, patch, "submission.py")
    assert [(f.rule, f.line, f.text, f.why) for f in screen_patch(base, patched, patch, target.forbidden)] == [
        ("forbidden-call", 400, "from torch import _scaled_grouped_mm as grouped",
         f"imports torch._scaled_grouped_mm, which this target forbids ({PEER})"),
        ("forbidden-call", 401,
         "c.copy_(grouped(a, b.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16))",
         f"calls torch._scaled_grouped_mm, which this target forbids ({PEER})"),
    ]
    stage = screen_stage(base, patched, patch, target.forbidden, target.kernel_file)
    assert (stage.status, stage.summary) == ("failed", (
        f"calls torch._scaled_grouped_mm, which this target forbids ({PEER}): submission.py:401: "
        "c.copy_(grouped(a, b.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16)) "
        "(and 1 more forbidden line)"))
    # The base kernel and its peer's file are not candidates: the base makes no forbidden call.
    assert screen(base, forbidden=target.forbidden) == screen(base)
