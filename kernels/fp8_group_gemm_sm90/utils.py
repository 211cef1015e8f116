"""Small helpers shared by the reference and the checker."""

import torch


def get_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def mismatch_report(output: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> tuple[bool, str]:
    """Compare element-wise with |out - ref| <= atol + rtol * |ref|; NaN or Inf in the output never passes."""
    if output.shape != expected.shape:
        return False, f"shape {tuple(output.shape)} != expected {tuple(expected.shape)}"
    out = output.float()
    ref = expected.float()
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        first = tuple(int(i) for i in (~finite).nonzero()[0])
        return False, f"{bad} non-finite output elements, first at {first}"
    err = (out - ref).abs()
    bound = atol + rtol * ref.abs()
    over = err > bound
    if bool(over.any()):
        count = int(over.sum())
        idx = tuple(int(i) for i in over.nonzero()[0])
        return False, (
            f"{count} of {out.numel()} elements out of tolerance (rtol={rtol}, atol={atol}); "
            f"first at {idx}: got {out[idx].item():.6g}, expected {ref[idx].item():.6g}; "
            f"max abs error {err.max().item():.4g}"
        )
    return True, f"max abs error {err.max().item():.4g}" if err.numel() else "empty output"
