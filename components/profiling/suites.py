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

DTYPES = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class OpCase:
    family: str  # gemm | bmm | linear | elementwise | softmax | layernorm | rmsnorm
    op: str  # matmul | bmm | linear | add | mul | gelu | relu | tanh | softmax | layer_norm | rmsnorm
    dtype: str  # fp32 | fp16 | bf16
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

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    s = case.shape_dict
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa: E731
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
    if case.family == "layernorm":
        x = make(s["B"], s["H"])
        weight, bias = make(s["H"]), make(s["H"])
        return lambda: torch.nn.functional.layer_norm(x, (s["H"],), weight, bias)
    raise ValueError(f"case {case.case_id}: unknown family {case.family!r}")
