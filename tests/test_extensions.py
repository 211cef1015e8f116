"""judge/extensions.py declares every hook a target can provide; loading a target (judge/targets.py, through
judge/target_hooks.py) reads the hooks its judge.toml asks for, without running them, and names the first one that
is missing, is no function or takes other arguments than judge passes, in one line."""

import shutil
from pathlib import Path

import pytest

from judge.errors import JudgeError
from judge.extensions import STATIC_RULES
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.parent for p in [*ROOT.glob("kernels/*/task.yml"), *ROOT.glob("tests/fixtures/gpumode/*/task.yml")])
SCALE = ROOT / "tests" / "fixtures" / "compile" / "scale"
CPU_TARGET = ROOT / "kernels" / "vecadd_cpu"
SEE = "(see judge/extensions.py)"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_target_still_loads(path):
    load_target(path)


def test_the_fixture_targets_with_hooks_load():
    for path in (SCALE, ROOT / "tests" / "fixtures" / "axpy"):
        load_target(path)


def test_every_rule_judge_implements_is_declared_and_every_declared_rule_is_implemented():
    from judge.stages.static.rules import RULES

    assert sorted(RULES) == sorted(STATIC_RULES)


@pytest.fixture
def scale(tmp_path):
    dest = tmp_path / "scale"
    shutil.copytree(SCALE, dest)
    return dest


def _kernel_with(dest: Path, old: str, new: str) -> None:
    kernel = dest / "submission.py"
    text = kernel.read_text()
    assert old in text
    kernel.write_text(text.replace(old, new, 1))


def _error(dest: Path) -> str:
    with pytest.raises(JudgeError) as caught:
        load_target(dest)
    return caught.value.message


def test_a_missing_compile_hook_is_named(scale):
    _kernel_with(scale, "def compile_kernel(", "def compile_it(")
    assert _error(scale) == (f"{scale}: submission.py defines no compile_kernel, which judge.toml's [compile] entry "
                             f"asks for {SEE}")


def test_a_compile_hook_of_the_wrong_arity_is_named(scale):
    _kernel_with(scale, 'def compile_kernel(spec: dict, options: str = ""):', "def compile_kernel(spec: dict):")
    assert _error(scale) == f"{scale}: submission.py's compile_kernel takes 1 argument, judge calls it with 2 {SEE}"


def test_a_compile_signature_of_the_wrong_arity_is_named(scale):
    _kernel_with(scale, "def compile_signature(spec: dict) -> dict:", "def compile_signature(spec, arch, extra):")
    assert _error(scale) == (f"{scale}: submission.py's compile_signature takes 3 arguments, judge calls it with 1 "
                             f"{SEE}")


def test_a_hook_that_is_not_callable_is_named(scale):
    kernel = scale / "submission.py"
    kernel.write_text(kernel.read_text() + '\ncompile_kernel = "later"\n')
    assert _error(scale) == f"{scale}: submission.py's compile_kernel is a str, not a function {SEE}"


def test_what_a_read_cannot_follow_is_taken_as_it_is(scale):
    """An alias is read through; an import, a decorator or a call's result is left to the compile child."""
    kernel = scale / "submission.py"
    text = kernel.read_text()
    kernel.write_text(text.replace("def compile_kernel(", "def _compile_it(", 1) + "\ncompile_kernel = _compile_it\n")
    load_target(scale)
    kernel.write_text(text.replace("def compile_kernel(spec: dict, options: str = \"\"):",
                                   "@functools.cache\ndef compile_kernel(spec):", 1))
    load_target(scale)
    kernel.write_text(text.replace("def compile_kernel(", "def _compile_it(", 1)
                      + "\ncompile_kernel = functools.partial(_compile_it)\n")
    load_target(scale)


def test_a_kernel_file_that_does_not_parse_is_named(scale):
    kernel = scale / "submission.py"
    kernel.write_text(kernel.read_text() + "\ndef broken(:\n")
    message = _error(scale)
    assert message.startswith(f"{scale}: submission.py does not parse (line ")
    assert message.endswith(f"judge cannot find its custom_kernel {SEE}")  # GPU MODE's contract is read first


@pytest.fixture
def layout(tmp_path):
    dest = tmp_path / "vecadd_cpu"
    shutil.copytree(CPU_TARGET, dest)
    toml = dest / "judge.toml"
    toml.write_text(toml.read_text() + '\n[static]\nlayout_checks = "layout_checks.py"\n')
    return dest


@pytest.mark.parametrize("source,message", [
    ("def check_a(kernel, reference, rng):\n    return 'ok'\n",
     "layout_checks.py defines no CHECKS, the list of layout checks judge.toml's [static] layout_checks asks for"),
    ("def check_a(kernel, reference):\n    return 'ok'\n\nCHECKS = [check_a]\n",
     "layout_checks.py's check_a takes 2 arguments, judge calls it with 3"),
    ("CHECKS = [check_a]\n", "layout_checks.py's CHECKS[0] names check_a, which layout_checks.py does not define"),
    ("CHECKS = {'a': 1}\n", "layout_checks.py's CHECKS is a dict, not a list of layout checks"),
    ("CHECKS = [lambda kernel, reference, rng: 'ok', 'check_b']\n", "layout_checks.py's CHECKS[1] is a str, not a "
                                                                    "function"),
])
def test_layout_checks_are_read_against_their_declaration(layout, source, message):
    (layout / "layout_checks.py").write_text(source)
    assert _error(layout) == f"{layout}: {message} {SEE}"


def test_layout_checks_that_fit_load(layout):
    (layout / "layout_checks.py").write_text("def check_a(kernel, reference, rng=None):\n    return 'ok'\n\n"
                                             "CHECKS = [check_a, lambda *args: 'ok']\nCHECKS = []\n")
    load_target(layout)


@pytest.mark.parametrize("source,message", [
    ("def other(size, seed):\n    pass\n", "inputs.py defines no wide, which judge.toml's [[distributions]] generator "
                                          "asks for"),
    ("def wide(size):\n    pass\n", "inputs.py's wide takes no argument 'seed', judge calls it with a spec's keys as "
                                    "keywords (size, seed)"),
    ("def wide(size, seed, scale):\n    pass\n", "inputs.py's wide needs argument 'scale', which a spec of task.yml "
                                                "lacks (size, seed)"),
    ("wide = None\n", "inputs.py's wide is None, not a function"),
])
def test_an_input_generator_is_read_against_the_specs_keys(tmp_path, source, message):
    dest = tmp_path / "vecadd_cpu"
    shutil.copytree(CPU_TARGET, dest)
    (dest / "inputs.py").write_text(source)
    assert _error(dest) == f"{dest}: {message} {SEE}"


def test_generators_that_take_the_keys_load(tmp_path):
    dest = tmp_path / "vecadd_cpu"
    shutil.copytree(CPU_TARGET, dest)
    for source in ("def wide(**spec):\n    pass\n", "def wide(size, seed, scale=2.0):\n    pass\n",
                   "def wide(*, size, seed):\n    pass\n"):
        (dest / "inputs.py").write_text(source)
        load_target(dest)


def test_a_peer_without_the_entry_point_is_named(tmp_path):
    dest = tmp_path / "vecadd_cpu"
    shutil.copytree(CPU_TARGET, dest)
    (dest / "peer.py").write_text("def kernel(data):\n    return data\n")
    toml = dest / "judge.toml"
    toml.write_text(toml.read_text() + '\n[peer]\nfile = "peer.py"\nname = "torch.add"\n')
    assert _error(dest) == f"{dest}: peer.py defines no custom_kernel, which judge.toml's [peer] file asks for {SEE}"
    (dest / "peer.py").write_text("def custom_kernel(data, out):\n    return data\n")
    assert _error(dest) == f"{dest}: peer.py's custom_kernel takes 2 arguments, judge calls it with 1 {SEE}"
