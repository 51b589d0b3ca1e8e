"""Op + shapes: the accepted ops, dimensions and dtypes, their plausibility bounds, and shape parsing.

Shared by ``components.serving.questions`` (the one question schema of ``kernelcast predict``, the
HTTP server and the registered pyfunc) and by callers that build canonical query rows
(``query_frames``: one canonical measurement per device, for the training feature builder).
"""

from __future__ import annotations

from typing import Any


class QueryError(ValueError):
    """A query the user must fix (bad op, shape, device); the message names the field."""


FAMILY_OF_OP: dict[str, tuple[str, str]] = {
    # --op value -> (family, op) as the canonical kernels table names them
    "gemm": ("gemm", "matmul"), "matmul": ("gemm", "matmul"), "linear": ("linear", "linear"),
    "bmm": ("bmm", "bmm"), "add": ("elementwise", "add"), "mul": ("elementwise", "mul"),
    "gelu": ("elementwise", "gelu"), "relu": ("elementwise", "relu"), "tanh": ("elementwise", "tanh"),
    "softmax": ("softmax", "softmax"), "layernorm": ("layernorm", "layer_norm"), "rmsnorm": ("rmsnorm", "rmsnorm"),
    # More elementwise ops the analytical model has a cost entry for (components.features.analytical).
    "sub": ("elementwise", "sub"), "div": ("elementwise", "div"), "pow": ("elementwise", "pow"),
    "silu": ("elementwise", "silu"), "sigmoid": ("elementwise", "sigmoid"), "exp": ("elementwise", "exp"),
    "log": ("elementwise", "log"), "sqrt": ("elementwise", "sqrt"), "rsqrt": ("elementwise", "rsqrt"),
    "neg": ("elementwise", "neg"), "abs": ("elementwise", "abs"), "copy": ("elementwise", "copy"),
}

# dtypes an op question may name (canonical spellings; "bfloat16", "float16", "half" ... map onto them).
DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
# Plausibility bounds of one question: larger is a typo or an attack, not a kernel any GPU holds.
MAX_DIM: int = 2**24  # 16,777,216 per dimension
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
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"unknown {', '.join(unknown)}"] if unknown else []) + ([f"{', '.join(extra)} does not go with {', '.join(d for d in closest if d in shape)}"] if extra else [])
    accepted = " or ".join(", ".join(dims) for dims in options)
    raise QueryError(f"{label or f'--shape for --op {op}'}: {'; '.join(problems)}; {op} takes {accepted}")


def canonical_op_dtype(dtype: Any, field: str = "dtype") -> str:
    """``bfloat16`` -> ``bf16``; a QueryError naming the accepted list for anything else."""
    from components.devices import canonical_dtype

    try:
        precision = canonical_dtype(str(dtype))
    except ValueError:
        precision = None
    if precision not in DTYPES:
        raise QueryError(f"{field} {dtype!r}: not an accepted dtype; choose one of {', '.join(DTYPES)}")
    return precision


def shape_work(family: str, shape: dict[str, int], dtype: str) -> tuple[float, float]:
    """(FLOPs, bytes of operands + result) of an op by its shape: what the plausibility bounds check."""
    from components.features.analytical import ELEM_BYTES

    e = ELEM_BYTES.get(dtype, 4.0)
    g = {k: float(v) for k, v in shape.items()}
    if family in ("gemm", "linear", "bmm"):
        b, m, n, k = g.get("B", 1.0), g["M"], g["N"], g["K"]
        return 2.0 * b * m * n * k, e * b * (m * k + k * n + m * n)
    numel = g["N"] if "N" in g else g.get("B", 1.0) * g["H"]
    return 16.0 * numel, 3.0 * e * numel


def check_bounds(op: str, shape: dict[str, int], dtype: str, field: str = "shape") -> None:
    """A QueryError when a size is not an integer in [1, MAX_DIM] or the work exceeds MAX_FLOPS/MAX_BYTES."""
    for name, value in shape.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
            raise QueryError(f"{field}.{name} = {value!r}: a size must be an integer from 1 to {MAX_DIM:,} (2**24)")
    flops, nbytes = shape_work(FAMILY_OF_OP[op][0], shape, dtype)
    if flops > MAX_FLOPS:
        raise QueryError(f"{field} for {op}: {flops:.3g} FLOPs exceeds the bound of {MAX_FLOPS:.0e} FLOPs per kernel")
    if nbytes > MAX_BYTES:
        raise QueryError(f"{field} for {op}: {nbytes:.3g} bytes of operands exceeds the bound of 1 TiB (2**40 bytes)")


def parse_shape(text: str) -> dict[str, int]:
    """``M=4096,N=4096,K=4096`` -> {"M": 4096, ...}; a clear error names the bad item."""
    shape: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) <= 0:
            raise QueryError(f"--shape item {item!r}: expected NAME=positive integer, e.g. M=4096")
        shape[name.strip()] = int(value)
    if not shape:
        raise QueryError("--shape is empty; e.g. --shape M=4096,N=4096,K=4096")
    return shape


def query_frames(op: str, shape: dict[str, int], dtype: str, device_ids: list[str]):  # noqa: ANN201
    """One canonical (measurements, kernels) pair per device for the query."""
    import pandas as pd

    from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, canonical_json, conform, stable_id

    if op not in FAMILY_OF_OP:
        raise QueryError(f"--op {op!r}: choose one of {', '.join(sorted(FAMILY_OF_OP))}")
    check_shape(op, shape)
    family, op_name = FAMILY_OF_OP[op]
    shape_json = canonical_json(shape)
    kernel_id = stable_id("query", family, op_name, dtype, shape_json)
    kernels = conform(pd.DataFrame([{"kernel_id": kernel_id, "source": "query", "family": family, "op": op_name,
                                     "name": f"{op_name}{shape}", "language": "op", "shape_json": shape_json,
                                     "dtype": dtype}]), KERNEL_COLUMNS)
    rows = [{"measurement_id": stable_id("query", kernel_id, d), "kernel_id": kernel_id, "device_id": d,
             "source": "query", "params_json": shape_json, "run_id": "query"} for d in device_ids]
    return conform(pd.DataFrame(rows), MEASUREMENT_COLUMNS), kernels


def load_any_predictor(model: str):  # noqa: ANN201
    """``roofline`` | a local predictor directory | ``models:/`` / ``runs:/`` (``components.registry.loading``)."""
    from components.registry.loading import ModelLoadError
    from components.registry.loading import load_any_predictor as load

    try:
        return load(model)
    except ModelLoadError as exc:
        raise QueryError(f"--model {model}: {exc}") from exc
