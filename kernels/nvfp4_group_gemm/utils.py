"""Small helpers shared by the reference and the kernel: device choice, seeding, tolerant comparison."""

import random

import torch


def pick_device() -> torch.device:
    """CUDA when present, else CPU: inputs and the reference run on either."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


@torch.no_grad()
def mismatches(received: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float, max_shown: int = 5) -> list[str]:
    """Describe where `received` differs from `expected` beyond atol + rtol*|expected|; empty when it matches.

    A NaN or an infinity in `received` is always a mismatch, even where `expected` has the same value.
    """
    if tuple(received.shape) != tuple(expected.shape):
        return [f"shape mismatch: got {tuple(received.shape)}, expected {tuple(expected.shape)}"]
    got = received.detach().float().cpu()
    want = expected.detach().float().cpu()
    bad = ~torch.isfinite(got) | ((got - want).abs() > atol + rtol * want.abs())
    # NaN compares False above, so the finiteness test is what catches it.
    count = int(bad.sum())
    if count == 0:
        return []
    lines = [f"{count} of {got.numel()} elements differ"]
    for index in torch.nonzero(bad)[:max_shown].tolist():
        where = tuple(index)
        lines.append(f"at {where}: got {got[where].item()!r}, expected {want[where].item()!r}")
    return lines


def match_reference(data, output, reference, rtol: float, atol: float) -> tuple[bool, str]:
    """Run `reference` on `data` and compare it with `output` group by group: (ok, message)."""
    expected = reference(data)
    if len(output) != len(expected):
        return False, f"expected {len(expected)} outputs, got {len(output)}"
    for group, (got, want) in enumerate(zip(output, expected)):
        problems = mismatches(got, want, rtol=rtol, atol=atol)
        if problems:
            return False, f"group {group}: " + "; ".join(problems)
    return True, ""


def make_match_reference(reference, rtol: float, atol: float):
    """A `check_implementation(data, output)` bound to one reference and tolerance."""

    def check_implementation(data, output) -> tuple[bool, str]:
        return match_reference(data, output, reference, rtol=rtol, atol=atol)

    return check_implementation
