"""Kernel suites: PyTorch op cases with their shapes, shared by every profiling backend.

A case is pure data (family, op, dtype, shape); ``build`` turns it into a zero-argument callable on
a torch device. Only torch and the standard library are imported here, so the runner works on a
bare GPU worker image.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

DTYPES = ("fp32", "fp16", "bf16")  # a grid without ``dtypes`` runs in each of these
# fp8 (e4m3, per-tensor scales, bf16 out: ``torch._scaled_mm``) and int8 (``torch._int_mm``: int8 operands,
# int32 out) only where a grid names them: GEMMs alone.
SUPPORTED_DTYPES = (*DTYPES, "fp8", "int8")


@dataclass(frozen=True)
class OpCase:
    family: str  # gemm | bmm | linear | elementwise | softmax | layernorm | rmsnorm | attention | conv
    op: str  # matmul | bmm | linear | add | mul | gelu | relu | tanh | softmax | layer_norm | rmsnorm
    #          | attention | conv2d
    dtype: str  # fp32 | fp16 | bf16 | fp8, int8 (GEMM)
    shape: tuple[tuple[str, int], ...]  # ordered (name, size) pairs, e.g. (("M", 4096), ...)

    @property
    def shape_dict(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def case_id(self) -> str:
        dims = "-".join(f"{k}{v}" for k, v in self.shape)
        return f"{self.family}.{self.op}.{self.dtype}.{dims}"

    def to_json(self) -> str:
        record = asdict(self)
        record["shape"] = self.shape_dict
        return json.dumps(record, sort_keys=True)


def build(case: OpCase, device: str) -> Callable[[], Any]:
    """Allocate the operands once and return the call to time (no allocation inside it)."""
    import torch

    s = case.shape_dict
    if case.dtype == "fp8":
        return _fp8_gemm(case, device)
    if case.dtype == "int8":
        return _int8_gemm(case, device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa: E731
    if case.family == "attention":
        return _attention(case, make)
    if case.family == "gemm":
        a, b = make(s["M"], s["K"]), make(s["K"], s["N"])
        return lambda: torch.matmul(a, b)
    if case.family == "linear":
        x, w, bias = make(s["M"], s["K"]), make(s["N"], s["K"]), make(s["N"])
        return lambda: torch.nn.functional.linear(x, w, bias)
    if case.family == "rmsnorm":
        x, weight = make(s["B"], s["H"]), make(s["H"])
        return lambda: torch.nn.functional.rms_norm(x, (s["H"],), weight)
    if case.family == "bmm":
        a, b = make(s["B"], s["M"], s["K"]), make(s["B"], s["K"], s["N"])
        return lambda: torch.bmm(a, b)
    if case.family == "elementwise":
        x, y = make(s["N"]), make(s["N"])
        unary = {"gelu": torch.nn.functional.gelu, "relu": torch.relu, "tanh": torch.tanh}
        if case.op == "add":
            return lambda: torch.add(x, y)
        if case.op == "mul":
            return lambda: torch.mul(x, y)
        return lambda: unary[case.op](x)
    if case.family == "softmax":
        x = make(s["B"], s["H"])
        return lambda: torch.softmax(x, dim=-1)
    if case.family == "conv":
        return _conv2d(case, make)
    if case.family == "layernorm":
        x = make(s["B"], s["H"])
        weight, bias = make(s["H"]), make(s["H"])
        return lambda: torch.nn.functional.layer_norm(x, (s["H"],), weight, bias)
    raise ValueError(f"case {case.case_id}: unknown family {case.family!r}")


def _fp8_gemm(case: OpCase, device: str) -> Callable[[], Any]:
    """An fp8 (e4m3) GEMM with per-tensor scales and a bf16 result, as serving engines run fp8 weights;
    the second operand column-major, as cuBLASLt's fp8 kernels require."""
    import torch

    if case.family != "gemm":
        raise ValueError(f"case {case.case_id}: fp8 is profiled for GEMMs only")
    s = case.shape_dict
    a = torch.randn(s["M"], s["K"], device=device).to(torch.float8_e4m3fn)
    b = torch.randn(s["N"], s["K"], device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device, dtype=torch.float32)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _int8_gemm(case: OpCase, device: str) -> Callable[[], Any]:
    """An int8 GEMM on the int8 tensor pipe (``torch._int_mm``: int8 operands, int32 result; cuBLASLt wants
    M > 16 and K, N multiples of 8). The result is 4 bytes an element where the physics' W8A8 row writes 2:
    a difference of M*N*2 bytes, a few per cent of the minimum bytes only where M is small and N*K is not."""
    import torch

    if case.family != "gemm":
        raise ValueError(f"case {case.case_id}: int8 is profiled for GEMMs only")
    s = case.shape_dict
    a = torch.randint(-8, 8, (s["M"], s["K"]), device=device, dtype=torch.int8)
    b = torch.randint(-8, 8, (s["N"], s["K"]), device=device, dtype=torch.int8).t()
    return lambda: torch._int_mm(a, b)


def _conv2d(case: OpCase, make: Callable[..., Any]) -> Callable[[], Any]:
    """A square 2-D convolution as NeuSight's rows spell it (B images of insize^2 pixels and cin channels,
    cout filters of ksize^2, stride, pad), through cuDNN with PyTorch's defaults (TF32 for fp32 convs)."""
    import torch

    s = case.shape_dict
    x = make(s.get("B", 1), s["cin"], s["insize"], s["insize"])
    w = make(s["cout"], s["cin"], s["ksize"], s["ksize"])
    stride, pad = s.get("stride", 1), s.get("pad", 0)
    return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)


def _attention(case: OpCase, make: Callable[..., Any]) -> Callable[[], Any]:
    """Fused attention (``scaled_dot_product_attention``: flash kernels where the dtype has them) over
    B sequences of H query heads and HKV KV heads of dim D: a prefill (S = KV, causal) or a decode step
    (S = 1, every key). S = KV keeps PyTorch's top-left causal mask equal to a serving engine's
    bottom-right one, so the physics' default (causal = 1) counts the same pairs."""
    import torch

    s = case.shape_dict
    if s["S"] not in (1, s["KV"]):
        raise ValueError(f"case {case.case_id}: attention is profiled as prefill (S = KV) or decode (S = 1)")
    if s["H"] % s["HKV"]:
        raise ValueError(f"case {case.case_id}: H={s['H']} is not a multiple of HKV={s['HKV']}")
    q = make(s["B"], s["H"], s["S"], s["D"])
    k, v = make(s["B"], s["HKV"], s["KV"], s["D"]), make(s["B"], s["HKV"], s["KV"], s["D"])
    causal, grouped = s["S"] > 1, s["H"] != s["HKV"]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=grouped)
