"""judge/targets.py: judge.toml's keys for clocks, distributions, plausibility, min_effect and forbidden calls, and their
one-line errors naming the file and the field."""

import shutil
from pathlib import Path

import pytest
from harness import judge_toml_error, replacing

from judge.errors import JudgeError
from judge.targets import Distribution, ForbiddenCall, load_target

CPU_TARGET = Path(__file__).resolve().parents[1] / "kernels" / "vecadd_cpu"


@pytest.fixture
def target_dir(tmp_path):
    dest = tmp_path / "vecadd_cpu"
    shutil.copytree(CPU_TARGET, dest)
    return dest


def test_the_cpu_example_target_reads_as_written():
    target = load_target(CPU_TARGET)
    assert (target.arch, target.on_cpu, target.deciding_clock) == ("cpu", True, "host")
    assert target.distributions == [Distribution("randn"), Distribution("wide", "inputs.py:wide")]
    assert (target.min_effect, target.max_speedup, target.cores_for_timing) == (None, 10.0, 1)  # its floor: the controls


@pytest.mark.parametrize("old,new,message", [
    ('arch = "cpu"', 'arch = "cpu"\nclock = "wall"', "field 'clock': 'wall' — 'gpu' (launch hidden) or 'call' (the whole call, launch "
                         "included, as GPU MODE times)"),
    ('arch = "cpu"', 'arch = "cpu"\nmin_effect = 1.5', "field 'min_effect': a fraction in [0, 1), got 1.5"),
    ('arch = "cpu"', 'arch = "cpu"\n[resources]\ncores = 0', "field 'resources.cores': a whole number of CPU cores from 1 to "
                                                             "64, got 0"),
    ("[tolerance]", "[plausibility]\nmax_speedup = 1\n\n[tolerance]",
     "field 'plausibility.max_speedup': must be above 1, got 1.0"),
])
def test_bad_keys_are_one_line_errors(target_dir, old, new, message):
    assert judge_toml_error(target_dir, replacing(old, new)) == message


def test_a_distribution_generator_must_exist(target_dir):
    assert judge_toml_error(target_dir, replacing('"inputs.py:wide"', '"missing.py:wide"')) == (
        f"field 'distributions[1].generator': 'missing.py:wide' is not FILE.py:function with FILE.py in {target_dir}")


def test_a_distribution_name_appears_once(target_dir):
    assert judge_toml_error(target_dir, replacing('name = "wide"', 'name = "randn"')) == \
        "field 'distributions[1].name': 'randn' appears twice"


def test_the_fp8_target_names_its_peer():
    target = load_target(CPU_TARGET.parent / "fp8_group_gemm_sm90")
    assert (target.peer.file, target.peer.name) == ("peer.py", "torch._scaled_grouped_mm")
    assert load_target(CPU_TARGET).peer is None


@pytest.mark.parametrize("peer,message", [
    ('file = "missing.py"\nname = "x"', "field 'peer.file': 'missing.py' is not a file in {dir} other than the kernel file"),
    ('file = "submission.py"\nname = "x"', "field 'peer.file': 'submission.py' is not a file in {dir} other than the kernel file"),
    ('file = "reference.py"\nname = " "', "field 'peer.name': the peer's name as reports show it, e.g. 'torch._scaled_grouped_mm'"),
    ('file = "reference.py"\nname = "x"\nargs = 1', "field 'peer': a table with 'file' (in the target directory) and 'name'"),
])
def test_a_bad_peer_is_a_one_line_error(target_dir, peer, message):
    assert judge_toml_error(target_dir, lambda text: text + f"\n[peer]\n{peer}\n") == message.format(dir=target_dir)


def test_the_fp8_target_forbids_its_peers_op_and_torchs_grouped_gemm():
    target = load_target(CPU_TARGET.parent / "fp8_group_gemm_sm90")
    assert target.forbidden_calls == ["torch._scaled_grouped_mm", "torch._grouped_mm"]
    assert target.forbidden[0] == ForbiddenCall("torch._scaled_grouped_mm",
                                                "the peer's op: the contest is to beat it, not to call it")
    assert load_target(CPU_TARGET).forbidden_calls == []


@pytest.mark.parametrize("rules,message", [
    ('forbidden_calls = "torch.mm"', "field 'rules.forbidden_calls': a list of {call = \"torch.x\", why = \"...\"} tables"),
    ('forbid = []', "field 'rules.forbid': unknown key (known: forbidden_calls)"),
    ('forbidden_calls = ["torch.mm"]', "field 'rules.forbidden_calls[0]': a table {call = \"torch.x\", why = \"...\"}"),
    ('forbidden_calls = [{call = "torch.mm", why = "x", when = 1}]',
     "field 'rules.forbidden_calls[0].when': unknown key (known: call, why)"),
    ('forbidden_calls = [{call = "torch.mm(", why = "x"}]',
     "field 'rules.forbidden_calls[0].call': a dotted Python name such as 'torch._scaled_grouped_mm', got 'torch.mm('"),
    ('forbidden_calls = [{why = "x"}]',
     "field 'rules.forbidden_calls[0].call': a dotted Python name such as 'torch._scaled_grouped_mm', got None"),
    ('forbidden_calls = [{call = "torch.mm", why = "x"}, {call = "torch.mm", why = "y"}]',
     "field 'rules.forbidden_calls[1].call': 'torch.mm' appears twice"),
    ('forbidden_calls = [{call = "torch.mm", why = " "}]',
     "field 'rules.forbidden_calls[0].why': required: one line saying why, which the brief and the verdict show"),
    ('forbidden_calls = [{call = "torch.mm", why = "one\\ntwo"}]',
     "field 'rules.forbidden_calls[0].why': required: one line saying why, which the brief and the verdict show"),
])
def test_bad_forbidden_calls_are_one_line_errors(target_dir, rules, message):
    assert judge_toml_error(target_dir, lambda text: text + f"\n[rules]\n{rules}\n") == message


def test_a_rules_key_that_is_not_a_table(target_dir):
    assert judge_toml_error(target_dir, lambda text: "rules = 1\n" + text) == "field 'rules': a table, [rules]"


# ---- GPU MODE's contract, read when the target loads (judge/target_hooks.py) --------------------------------

CONTRACT = ("judge needs generate_input(**spec), ref_kernel(data) and check_implementation(data, output) (or "
            "judge.toml's [tolerance]) in reference.py and custom_kernel(data) in the kernel file")
DEFINITIONS = {
    "generate_input": "def generate_input(size, seed):\n    return [size]\n",
    "ref_kernel": "def ref_kernel(data):\n    return data\n",
    "check_implementation": "check_implementation = make_match_reference(ref_kernel, rtol=1e-3)\n",
}
ENTRY = "def custom_kernel(data):\n    return data\n"


def _problem(root: Path, reference: str, kernel: str = ENTRY, toml: str | None = None, **files: str) -> Path:
    """A GPU MODE-style problem in the layout of reference-kernels: utils.py one level up, named in task.yml."""
    problem = root / "problem"
    problem.mkdir(parents=True)
    (root / "utils.py").write_text("def make_match_reference(ref, **tolerance):\n    return lambda data, out: ''\n")
    extra = "".join(f'  - {{"name": "{name}.py", "source": "{name}.py"}}\n' for name in files)
    (problem / "task.yml").write_text(
        'files:\n  - {"name": "submission.py", "source": "@SUBMISSION@"}\n'
        '  - {"name": "utils.py", "source": "../utils.py"}\n  - {"name": "reference.py", "source": "reference.py"}\n'
        f'{extra}tests:\n  - {{"size": 8, "seed": 1}}\nbenchmarks:\n  - {{"size": 64, "seed": 2}}\n')
    (problem / "reference.py").write_text(reference)
    (problem / "submission.py").write_text(kernel)
    for name, source in files.items():
        (problem / f"{name}.py").write_text(source)
    if toml is not None:
        (problem / "judge.toml").write_text(toml)
    return problem


def _reference(without: str = "") -> str:
    return "from utils import make_match_reference\n\n" + "".join(
        source for name, source in DEFINITIONS.items() if name != without)


def _refusal(problem: Path) -> str:
    with pytest.raises(JudgeError) as caught:
        load_target(problem)
    assert "\n" not in caught.value.message
    return caught.value.message


def test_gpu_modes_usual_reference_loads(tmp_path):
    """check_implementation from an imported factory (`make_match_reference`) is taken as it is."""
    assert load_target(_problem(tmp_path, _reference())).name == "problem"


@pytest.mark.parametrize("name", list(DEFINITIONS))
def test_a_reference_without_a_name_judge_calls_is_refused(tmp_path, name):
    problem = _problem(tmp_path, _reference(without=name))
    assert _refusal(problem) == f"{problem}: reference.py has no {name} ({CONTRACT})"


def test_a_kernel_file_without_custom_kernel_is_refused(tmp_path):
    """As princeton/cross_entropy_py's: two entry points of its own and no custom_kernel (nor generate_input)."""
    problem = _problem(tmp_path, _reference(), kernel="def forward(x):\n    return x\n\ndef backward(x):\n    pass\n")
    assert _refusal(problem) == f"{problem}: submission.py has no custom_kernel ({CONTRACT})"


def test_a_multi_gpu_problem_is_refused_in_one_line_that_says_so(tmp_path):
    """GPU MODE's amd_distributed problems: each rank's process calls generate_input(rank, world_size, ...). Before,
    the refusal named only the missing 'rank' argument."""
    problem = _problem(tmp_path, _reference())
    (problem / "task.yml").write_text((problem / "task.yml").read_text() + "multi_gpu: true\n")
    assert _refusal(problem) == (f"{problem / 'task.yml'}: field 'multi_gpu': judge runs each kernel as one process on "
                                 "one device; a problem run as one process per GPU under torch.distributed is not "
                                 "supported")


def test_a_task_without_reference_py_is_refused(tmp_path):
    problem = _problem(tmp_path, _reference())
    task = problem / "task.yml"
    task.write_text(task.read_text().replace('  - {"name": "reference.py", "source": "reference.py"}\n', ""))
    assert _refusal(problem) == f"{problem}: the task's files have no reference.py ({CONTRACT})"


def test_a_reference_name_taking_other_arguments_is_refused(tmp_path):
    problem = _problem(tmp_path, _reference().replace("def ref_kernel(data):", "def ref_kernel(data, out):"))
    assert _refusal(problem) == (f"{problem}: reference.py's ref_kernel takes 2 arguments, judge calls it with 1 "
                                 "(see judge/extensions.py)")
    problem = _problem(tmp_path / "b", _reference().replace("(size, seed)", "(batch, size, seed)"))
    assert _refusal(problem) == (f"{problem}: reference.py's generate_input needs argument 'batch', which a spec of "
                                 "task.yml lacks (size, seed) (see judge/extensions.py)")


def test_a_tolerance_stands_in_for_check_implementation(tmp_path):
    load_target(_problem(tmp_path, _reference(without="check_implementation"),
                         toml="[tolerance]\nrtol = 1e-3\natol = 1e-3\n"))


def test_generate_input_is_not_needed_where_every_distribution_names_a_generator(tmp_path):
    load_target(_problem(tmp_path, _reference(without="generate_input"), inputs="def wide(size, seed):\n    pass\n",
                         toml='[[distributions]]\nname = "wide"\ngenerator = "inputs.py:wide"\n'))


def test_a_star_import_of_a_task_file_is_followed(tmp_path):
    """`from common import *` where common.py is one of task.yml's files: read; of any other module: taken as is."""
    load_target(_problem(tmp_path / "a", "from common import *\n", common=_reference()))
    problem = _problem(tmp_path / "b", "from common import *\n", common=_reference(without="ref_kernel"))
    assert _refusal(problem) == f"{problem}: reference.py has no ref_kernel ({CONTRACT})"
    load_target(_problem(tmp_path / "c", "from somewhere_else import *\n"))


def test_a_problem_is_ranked_as_gpu_mode_ranks_it_and_its_verdict_is_on_that(tmp_path):
    """GPU MODE ranks a task.yml without `ranking_by` by its last benchmark (kernelbot's RankCriterion.LAST): its
    pmpp problems' leaderboards compare the largest size alone. judge times what the ranking reads."""
    problem = _problem(tmp_path, _reference())
    task = problem / "task.yml"
    task.write_text(task.read_text() + '  - {"size": 128, "seed": 3}\n  - {"size": 256, "seed": 4}\n')
    target = load_target(problem)
    assert (target.ranking_by, target.ranked_benchmarks) == ("last", [2])
    task.write_text(task.read_text() + 'ranking_by: "geom"\n')
    assert load_target(problem).ranked_benchmarks == [0, 1, 2]
    task.write_text(task.read_text().replace('"geom"', '"mean"'))
    assert load_target(problem).ranked_benchmarks == [0, 1, 2]
    task.write_text(task.read_text().replace('"mean"', '"median"'))
    assert _refusal(problem) == (
        f"{task}: field 'ranking_by': 'median' — judge ranks by 'last' (the last benchmark's time), 'geom' (the "
        "geometric mean of the benchmarks' times), 'mean' (the mean of the benchmarks' times)")
