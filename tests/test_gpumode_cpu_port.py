"""benchmarks/gpumode_cpu_port.py: a GPU MODE-style problem written for CUDA becomes a CPU target judge loads, its
device strings made "cpu", a kernel that needs a GPU-only package replaced by the reference, its cases cut."""

import importlib.util
import sys
import textwrap
from pathlib import Path

from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpumode_cpu_port", ROOT / "benchmarks" / "gpumode_cpu_port.py")
cpu_port = importlib.util.module_from_spec(spec)
sys.modules["gpumode_cpu_port"] = cpu_port
spec.loader.exec_module(cpu_port)

REFERENCE = textwrap.dedent("""\
    import torch


    def generate_input(size: int, seed: int):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        return torch.randn(size, device='cuda', generator=gen).cuda()


    def ref_kernel(data):
        torch.cuda.synchronize()
        return data * 2


    def check_implementation(data, output):
        return bool(torch.equal(output, ref_kernel(data))), ""
    """)
TASK = textwrap.dedent("""\
    files:
      - {"name": "submission.py", "source": "@SUBMISSION@"}
      - {"name": "reference.py", "source": "reference.py"}
      - {"name": "utils.py", "source": "../utils.py"}
    lang: "py"
    tests:
      - {"size": 8, "seed": 1}
      - {"size": 16, "seed": 2}
      - {"size": 32, "seed": 3}
      - {"size": 64, "seed": 4}
    benchmarks:
      - {"size": 1048576, "seed": 5}
    """)


def test_a_cuda_problem_becomes_a_cpu_target_with_the_reference_for_a_gpu_only_kernel(tmp_path):
    problem = tmp_path / "problems" / "family" / "double"
    problem.mkdir(parents=True)
    (problem.parent / "utils.py").write_text("DEVICE = 'cuda'\n")
    (problem / "reference.py").write_text(REFERENCE)
    (problem / "submission.py").write_text("import helion\n\n\ndef custom_kernel(data):\n    return data * 2\n")
    (problem / "task.yml").write_text(TASK)
    assert cpu_port.main(["--root", str(tmp_path / "problems"), "--out", str(tmp_path / "cpu"), "family/*"]) == 0
    copy = tmp_path / "cpu" / "family" / "double"
    reference = (copy / "reference.py").read_text()
    assert "cuda" not in reference and 'torch.Generator(device="cpu")' in reference and "    None\n" in reference
    assert (copy.parent / "utils.py").read_text() == "DEVICE = 'cpu'\n"
    assert (copy / "submission.py").read_text() == reference + cpu_port.REFERENCE_AS_KERNEL
    target = load_target(copy)
    assert target.on_cpu
    assert target.tests == [{"size": 8, "seed": 1}, {"size": 16, "seed": 2}, {"size": 32, "seed": 3}]
    assert target.benchmarks == [{"size": 8, "seed": 1}, {"size": 16, "seed": 2}]


def test_a_pattern_that_names_no_problem_is_refused(tmp_path, capsys):
    (tmp_path / "problems").mkdir()
    assert cpu_port.main(["--root", str(tmp_path / "problems"), "--out", str(tmp_path / "cpu"), "linalg/*"]) == 2
    assert capsys.readouterr().err == f"no problem under {tmp_path / 'problems'} matches linalg/*\n"
