"""Triton kernels for the ``triton`` suite. Triton is imported only when a kernel is built (GPU
workers install it; the CPU CI does not), and the kernels are defined then, not at import time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TRITON_KERNELS: dict[str, tuple[str, ...]] = {
    "vector_add": ("N",),
    "softmax_rows": ("B", "H"),
    "matmul_tiled": ("M", "N", "K"),
}


def _kernels() -> dict[str, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(
            out_ptr + offsets,
            tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
            mask=mask,
        )

    @triton.jit
    def softmax_rows(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offsets = tl.arange(0, BLOCK)
        mask = offsets < cols
        x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(
            out_ptr + row * cols + offsets, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask
        )

    @triton.jit
    def matmul_tiled(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(
                a_ptr + rm[:, None] * K + (k + rk)[None, :],
                mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                other=0.0,
            )
            b = tl.load(
                b_ptr + (k + rk)[:, None] * N + rn[None, :],
                mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            acc += tl.dot(a, b)
        tl.store(
            c_ptr + rm[:, None] * N + rn[None, :],
            acc.to(c_ptr.dtype.element_ty),
            mask=(rm[:, None] < M) & (rn[None, :] < N),
        )

    return {"vector_add": vector_add, "softmax_rows": softmax_rows, "matmul_tiled": matmul_tiled}


def build_triton(spec: dict[str, Any]) -> Callable[[], Any]:
    """The launch of Triton kernel ``spec['name']`` at ``spec['shape']`` (compiled on first call)."""
    import torch
    import triton

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[spec["dtype"]]
    kernel = _kernels()[spec["name"]]
    s = spec["shape"]
    make = lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype)  # noqa: E731
    if spec["name"] == "vector_add":
        x, y, out = make(s["N"]), make(s["N"]), make(s["N"])
        return lambda: kernel[(triton.cdiv(s["N"], 1024),)](x, y, out, s["N"], BLOCK=1024)
    if spec["name"] == "softmax_rows":
        x, out = make(s["B"], s["H"]), make(s["B"], s["H"])
        block = triton.next_power_of_2(s["H"])
        return lambda: kernel[(s["B"],)](x, out, s["H"], BLOCK=block)
    a, b, c = make(s["M"], s["K"]), make(s["K"], s["N"]), make(s["M"], s["N"])
    grid = (triton.cdiv(s["M"], 128), triton.cdiv(s["N"], 128))
    return lambda: kernel[grid](a, b, c, s["M"], s["N"], s["K"], BM=128, BN=128, BK=32)
