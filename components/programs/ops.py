"""Map traced aten calls to op-level questions the op models answer.

Each recorded aten call becomes one ``OpQuestion``: its kind (gemm, bmm -- an MoE's grouped GEMM
too --, conv, elementwise, reduction, softmax, norm, pooling, attention, copy, rnn; ``free`` for views
and metadata calls that launch no kernel), the canonical ``family``/``op``/shape the feature builder
(``components.features.analytical``) computes FLOPs, bytes and roofline times from, and its dtype.

Where no op formula fits (reductions, pooling, grouped convolutions, scans, anything unknown) the
op is sent as a bytes-moved question: an elementwise ``copy`` whose traffic equals the bytes the
call reads plus writes, so its roofline time is the honest DRAM-bound estimate. ``mapped`` is
False for unknown aten ops, counted per program (``unmapped``) and named in the answer's note.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from components.physics.dtypes import element_bytes, traced_dtype
from components.physics.elementwise import ELEMENTWISE_COST
from components.physics.moe import experts_touched
from components.programs.aten_names import (
    ATTENTION_OPS,
    BMM_OPS,
    CAUSAL_ARG,
    CONV_OPS,
    COPY_OPS,
    ELEMENTWISE_MAP,
    FREE_OPS,
    GEMM_OPS,
    GROUPED_GEMM_OPS,
    NORM_OPS,
    POOL_PREFIXES,
    REDUCTION_OPS,
    RNN_OPS,
    ROUTER_OPS,
    SCAN_OPS,
    SOFTMAX_OPS,
)


@dataclass(frozen=True)
class OpQuestion:
    """One traced aten call as an op-level question (``family``/``op``/``shape`` for the features)."""

    aten: str
    kind: str
    family: str | None  # None for free ops
    op: str | None
    shape: tuple[tuple[str, float], ...]
    dtype: str
    bytes_moved: float  # tensors read + written, the bytes-moved fallback's traffic
    mapped: bool = True  # False: an aten op this table does not know (bytes-moved fallback)
    causal: bool = False  # attention under PyTorch's (top-left) causal mask: shape causal = 2, else 0

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.kind, self.family, self.op, self.shape, self.dtype, self.aten)


def _numel(shape: list[int]) -> float:
    return float(math.prod(shape)) if shape else 1.0


def _dtype(entries: list[list[Any]]) -> str:
    for _shape, dtype, *_ in entries:
        if dtype.startswith(("float", "bfloat", "complex")):
            return traced_dtype(dtype)
    return traced_dtype(entries[0][1]) if entries else "fp32"


def _bytes(entries: list[list[Any]]) -> float:
    return sum(_numel(shape) * element_bytes(traced_dtype(dtype)) for shape, dtype, *_ in entries)


def _shape(**dims: float) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((k, float(v)) for k, v in dims.items()))


def _bytes_moved(aten: str, kind: str, dtype: str, moved: float, mapped: bool = True) -> OpQuestion:
    """A DRAM-bound estimate: an elementwise copy reading and writing ``moved`` bytes in total."""
    elem = element_bytes(dtype)
    n = max(1.0, moved / (2.0 * elem))
    return OpQuestion(aten, kind, "elementwise", "copy", _shape(N=round(n)), dtype, moved, mapped)


def _scalar(op: dict[str, Any], index: int, default: Any) -> Any:
    scalars = op.get("scalars") or []
    value = scalars[index] if index < len(scalars) else None
    return default if value is None else value


def _conv(op: dict[str, Any], dtype: str, moved: float) -> OpQuestion:
    """Convolutions as the implicit GEMM with their FLOPs and bytes (kinds: ``conv``, ``conv_grouped``
    for grouped/depthwise, ``conv_transposed``: cuDNN picks different algorithms for each, so each
    kind gets its own learned efficiency)."""
    inputs, outputs = op["inputs"], op["outputs"]
    if len(inputs) < 2 or not outputs:
        return _bytes_moved(op["aten"], "conv", dtype, moved, mapped=False)
    x, w, y = inputs[0][0], inputs[1][0], outputs[0][0]
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x) or len(y) != len(x):
        return _bytes_moved(op["aten"], "conv", dtype, moved, mapped=False)
    stride, padding, dilation = (_scalar(op, i, [1]) for i in (3, 4, 5))
    transposed, groups = bool(_scalar(op, 6, False)), max(1, int(_scalar(op, 8, 1) or 1))
    n, cin, cout = x[0], x[1], y[1]
    kernel = w[2:]
    kind = "conv_transposed" if transposed else ("conv_grouped" if groups > 1 else "conv")
    name = f"conv{spatial}d" + ("_transposed" if transposed else "")
    # A grouped conv is `groups` independent convs: batch N*groups of Cin/groups -> Cout/groups.
    batch, cin_g, cout_g = n * groups, cin / groups, cout / groups
    square = (
        spatial == 2
        and x[2] == x[3]
        and kernel[0] == kernel[1]
        and len(set(stride)) == 1
        and len(set(padding)) == 1
        and set(dilation) == {1}
        and not transposed
    )
    if square:
        shape = _shape(
            B=batch,
            cin=cin_g,
            cout=cout_g,
            ksize=kernel[0],
            input_size=x[2],
            stride=stride[0],
            pad=padding[0],
        )
        return OpQuestion(op["aten"], kind, "conv", name, shape, dtype, moved)
    shape = _pixel_conv(batch, cin_g, cout_g, _numel(kernel), _numel(x[2:]), _numel(y[2:]), transposed)
    return OpQuestion(op["aten"], kind, "conv", name, shape, dtype, moved)


def _pixel_conv(
    batch: float, cin: float, cout: float, taps: float, pixels_in: float, pixels_out: float, transposed: bool
) -> tuple[tuple[str, Any], ...]:
    """A conv of any image and kernel shape (asymmetric, dilated, 1-D/3-D, transposed) in the square conv
    family's terms with its exact work: ``batch * output pixels`` images of one output pixel each, each
    reading its share of the input (side sqrt(in/out pixels)) through a kernel of side sqrt(taps) -- for a
    transposed conv, which scatters each input pixel through all its taps, ``taps * in/out pixels`` taps
    per output pixel on average.

    FLOPs, input and output bytes are the op's own: the input read once and the output written once, not
    an im2col/col2im expansion (a depthwise 3x3 on a 256x512 image was 9x its bytes, a roofline 3-5x
    above the measured time; transposed convs were 1.2-2.2x above it)."""
    if transposed:
        taps = taps * pixels_in / max(pixels_out, 1.0)
    side_k, side_in = math.sqrt(taps), math.sqrt(pixels_in / max(pixels_out, 1.0))
    # pad and stride that leave exactly one output pixel: 0 < in + 2*pad - k < stride (the margin keeps
    # rounding from flooring the output side to 0)
    pad = max(0.0, (side_k - side_in) / 2.0) + 1e-6
    stride = side_in + 2.0 * pad - side_k + 1.0
    return _shape(
        B=batch * pixels_out, cin=cin, cout=cout, ksize=side_k, input_size=side_in, stride=stride, pad=pad
    )


def _gemm(op: dict[str, Any], dtype: str, moved: float) -> OpQuestion:
    inputs = [i[0] for i in op["inputs"]]
    out = op["outputs"][0][0] if op["outputs"] else None
    aten = op["aten"]
    if aten in BMM_OPS:
        a, b = (inputs[1], inputs[2]) if aten == "baddbmm" and len(inputs) >= 3 else (inputs[0], inputs[1])
        if len(a) == 3 and len(b) == 3:
            return OpQuestion(aten, "bmm", "bmm", "bmm", _shape(B=a[0], M=a[1], N=b[2], K=a[2]), dtype, moved)
        return _bytes_moved(aten, "bmm", dtype, moved, mapped=False)
    mats = [s for s in inputs if len(s) == 2]
    if len(mats) >= 2 and out is not None and len(out) == 2:
        a, b = mats[-2], mats[-1]
        return OpQuestion(aten, "gemm", "linear", "linear", _shape(M=out[0], N=out[1], K=a[1]), dtype, moved)
    if aten == "linear" and len(inputs) >= 2 and out is not None:
        k = inputs[0][-1]
        return OpQuestion(
            aten, "gemm", "linear", "linear", _shape(M=_numel(out[:-1]), N=out[-1], K=k), dtype, moved
        )
    return _bytes_moved(aten, "gemm", dtype, moved, mapped=False)


@dataclass(frozen=True)
class Route:
    """What the last traced router chose: ``tokens`` tokens, each sent to ``topk`` of ``experts``."""

    tokens: float
    experts: float
    topk: float


def router_route(op: dict[str, Any]) -> Route | None:
    """The route a ``topk(logits [tokens, experts], k)`` call chooses (None for another shape)."""
    logits = op["inputs"][0][0] if op.get("inputs") else []
    k = _scalar(op, 1, None)
    if len(logits) < 2 or not isinstance(k, (int, float)) or k < 1:
        return None
    experts = float(logits[-1])
    return Route(tokens=_numel(logits) / max(experts, 1.0), experts=experts, topk=float(k))


def _grouped_gemm(op: dict[str, Any], dtype: str, moved: float, route: Route | None) -> OpQuestion:
    """A grouped GEMM as the batched GEMM of the groups its rows touch, with the grouped GEMM's own work.

    ``_grouped_mm(A [R, K], B [G, K, N], offs)``: R routed rows, each through its group's K x N weights
    (an MoE expert's projection; its backward's ``A^T [K, R] x dY [R, N] -> [G, K, N]`` likewise). On fake
    tensors the split of rows over groups is unknown, so it is the MoE family's (``physics/moe.py``): rows
    spread uniformly, the groups touched the expected distinct experts ``experts_touched`` of the router
    traced just before (R = tokens x topk over its G experts), else of R independent picks. As B = touched
    groups of M = R / B rows, ``2*B*M*N*K`` is the grouped GEMM's FLOPs and ``B*(M*K + M*N) + B*K*N`` its
    bytes (the rows in and out once, each touched group's weights once), so the engine's GEMM tiers answer
    it and its roofline is its own."""
    inputs = [i[0] for i in op.get("inputs") or []]
    out = op["outputs"][0][0] if op.get("outputs") else []
    aten = op["aten"]
    if len(inputs) < 2 or len(inputs[0]) != 2:
        return _bytes_moved(aten, "bmm", dtype, moved, mapped=False)
    a, b = inputs[0], inputs[1]
    if len(b) == 3 and len(out) == 2:  # rows x experts' weights: [R, K] x [G, K, N] -> [R, N]
        groups, rows, m_dim, n, k = float(b[0]), float(a[0]), None, float(b[2]), float(a[1])
    elif len(b) == 2 and len(out) == 3:  # a weight gradient: [K, R] x [R, N] -> [G, K, N]
        groups, rows, m_dim, n, k = float(out[0]), float(a[1]), float(a[0]), float(b[1]), None
    else:
        return _bytes_moved(aten, "bmm", dtype, moved, mapped=False)
    if route is not None and route.experts == groups and abs(route.tokens * route.topk - rows) < 0.5:
        touched = float(experts_touched(route.tokens, route.experts, route.topk))
    else:
        touched = float(experts_touched(rows, groups, 1.0))
    touched = min(max(round(touched, 4), 1.0), rows)  # 4 decimals: 128, not 127.99999999999943
    per_group = rows / touched
    if k is None:  # the weight gradient: each group's K x N from its rows (the GEMM's depth)
        shape = _shape(B=touched, M=m_dim, N=n, K=per_group)
    else:
        shape = _shape(B=touched, M=per_group, N=n, K=k)
    return OpQuestion(aten, "bmm", "bmm", "bmm", shape, dtype, moved)


def _is_causal(op: dict[str, Any]) -> bool:
    value = (op.get("kwargs") or {}).get("is_causal")
    if value is None and op["aten"] in CAUSAL_ARG:
        value = _scalar(op, CAUSAL_ARG[op["aten"]], False)
    return value is True or str(value).lower() == "true"


def _attention(op: dict[str, Any], dtype: str, moved: float) -> OpQuestion:
    q, k = op["inputs"][0][0], op["inputs"][1][0]
    if len(q) == 4 and len(k) == 4:
        causal = _is_causal(op)
        # causal pairs are counted by components/physics/attention.py (mode 2: SDPA's top-left mask; a causal
        # kernel skips the masked blocks, so its FLOPs are about half of the full attention's)
        mask = 2.0 if causal else 0.0
        shape = _shape(B=q[0], heads=q[1], seq=q[2], seq_kv=k[2], head_dim=q[3], causal=mask)
        return OpQuestion(op["aten"], "attention", "attention", "sdpa", shape, dtype, moved, causal=causal)
    return _bytes_moved(op["aten"], "attention", dtype, moved, mapped=False)


def display_name(question: OpQuestion) -> str:
    """The name a user wrote for an op: every SDPA backend (``_scaled_dot_product_flash_attention_for_cpu``
    is the CPU tracer's) as ``scaled_dot_product_attention``, marked causal where it is."""
    if question.aten in ATTENTION_OPS:
        return "scaled_dot_product_attention" + (" (causal)" if question.causal else "")
    return question.aten


def _rows_cols(shape: list[int], dim: int) -> tuple[float, float]:
    dim = dim % len(shape) if shape else 0
    cols = float(shape[dim]) if shape else 1.0
    return _numel(shape) / max(cols, 1.0), cols


def _norm(op: dict[str, Any], dtype: str, moved: float) -> OpQuestion:
    aten = op["aten"]
    x = op["inputs"][0][0] if op["inputs"] else []
    if not x:
        return _bytes_moved(aten, "norm", dtype, moved, mapped=False)
    total = _numel(x)
    if aten in ("native_layer_norm", "layer_norm", "_fused_rms_norm", "rms_norm"):
        normalized = _scalar(op, 1, [x[-1]])
        cols = _numel(list(normalized)) if isinstance(normalized, list) else float(x[-1])
        family = "rmsnorm" if "rms" in aten else "layernorm"
    elif "group_norm" in aten:
        groups = float(_scalar(op, 6, 1) or 1)
        cols = total / max(1.0, x[0] * groups)
        family = "layernorm"
    else:  # batch norm (training mode: statistics per channel over N x spatial)
        cols = total / max(1.0, float(x[1]) if len(x) > 1 else 1.0)
        family = "layernorm"
    kind = "batchnorm" if "batch_norm" in aten else "norm"
    return OpQuestion(
        aten,
        kind,
        family,
        "layer_norm" if family == "layernorm" else "rmsnorm",
        _shape(B=max(1.0, total / cols), H=cols),
        dtype,
        moved,
    )


def _elementwise(op: dict[str, Any], name: str, dtype: str, moved: float) -> OpQuestion:
    out = op["outputs"][0][0] if op["outputs"] else (op["inputs"][0][0] if op["inputs"] else [1])
    numel = _numel(out)
    cost = ELEMENTWISE_MAP[name]
    tensors = [i for i in op["inputs"] if _numel(i[0]) * 4 >= numel]  # full-size operands read
    if cost in ("add", "sub", "mul", "div", "pow") and len(tensors) < 2:
        cost += "u"
    if cost not in ELEMENTWISE_COST:
        cost = "copy"
    return OpQuestion(op["aten"], "elementwise", "elementwise", cost, _shape(N=numel), dtype, moved)


def _rnn(op: dict[str, Any], dtype: str, moved: float) -> OpQuestion:
    """An RNN layer as its gate GEMM: rows = steps x batch, columns = gates x hidden (x directions),
    depth = input + hidden. (Its time steps run one after the other: the ``rnn`` kind learns that.)"""
    mats = [i[0] for i in op["inputs"] if len(i[0]) == 2]
    x = op["inputs"][0][0] if op["inputs"] else []
    if len(mats) >= 2 and len(x) == 3:
        gates, depth = mats[0][0], mats[0][1] + mats[1][1]
        return OpQuestion(
            op["aten"], "rnn", "linear", "linear", _shape(M=x[0] * x[1], N=gates, K=depth), dtype, moved
        )
    return _bytes_moved(op["aten"], "rnn", dtype, moved, mapped=False)


def map_op(op: dict[str, Any], route: Route | None = None) -> OpQuestion:
    """The op-level question for one recorded aten call (see the module docstring); ``route``: the
    router traced before it (``router_route``), which a grouped GEMM's experts follow."""
    aten = str(op["aten"])
    name = aten.rstrip("_") if aten.endswith("_") and not aten.startswith("_") else aten
    entries = list(op.get("inputs") or []) + list(op.get("outputs") or [])
    dtype = _dtype(entries)
    moved = _bytes(op.get("inputs") or []) + _bytes(op.get("outputs") or [])
    if op.get("view") or aten in FREE_OPS:
        return OpQuestion(aten, "free", None, None, (), dtype, 0.0)
    if aten in GEMM_OPS or aten in BMM_OPS:
        return _gemm(op, dtype, moved)
    if aten in GROUPED_GEMM_OPS:
        return _grouped_gemm(op, dtype, moved, route)
    if aten in CONV_OPS:
        return _conv(op, dtype, moved)
    if aten in ATTENTION_OPS:
        return _attention(op, dtype, moved)
    if aten in SOFTMAX_OPS and op.get("inputs"):
        rows, cols = _rows_cols(op["inputs"][0][0], int(_scalar(op, 1, -1)))
        return OpQuestion(aten, "softmax", "softmax", "softmax", _shape(B=rows, H=cols), dtype, moved)
    if aten in NORM_OPS:
        return _norm(op, dtype, moved)
    if name in ELEMENTWISE_MAP:
        return _elementwise(op, name, dtype, moved)
    if aten.startswith(POOL_PREFIXES):
        return _bytes_moved(aten, "pooling", dtype, moved)
    if aten in SCAN_OPS:
        return _bytes_moved(aten, "scan", dtype, moved)
    if name in REDUCTION_OPS or aten in REDUCTION_OPS:
        return _bytes_moved(aten, "reduction", dtype, moved)
    if name in COPY_OPS or aten in COPY_OPS:
        return _bytes_moved(aten, "copy", dtype, moved)
    if aten in RNN_OPS:
        return _rnn(op, dtype, moved)
    return _bytes_moved(aten, "unmapped", dtype, moved, mapped=False)


@dataclass
class ProgramOps:
    """A traced program's kernels, identical questions merged (``counts``)."""

    questions: list[OpQuestion] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    n_aten: int = 0  # every aten call, views included (each costs framework time on the CPU)
    n_kernels: int = 0  # calls that launch a kernel
    unmapped: Counter = field(default_factory=Counter)  # aten name -> calls sent as bytes-moved fallbacks
    dtype: str = "fp32"  # the program's dominant floating dtype (by kernel count)
    rnn_steps: float = 0.0  # time steps the RNN layers run one after another (x directions)
    # the host side the tracer saw (trace_worker.HOST_KEYS; 0 for traces recorded before it counted them)
    n_modules: int = 0  # nn.Module calls
    n_pycalls: int = 0  # torch API calls made from Python


def program_ops(ops: list[dict[str, Any]]) -> ProgramOps:
    """Map and merge every recorded call of one trace."""
    merged: dict[tuple[Any, ...], int] = {}
    first: dict[tuple[Any, ...], OpQuestion] = {}
    result = ProgramOps(
        n_aten=len(ops),
        n_modules=sum(int(op.get("mods", 0)) for op in ops),
        n_pycalls=sum(int(op.get("fns", 0)) for op in ops),
    )
    dtypes: Counter = Counter()
    route: Route | None = None
    for op in ops:
        if op.get("aten") in ROUTER_OPS:
            route = router_route(op) or route
        question = map_op(op, route)
        if question.kind == "free":
            continue
        result.n_kernels += 1
        dtypes[question.dtype] += 1
        if not question.mapped:
            result.unmapped[question.aten] += 1
        if question.aten == "_cudnn_rnn" and question.mapped:  # the tracer's record: [steps, batch, width]
            result.rnn_steps += float(op["inputs"][0][0][0]) * float(_scalar(op, 2, 1) or 1)
        merged[question.key] = merged.get(question.key, 0) + 1
        first.setdefault(question.key, question)
    result.questions = [first[k] for k in merged]
    result.counts = [merged[k] for k in merged]
    result.dtype = dtypes.most_common(1)[0][0] if dtypes else "fp32"
    return result
