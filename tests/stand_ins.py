"""Stand-ins for ops that have no CPU kernel, shared by the tests and the interpreter
subprocesses they start (which put tests/ on their path)."""
import torch


def scaled_grouped_mm(a, b, scale_a, scale_b, offs=None, out_dtype=None):
    """torch._scaled_grouped_mm per group on the CPU: out[rows of group g] = (A *
    scale_a[:, None]) @ (B[g] * scale_b[g]) for each group (offs: group ends); rows past
    the last group NaN (never written, as on the GPU)."""
    out = torch.full((a.shape[0], b.shape[-1]), float("nan"), dtype=out_dtype)
    lo = 0
    for g, hi in enumerate(offs.tolist()):
        if hi > lo:
            out[lo:hi] = ((a[lo:hi].float() * scale_a[lo:hi, None])
                          @ (b[g].float() * scale_b[g][None, :])).to(out_dtype)
        lo = hi
    return out
