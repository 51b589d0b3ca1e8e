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


def _gemm_cases(dtypes: tuple[str, ...]) -> list[OpCase]:
    sizes = [
        (256, 256, 256),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (4096, 4096, 512),
        (512, 4096, 4096),
        (16384, 1024, 4096),
        (128, 8192, 8192),
        (8192, 128, 8192),
        (1, 4096, 4096),
        (32, 11008, 4096),
        (4096, 11008, 4096),
        (6144, 6144, 1536),
        (3000, 3000, 3000),
    ]
    return [OpCase("gemm", "matmul", d, (("M", m), ("N", n), ("K", k))) for d in dtypes for m, n, k in sizes]


def _bmm_cases(dtypes: tuple[str, ...]) -> list[OpCase]:
    sizes = [
        (8, 512, 512, 64),
        (32, 1024, 1024, 128),
        (64, 256, 256, 256),
        (16, 2048, 2048, 64),
        (128, 128, 128, 128),
        (4, 4096, 4096, 128),
        (256, 64, 64, 64),
        (12, 1024, 64, 1024),
    ]
    return [
        OpCase("bmm", "bmm", d, (("B", b), ("M", m), ("N", n), ("K", k)))
        for d in dtypes
        for b, m, n, k in sizes
    ]


def _elementwise_cases(dtypes: tuple[str, ...]) -> list[OpCase]:
    elements = [2**16, 2**20, 2**22, 2**24, 2**26, 2**28]
    ops = ("add", "mul", "gelu", "relu", "tanh")
    return [OpCase("elementwise", op, d, (("N", n),)) for d in dtypes for op in ops for n in elements]


def _row_cases(dtypes: tuple[str, ...]) -> list[OpCase]:
    shapes = [(1024, 1024), (4096, 4096), (16384, 1024), (1024, 32768), (65536, 768), (8192, 8192)]
    cases = []
    for d in dtypes:
        for rows, cols in shapes:
            cases.append(OpCase("softmax", "softmax", d, (("B", rows), ("H", cols))))
            cases.append(OpCase("layernorm", "layer_norm", d, (("B", rows), ("H", cols))))
    return cases


def default_suite(dtypes: tuple[str, ...] = DTYPES) -> list[OpCase]:
    """The standard suite: GEMM, BMM, elementwise, softmax and layernorm over a range of shapes."""
    return _gemm_cases(dtypes) + _bmm_cases(dtypes) + _elementwise_cases(dtypes) + _row_cases(dtypes)


def tiny_suite() -> list[OpCase]:
    """A few small cases, fast enough for the CPU host backend in tests."""
    return [
        OpCase("gemm", "matmul", "fp32", (("M", 128), ("N", 128), ("K", 128))),
        OpCase("elementwise", "add", "fp32", (("N", 2**16),)),
        OpCase("softmax", "softmax", "fp32", (("B", 64), ("H", 256))),
    ]


SUITES: dict[str, Callable[[], list[OpCase]]] = {"default": default_suite, "tiny": tiny_suite}


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
