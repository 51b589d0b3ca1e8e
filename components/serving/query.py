"""Op + shapes: the accepted ops, dimensions and dtypes, their plausibility bounds, and shape parsing.

Shared by ``components.serving.questions`` (the one question schema of ``kernelcast predict``, the
HTTP server and the registered pyfunc) and by callers that build canonical query rows
(``query_frames``: one canonical measurement per device, for the training feature builder).
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

from components.physics.dtypes import DTYPES, GEMM_ONLY_DTYPES


class QueryError(ValueError):
    """A query the user must fix (bad op, shape, device); the message names the field."""


FAMILY_OF_OP: dict[str, tuple[str, str]] = {
    # --op value -> (family, op) as the canonical kernels table names them
    "gemm": ("gemm", "matmul"),
    "matmul": ("gemm", "matmul"),
    "linear": ("linear", "linear"),
    "bmm": ("bmm", "bmm"),
    "add": ("elementwise", "add"),
    "mul": ("elementwise", "mul"),
    "gelu": ("elementwise", "gelu"),
    "relu": ("elementwise", "relu"),
    "tanh": ("elementwise", "tanh"),
    "softmax": ("softmax", "softmax"),
    "layernorm": ("layernorm", "layer_norm"),
    "rmsnorm": ("rmsnorm", "rmsnorm"),
    # More elementwise ops the analytical model has a cost entry for (components.features.analytical).
    "sub": ("elementwise", "sub"),
    "div": ("elementwise", "div"),
    "pow": ("elementwise", "pow"),
    "silu": ("elementwise", "silu"),
    "sigmoid": ("elementwise", "sigmoid"),
    "exp": ("elementwise", "exp"),
    "log": ("elementwise", "log"),
    "sqrt": ("elementwise", "sqrt"),
    "rsqrt": ("elementwise", "rsqrt"),
    "neg": ("elementwise", "neg"),
    "abs": ("elementwise", "abs"),
    "copy": ("elementwise", "copy"),
    # The LLM-serving families of the op engine (components/physics/roofline.py): FlashAttention-style causal
    # attention (prefill and decode), a fused MoE layer, and a tensor-parallel all-reduce.
    "attention": ("attention", "attention"),
    "moe": ("moe", "moe"),
    "allreduce": ("allreduce", "allreduce"),
    "all_reduce": ("allreduce", "allreduce"),
    # 2-D convolution (NeuSight's and our profiled cuDNN rows; the tabular champion answers it).
    "conv2d": ("conv", "conv2d"),
    "conv": ("conv", "conv2d"),
}
# dtypes an op question may name, and those only GEMM-like ops (and MoE) take: components/physics/dtypes.py.
# fp8_block: fp8 with per-block scales (DeepSeek-style); nvfp4: 4-bit floats with fp8 block scales;
# int8: W8A8; int8_wo / int4_wo: weight-only quantised GEMMs (bf16 math).
# Plausibility bounds of one question: larger is a typo or an attack, not a kernel any GPU holds. They are
# on the work (elements per tensor, bytes, FLOPs), not per dimension: an LLM activation of 8,192 tokens x
# 14,336 is 117M elements in one dimension of an elementwise op, and a real question.
MAX_DIM: int = 2**36  # one dimension (an all-reduce message in bytes, a flattened elementwise tensor)
MAX_TENSOR_ELEMENTS: float = 2.0**36  # 64 Gi elements in one operand
MAX_FLOPS: float = 1e18  # ~17 minutes of a 1 PFLOP/s tensor pipe for ONE kernel
MAX_BYTES: float = 2.0**40  # 1 TiB of operands + result; the largest GPU holds 288 GB


# Per family: the sets of dimensions a query may give (any one set, complete, and nothing else),
# as the analytical formulas read them. Why: a missing dimension leaves the op without a formula
# -- a query without K would get no answer, or a guess, instead of an error naming K.
SHAPE_DIMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "gemm": (("M", "N", "K"), ("B", "M", "N", "K")),
    "linear": (("M", "N", "K"), ("B", "M", "N", "K")),
    "bmm": (("B", "M", "N", "K"),),
    "elementwise": (("N",), ("B", "H")),  # numel, or rows x columns
    "softmax": (("B", "H"),),
    "layernorm": (("B", "H"),),
    "rmsnorm": (("B", "H"),),
    # batch, query tokens per sequence, context length, query heads, KV heads, head dim (+ sliding window W)
    "attention": (("B", "S", "KV", "H", "HKV", "D"), ("B", "S", "KV", "H", "HKV", "D", "W")),
    # tokens, experts, experts per token, hidden, expert intermediate (+ tensor / expert parallel degree)
    "moe": (
        ("T", "E", "topk", "H", "I"),
        ("T", "E", "topk", "H", "I", "tp", "ep"),
        ("T", "E", "topk", "H", "I", "tp"),
        ("T", "E", "topk", "H", "I", "ep"),
    ),
    # message bytes per GPU, GPUs in the group
    "allreduce": (("bytes", "gpus"),),
    # input channels, filters, square filter side, square image side (+ batch, stride, zero padding)
    "conv": (
        ("cin", "cout", "ksize", "insize"),
        ("B", "cin", "cout", "ksize", "insize"),
        ("B", "cin", "cout", "ksize", "insize", "stride", "pad"),
        ("cin", "cout", "ksize", "insize", "stride", "pad"),
    ),
}


def check_shape(op: str, shape: dict[str, int], label: str | None = None) -> None:
    """A QueryError naming the missing or unknown dimensions of ``op``'s shape, with the accepted sets."""
    options = SHAPE_DIMS[FAMILY_OF_OP[op][0]]
    if any(set(shape) == set(dims) for dims in options):
        return
    # Name the problems against the closest accepted set (most dimensions in common).
    closest = max(options, key=lambda dims: (len(set(dims) & set(shape)), -len(dims)))
    missing = [d for d in closest if d not in shape]
    unknown = sorted(d for d in shape if not any(d in dims for dims in options))
    extra = sorted(d for d in shape if d not in closest and d not in unknown)
    problems = (
        ([f"missing {', '.join(missing)}"] if missing else [])
        + ([f"unknown {', '.join(unknown)}"] if unknown else [])
        + (
            [f"{', '.join(extra)} does not go with {', '.join(d for d in closest if d in shape)}"]
            if extra
            else []
        )
    )
    accepted = " or ".join(", ".join(dims) for dims in options)
    raise QueryError(f"{label or f'--shape for --op {op}'}: {'; '.join(problems)}; {op} takes {accepted}")


def canonical_op_dtype(dtype: Any, field: str = "dtype") -> str:
    """``bfloat16`` -> ``bf16`` (``components.physics.dtypes``); a QueryError naming the accepted list."""
    from components.physics.dtypes import canonical_dtype

    try:
        return canonical_dtype(dtype)
    except ValueError:
        raise QueryError(
            f"{field} {dtype!r}: not an accepted dtype; choose one of {', '.join(DTYPES)}"
        ) from None


def shape_work(family: str, shape: dict[str, int], dtype: str, op: str | None = None) -> tuple[float, float]:
    """(FLOPs, minimum bytes) of an op by its shape (``components.physics.registry``): what the plausibility
    bounds check."""
    from components.physics.registry import op_work

    work = op_work(family, dtype, {k: float(v) for k, v in shape.items()}, op=op)
    return float(work.flops[0]), float(work.dram_bytes[0])


def _largest_tensor(family: str, shape: dict[str, int]) -> float:
    """Elements of the largest operand or result: the per-tensor plausibility bound."""
    g = {k: float(v) for k, v in shape.items()}
    b = g.get("B", 1.0)
    if family in ("gemm", "linear", "bmm"):
        return b * max(g["M"] * g["K"], g["K"] * g["N"], g["M"] * g["N"])
    if family == "attention":
        return b * max(g["S"] * g["H"], g["KV"] * g["HKV"]) * g["D"]
    if family == "moe":
        return max(g["T"] * g["H"], g["E"] * g["H"] * g["I"])
    if family == "allreduce":
        return g["bytes"]
    if family == "conv":
        return max(b * max(g["cin"], g["cout"]) * g["insize"] ** 2, g["cout"] * g["cin"] * g["ksize"] ** 2)
    return g["N"] if "N" in g else b * g["H"]


def check_bounds(op: str, shape: dict[str, int], dtype: str, field: str = "shape") -> None:
    """A QueryError when a size is not an integer in [1, MAX_DIM] or the work exceeds MAX_FLOPS/MAX_BYTES."""
    from components.physics.shape_rules import ZERO_ALLOWED

    family, op_name = FAMILY_OF_OP[op]
    for name, value in shape.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise QueryError(f"{field}.{name} = {value!r}: a size must be a whole number")
        # a convolution's zero padding may be 0 (PyTorch's default); every other dimension counts something
        smallest = 0 if (family, name) in ZERO_ALLOWED else 1
        whole_number(value, f"{field}.{name}", smallest, MAX_DIM, "size")
    if dtype in GEMM_ONLY_DTYPES and family not in ("gemm", "linear", "bmm", "moe"):
        raise QueryError(
            f"{field.rsplit('.', 1)[0]}.dtype {dtype}: a weight quantisation format, "
            "for gemm, linear, bmm and moe only; "
            f"{op} takes one of {', '.join(d for d in DTYPES if d not in GEMM_ONLY_DTYPES)}"
        )
    _check_family_shape(family, shape, field)
    elements = _largest_tensor(family, shape)
    if elements > MAX_TENSOR_ELEMENTS:
        raise QueryError(
            f"{field} for {op}: a tensor of {elements:.3g} elements exceeds the bound of 2**36 per tensor"
        )
    flops, nbytes = shape_work(family, shape, dtype, op_name)
    if flops > MAX_FLOPS:
        raise QueryError(
            f"{field} for {op}: {flops:.3g} FLOPs exceeds the bound of {MAX_FLOPS:.0e} FLOPs per kernel"
        )
    if nbytes > MAX_BYTES:
        raise QueryError(
            f"{field} for {op}: {nbytes:.3g} bytes of operands exceeds the bound of 1 TiB (2**40 bytes)"
        )


def _check_family_shape(family: str, shape: dict[str, int], field: str) -> None:
    """Relations between dimensions a real kernel of the family obeys (each error names the dimensions)."""
    if family == "attention":
        if shape["S"] > shape["KV"]:
            raise QueryError(
                f"{field}: S = {shape['S']} query tokens cannot exceed the context KV = {shape['KV']} "
                "(S = KV is causal prefill, S = 1 decode)"
            )
        if shape["H"] % shape["HKV"]:
            raise QueryError(
                f"{field}: H = {shape['H']} query heads must be a multiple of HKV = {shape['HKV']} "
                "KV heads (grouped-query attention)"
            )
    elif family == "moe":
        if shape["topk"] > shape["E"]:
            raise QueryError(
                f"{field}: topk = {shape['topk']} experts per token exceeds E = {shape['E']} experts"
            )
        if shape["E"] % shape.get("ep", 1):
            raise QueryError(f"{field}: E = {shape['E']} experts must divide over ep = {shape['ep']} GPUs")
        if shape["I"] % shape.get("tp", 1):
            raise QueryError(f"{field}: I = {shape['I']} must divide over tp = {shape['tp']} GPUs")
    elif family == "conv" and shape["ksize"] > shape["insize"] + 2 * shape.get("pad", 0):
        raise QueryError(
            f"{field}: ksize = {shape['ksize']} exceeds the padded image side insize + 2*pad = "
            f"{shape['insize'] + 2 * shape.get('pad', 0)}: the convolution has no output"
        )
    elif family == "allreduce" and shape["gpus"] < 2:
        raise QueryError(f"{field}.gpus = {shape['gpus']}: an all-reduce needs at least 2 GPUs")


def limit_text(n: int) -> str:
    """A limit as users read it: ``2**36 = 68,719,476,736`` for a power of two above 1,024, else ``1,000``."""
    return f"2**{n.bit_length() - 1} = {n:,}" if n > 1024 and n & (n - 1) == 0 else f"{n:,}"


def whole_number(value: Any, where: str, low: int, high: int, what: str = "value") -> int:
    """``value`` (an int, an integral float such as 4096.0 from a CSV, or its text) as an int in [low, high];
    else a QueryError naming the field and the limit, e.g. ``shape.M: 1e30 is above the largest size
    accepted (2**36)``. The one wording of a numeric error in every form: CLI, batch file, HTTP."""
    shown = value.strip() if isinstance(value, str) else repr(value)
    number: Any = value
    if isinstance(value, str):
        try:
            number = int(value.strip()) if value.strip().lstrip("+-").isdigit() else float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (Integral, Real)):
        raise QueryError(
            f"{where}: {shown} is not a number; give a whole number from {low:,} to {limit_text(high)}"
        )
    if number > high:
        raise QueryError(f"{where}: {shown} is above the largest {what} accepted ({limit_text(high)})")
    if number < low:
        raise QueryError(f"{where}: {shown} is below the smallest {what} accepted ({limit_text(low)})")
    if not float(number).is_integer():
        raise QueryError(f"{where}: {shown} is not a whole number")
    return int(number)  # type: ignore[arg-type]


def shape_from_text(text: str, where: str) -> dict[str, int]:
    """``M=4096,N=4096,K=4096`` -> {"M": 4096, ...}: the one text form of a shape (``--shape``, a CSV cell,
    a JSONL or HTTP string); each size checked by :func:`whole_number`."""
    from components.physics.shape_rules import ZERO_DIMS

    shape: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name.replace("_", "a").isalnum() or not value:
            raise QueryError(f"{where} item {item!r}: expected NAME=VALUE items such as M=4096,N=4096,K=4096")
        # a convolution's padding may be 0 (check_bounds says for which family); every other size is >= 1
        smallest = 0 if name in ZERO_DIMS else 1
        shape[name] = whole_number(value, f"{where}.{name}", smallest, MAX_DIM, "size")
    if not shape:
        raise QueryError(f"{where}: empty; e.g. M=4096,N=4096,K=4096")
    return shape


def parse_shape(text: str) -> dict[str, int]:
    """``--shape M=4096,N=4096,K=4096`` -> {"M": 4096, ...}; a clear error names the bad item."""
    return shape_from_text(text, "--shape")


def query_frames(op: str, shape: dict[str, int], dtype: str, device_ids: list[str]):
    """One canonical (measurements, kernels) pair per device for the query."""
    import pandas as pd

    from components.ingest.schema import (
        KERNEL_COLUMNS,
        MEASUREMENT_COLUMNS,
        canonical_json,
        conform,
        stable_id,
    )

    if op not in FAMILY_OF_OP:
        raise QueryError(f"--op {op!r}: choose one of {', '.join(sorted(FAMILY_OF_OP))}")
    check_shape(op, shape)
    family, op_name = FAMILY_OF_OP[op]
    shape_json = canonical_json(shape)
    kernel_id = stable_id("query", family, op_name, dtype, shape_json)
    kernels = conform(
        pd.DataFrame(
            [
                {
                    "kernel_id": kernel_id,
                    "source": "query",
                    "family": family,
                    "op": op_name,
                    "name": f"{op_name}{shape}",
                    "language": "op",
                    "shape_json": shape_json,
                    "dtype": dtype,
                }
            ]
        ),
        KERNEL_COLUMNS,
    )
    rows = [
        {
            "measurement_id": stable_id("query", kernel_id, d),
            "kernel_id": kernel_id,
            "device_id": d,
            "source": "query",
            "params_json": shape_json,
            "run_id": "query",
        }
        for d in device_ids
    ]
    return conform(pd.DataFrame(rows), MEASUREMENT_COLUMNS), kernels


def load_any_predictor(model: str):
    """``roofline`` | a local predictor directory | ``models:/`` / ``runs:/``
    (``components.registry.loading``)."""
    from components.registry.loading import ModelLoadError
    from components.registry.loading import load_any_predictor as load

    try:
        return load(model)
    except ModelLoadError as exc:
        raise QueryError(f"--model {model}: {exc}") from exc
