"""Compose a deployment's prefill and decode steps from per-op times; TTFT, TPOT, throughput, memory.

Per layer and per GPU of a TP group: RMSNorm x2, QKV GEMM, (QK-norm), rotary, attention (GQA; causal
prefill, decode against the growing KV cache; sliding-window layers capped at the window), O GEMM, the
MLP (up/gate GEMM, SiLU x mul, down GEMM) or MoE (router GEMM, routed expert GEMMs, shared experts),
two residual adds and two TP all-reduces; then the final norm, LM head and sampling. Every op goes
through one ``OpTimeFn``. Production answers simulate the serving engine over these steps
(``answer``, ``simulate``); ``framework_cost`` keeps the earlier fitted per-step cost.
Decode is integrated over the ``osl`` steps: attention is evaluated at ``DECODE_POINTS`` contexts
spread over isl..isl+osl and averaged (the other ops do not depend on the context).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from components.deployments.config import Deployment
from components.deployments.memory import DoesNotFit as DoesNotFit
from components.deployments.memory import kv_bytes_per_token as kv_bytes_per_token
from components.deployments.memory import memory_check as memory_check
from components.deployments.memory import memory_notes as memory_notes
from components.deployments.memory import weight_bytes_per_gpu as weight_bytes_per_gpu
from components.deployments.op_limits import limits_of, line_times
from components.deployments.ops import (
    OpTimeFn,
    roofline_op_time,
    sol_split,
)

DECODE_POINTS = 8  # contexts at which decode attention is evaluated (midpoints of equal step ranges)
ACT_BYTES = 2  # activations and all-reduce messages in 16-bit
STEADY, BATCH = "steady", "batch"
WORKLOADS = (STEADY, BATCH)


OVERHEADS = ("launches", "allreduces", "allreduce_gpus")  # per-step counts behind the fitted overheads


@dataclass
class OpLine:
    phase: str
    kind: str  # breakdown label: gemm, attention, moe, allreduce, norm, activation, rotary, residual, ...
    family: str
    dtype: str
    shape: dict[str, Any]
    count: float  # how many times one step runs it (layers)
    kv_dtype: str | None = None
    time_us: float = 0.0  # per step, count included
    floor_us: float = 0.0  # speed-of-light, count included
    tier: str = "roofline"
    each_us: Any = None  # per element of the shape arrays, count included (the step model's grids)
    parts: Any = None  # what each_us is bounded from (``op_limits.line_times``), count included


@dataclass
class Answer:
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    tokens_per_s: float  # output tokens per second per GPU
    prefill_ms: float  # one prefill step of the whole batch (kernels + framework)
    decode_step_ms: float  # one decode step at the batch, averaged over the output
    breakdown: dict[str, dict[str, dict[str, float]]]
    memory: dict[str, float]
    interval: dict[str, list[float]]
    notes: list[str]
    tiers: dict[str, str]
    deployment: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_us(cls, times_us: dict[str, float], tokens_per_s: float, **parts: Any) -> Answer:
        """An answer from its times in microseconds (``ttft``, ``tpot``, ``e2e``, ``prefill``,
        ``decode_step``), rounded once here so every engine reports them alike; ``parts``: the rest."""
        return cls(
            ttft_ms=round(times_us["ttft"] / 1e3, 4),
            tpot_ms=round(times_us["tpot"] / 1e3, 4),
            e2e_ms=round(times_us["e2e"] / 1e3, 3),
            tokens_per_s=round(tokens_per_s, 2),
            prefill_ms=round(times_us["prefill"] / 1e3, 4),
            decode_step_ms=round(times_us["decode_step"] / 1e3, 4),
            **parts,
        )


# Weight dtypes a GPU without their pipe serves weight-only (W8A16 Marlin-style kernels in vLLM, SGLang and
# TensorRT-LLM): the weights stay 1 byte in memory and are read as such; the math runs in 16-bit.
WEIGHT_ONLY_FALLBACK = {"fp8": "int8_wo", "fp8_block": "int8_wo"}
# the routed experts of a 4-bit float checkpoint where the GPU has no fp4 pipe: 4-bit weights, 16-bit math
# (the engines' w4a16 MXFP4 MoE kernels on Hopper, measured at gpt-oss's site as ``int4_wo``)
EXPERTS_WEIGHT_ONLY_FALLBACK = {**WEIGHT_ONLY_FALLBACK, "nvfp4": "int4_wo"}


def gemm_dtype(d: Deployment, experts: bool = False) -> str:
    """The dtype the deployment's weight GEMMs (``experts``: its routed experts) run as on its GPU: the
    weight dtype, or its weight-only form where the GPU lacks the pipe (fp8 on an A100 reads 1-byte weights,
    not 2)."""
    from components.physics.roofline import PhysicsError, pipe_for

    fallback = (EXPERTS_WEIGHT_ONLY_FALLBACK if experts else WEIGHT_ONLY_FALLBACK).get(d.weight_dtype)
    if fallback is None:
        return d.weight_dtype
    try:
        return fallback if pipe_for(d.weight_dtype, d.gpu).emulated_from else d.weight_dtype
    except PhysicsError:
        return fallback


def _layer_ops(
    d: Deployment,
    phase: str,
    tokens: float,
    batch: float,
    q_len: np.ndarray | float,
    ctx: np.ndarray | float,
    layers: float,
) -> list[OpLine]:
    """One layer's ops on one GPU for ``tokens`` tokens (``batch`` sequences of ``q_len`` attending to
    ``ctx``)."""
    # the mixers beside softmax attention and MLA live in compose_mixers (imported here: it builds on this
    # module's lines)
    from components.deployments.compose_mixers import block_ops, dsa_ops, gdn_ops

    m = d.model
    if m.is_dsa:
        return dsa_ops(d, phase, (tokens, batch, q_len, ctx, layers)) + _mlp_ops(d, phase, tokens, layers)
    if m.block_layout:  # Mamba2 hybrids: one block per layer
        return block_ops(d, phase, (tokens, batch, q_len, ctx, layers))
    if m.is_mla:
        ops = _mla_ops(d, phase, (tokens, batch, q_len, ctx, layers))
        return ops + _mlp_ops(d, phase, tokens, layers)
    act = "bf16"
    ops = [
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": m.hidden}, 2 * layers),
        OpLine(phase, "residual", "elementwise", act, {"N": tokens * m.hidden, "op": "add"}, 2 * layers),
    ]
    # a hybrid model's GDN layers (``gdn_ops``) take their share of the layers; attention the rest
    attn_layers = layers * m.attention_layers / m.layers
    ops += _attention_ops(d, phase, (tokens, batch, q_len, ctx, attn_layers))
    if m.linear_layers:
        ops += gdn_ops(d, phase, (tokens, batch, q_len, ctx, layers - attn_layers))
    return ops + _mlp_ops(d, phase, tokens, layers)


def _attention_ops(d: Deployment, phase: str, sizes: LayerSizes) -> list[OpLine]:
    """``layers`` softmax-attention mixers on one GPU: the QKV GEMM (with Qwen3.5's output gate), rotary,
    (QK-norm), attention -- full-context layers, then sliding-window ones -- and the O GEMM."""
    tokens, batch, q_len, ctx, attn_layers = sizes
    m, tp, wd, act = d.model, d.tp, gemm_dtype(d), "bf16"
    hq, hkv = m.heads // tp, max(1, m.kv_heads // tp)
    h, dh = m.hidden, m.head_dim
    gate = hq * dh if m.attn_output_gate else 0
    ops = [
        OpLine(
            phase, "gemm", "gemm", wd, {"M": tokens, "N": (hq + 2 * hkv) * dh + gate, "K": h}, attn_layers
        ),
        OpLine(
            phase, "rotary", "elementwise", act, {"N": tokens * (hq + hkv) * dh, "op": "mul"}, attn_layers
        ),
        OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": h, "K": hq * dh}, attn_layers),
    ]
    if gate:  # sigmoid(gate) x the attention output
        ops.append(OpLine(phase, "gate", "elementwise", act, {"N": tokens * gate, "op": "mul"}, attn_layers))
    if m.qk_norm:
        ops.append(OpLine(phase, "norm", "rmsnorm", act, {"B": tokens * (hq + hkv), "H": dh}, attn_layers))
    window = m.sliding_window
    full_layers = attn_layers * (1 - m.sliding_layers / max(m.attention_layers, 1))
    win_layers = attn_layers - full_layers
    attn = {"B": batch, "H": hq, "HKV": hkv, "D": dh, "S": q_len, "KV": ctx}
    for count, extra in ((full_layers, {}), (win_layers if window else 0, {"W": window})):
        if count:  # full-context layers, then sliding-window ones
            ops.append(
                OpLine(phase, "attention", "attention", act, {**attn, **extra}, count, kv_dtype=d.kv_dtype)
            )
    return ops


# what one layer is asked for: tokens, batch (sequences), q_len, ctx (context attended to), layers
LayerSizes = tuple[float, float, "np.ndarray | float", "np.ndarray | float", float]


def _mla_ops(d: Deployment, phase: str, sizes: LayerSizes) -> list[OpLine]:
    """Multi-head latent attention of one layer on one GPU (DeepSeek-V3's layout).

    Projections: hidden -> q latent (q_lora_rank) -> per-head queries (nope + rope); hidden -> KV latent
    (kv_lora_rank) + a shared rotary key (replicated on every TP rank). Prefill decompresses the latent
    into per-head K (nope) and V and runs causal attention with head dim nope+rope (QK) and v (PV).
    Decode runs absorbed: queries are mapped into the latent (a per-head BMM), attention is MQA over the
    cached latent (one KV "head" of kv_lora_rank + rope, V being the latent itself), and the output is
    mapped back out of the latent per head before the O projection.
    """
    tokens, batch, q_len, ctx, layers = sizes
    m, tp, wd, act = d.model, d.tp, gemm_dtype(d), "bf16"
    hq, h = m.heads // tp, m.hidden
    nope, rope, vd, lat = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    ops = [
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": h}, 2 * layers),
        OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": lat + rope, "K": h}, layers),
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": lat}, layers),
        OpLine(phase, "rotary", "elementwise", act, {"N": tokens * (hq + 1) * rope, "op": "mul"}, layers),
        OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": h, "K": hq * vd}, layers),
        OpLine(phase, "residual", "elementwise", act, {"N": tokens * h, "op": "add"}, 2 * layers),
    ]
    if m.q_lora_rank:
        ops += [
            OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": m.q_lora_rank, "K": h}, layers),
            OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": m.q_lora_rank}, layers),
            OpLine(
                phase, "gemm", "gemm", wd, {"M": tokens, "N": hq * (nope + rope), "K": m.q_lora_rank}, layers
            ),
        ]
    else:
        ops.append(OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": hq * (nope + rope), "K": h}, layers))
    if phase == "prefill":
        # physics' attention has one head dim for QK and PV: their mean gives the FLOPs and bytes of both
        attn = {"B": batch, "H": hq, "HKV": hq, "D": (nope + rope + vd) / 2, "S": q_len, "KV": ctx}
        ops += [
            OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": hq * (nope + vd), "K": lat}, layers),
            OpLine(phase, "attention", "attention", act, attn, layers, kv_dtype=d.kv_dtype),
        ]
    else:
        # one cached latent row (lat + rope) serves as K and V: D = (lat + rope) / 2 gives its bytes once
        attn = {"B": batch, "H": hq, "HKV": 1, "D": (lat + rope) / 2, "S": q_len, "KV": ctx}
        ops += [
            OpLine(phase, "gemm", "gemm", act, {"B": hq, "M": tokens, "N": lat, "K": nope}, layers),
            OpLine(phase, "attention", "attention", act, attn, layers, kv_dtype=d.kv_dtype),
            OpLine(phase, "gemm", "gemm", act, {"B": hq, "M": tokens, "N": vd, "K": lat}, layers),
        ]
    return ops


def _gated_mlp(
    phase: str,
    tokens: Any,
    inter: int,
    hidden: int,
    weight_dtype: str,
    act: str,
    count: float,
    gated: bool = True,
) -> list[OpLine]:
    """A gated MLP (dense, or a MoE layer's shared experts): up+gate GEMM, SiLU x mul, down GEMM; not
    ``gated`` (Nemotron's relu2): up GEMM, relu^2, down GEMM."""
    up, op = (2 * inter, "silu_and_mul") if gated else (inter, "relu")
    return [
        OpLine(phase, "gemm", "gemm", weight_dtype, {"M": tokens, "N": up, "K": hidden}, count),
        OpLine(phase, "activation", "elementwise", act, {"N": tokens * inter, "op": op}, count),
        OpLine(phase, "gemm", "gemm", weight_dtype, {"M": tokens, "N": hidden, "K": inter}, count),
    ]


def _mlp_ops(
    d: Deployment, phase: str, tokens: float, layers: float, blocks: tuple[float, float] | None = None
) -> list[OpLine]:
    """The dense MLP or MoE block of one layer, and the layer's TP all-reduces; ``blocks``: (dense, MoE)
    counts of a block layout (Mamba2 hybrids), whose all-reduces ``compose_blocks`` adds."""
    m, tp, wd, act, h = d.model, d.tp, gemm_dtype(d), "bf16", d.model.hidden
    ops: list[OpLine] = []
    dense_layers = layers * (1 - m.moe_layers / m.layers)
    dense_layers, moe_layers = blocks or (dense_layers, layers - dense_layers)
    if dense_layers:
        ops += _gated_mlp(phase, tokens, m.intermediate // tp, h, wd, act, dense_layers, m.gated_mlp)
    if moe_layers:
        moe_tp = max(1, tp * d.dp // d.ep)
        routed = tokens * d.dp  # with attention DP, a GPU's experts serve every rank's tokens
        width = m.moe_latent or h  # a latent MoE's experts run on its latent projection
        # relu2 experts have two projections: as a gated one of 2/3 the width (the same FLOPs and weights)
        inter = m.moe_intermediate if m.gated_mlp else m.moe_intermediate * 2.0 / 3.0
        ops += [
            OpLine(phase, "moe", "gemm", act, {"M": tokens, "N": m.experts, "K": h}, moe_layers),
            OpLine(
                phase,
                "moe",
                "moe",
                gemm_dtype(d, experts=True),
                {
                    "T": routed,
                    "E": m.experts,
                    "topk": m.topk,
                    "H": width,
                    "I": inter,
                    "tp": moe_tp,
                    "ep": d.ep,
                },
                moe_layers,
            ),
        ]
        if m.moe_latent:  # into and out of the latent
            ops += [
                OpLine(phase, "moe", "gemm", wd, {"M": tokens, "N": width, "K": h}, moe_layers),
                OpLine(phase, "moe", "gemm", wd, {"M": tokens, "N": h, "K": width}, moe_layers),
            ]
        if m.shared_experts:
            inter = m.shared_experts * m.moe_intermediate // tp
            ops += _gated_mlp(phase, tokens, inter, h, wd, act, moe_layers, m.gated_mlp)
        if d.ep > 1:
            # expert parallelism: each GPU dispatches its share of the tokens to the experts' GPUs and
            # combines their outputs (two all-to-alls of tokens/ep x topk hidden vectors, the (ep-1)/ep
            # leaving the GPU): the all-reduce family's all-to-all variant, over the network for the share
            # bound for GPUs outside this GPU's link domain (physics.collectives)
            a2a = routed / d.ep * min(m.topk, d.ep) * width * ACT_BYTES
            ops.append(
                OpLine(
                    phase,
                    "alltoall",
                    "allreduce",
                    act,
                    {"bytes": a2a, "gpus": d.ep, "op": "alltoall"},
                    2 * moe_layers,
                )
            )
    if blocks is not None:
        return ops
    if tp > 1:
        ops.append(
            OpLine(
                phase,
                "allreduce",
                "allreduce",
                act,
                {"bytes": tokens * h * ACT_BYTES, "gpus": tp},
                2 * layers,
            )
        )
    return ops


def _head_ops(d: Deployment, phase: str, batch: float) -> list[OpLine]:
    """Final norm, LM head (last token of each sequence; vocab-parallel over TP) and sampling."""
    m = d.model
    return [
        OpLine(phase, "norm", "rmsnorm", "bf16", {"B": batch, "H": m.hidden}, 1),
        OpLine(phase, "lm_head", "gemm", "bf16", {"M": batch, "N": m.vocab // d.tp, "K": m.hidden}, 1),
        OpLine(phase, "sampling", "elementwise", "fp32", {"N": batch * m.vocab, "op": "exp"}, 1),
    ]


def step_ops(d: Deployment, phase: str, batch: int, q_len: float, ctx: np.ndarray | float) -> list[OpLine]:
    """Every op of one prefill or decode step of ``batch`` sequences on one GPU (all PP stages in turn)."""
    tokens = batch * q_len
    return _layer_ops(d, phase, tokens, batch, q_len, ctx, d.model.layers) + _head_ops(d, phase, batch)


def _call(
    op_time: OpTimeFn, family: str, dtype: str, kv_dtype: str | None, shape: dict[str, np.ndarray], spec: Any
) -> tuple[np.ndarray, np.ndarray]:
    """One batch of same-kind ops: times (microseconds) and the tier of each row (``measured``, ``spec``...
    from an op engine; ``roofline`` from the fixed-efficiency roofline)."""
    if family in KV_FAMILIES and _takes_kv(op_time):
        out = op_time(family, dtype, shape, spec, kv_dtype=kv_dtype)
    else:
        out = op_time(family, dtype, shape, spec)
    if hasattr(out, "duration_us"):  # an OpTimes from the op engine, or ops.Timed
        times = np.asarray(out.duration_us, dtype="float64")
        tier = np.broadcast_to(np.asarray(getattr(out, "tier", "engine"), dtype=object), times.shape)
        return times, tier
    times = np.asarray(out, dtype="float64")
    return times, np.full(times.shape, "roofline", dtype=object)


def _line_tier(tiers: np.ndarray) -> str:
    """One line's tier: its rows' tier, or the tiers it mixes (decode attention at several contexts)."""
    names = sorted({str(t) for t in tiers})
    return names[0] if len(names) == 1 else "+".join(names)


def _takes_kv(fn: OpTimeFn) -> bool:
    try:
        return "kv_dtype" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


KV_FAMILIES = ("attention", "gdn", "dsa", "mamba2")
# Op kinds timed per sequence (batch, tokens per sequence, context), not per step token: attention and the
# GDN mixer (``stepmodel`` tabulates them over sequences and contexts).
SEQUENCE_KINDS = (
    "attention",
    "linear_attention",
)  # ops that read a per-request cache: its dtype goes to the op-time function
# A dimension one line of a group lacks takes its neutral value (physics: W=0 is no window).
NEUTRAL = {"B": 1.0, "W": 0.0, "tp": 1.0, "ep": 1.0}


def _spread(values: np.ndarray | None, key: str, n: int) -> np.ndarray:
    """One line's ``key`` over its ``n`` elements (absent: the neutral value). A whole-size array as it is:
    ``np.broadcast_to``'s call costs more than the bench's thousands of lines' copies."""
    if values is None:
        values = np.asarray([NEUTRAL.get(key, 0.0)])
    return values if values.shape == (n,) else np.broadcast_to(values, (n,))


def _mean(values: np.ndarray) -> Any:
    """``np.mean`` of a float array as it computes it (the sum reduced, divided by the count), without its
    wrapper's dispatch (a few microseconds a call, on every line of every step grid)."""
    values = np.asarray(values)
    if values.dtype != np.float64 or not values.size:  # other types (as numpy sums them), empty: np.mean
        return np.mean(values)
    return np.add.reduce(values, axis=None) / values.size


def time_ops(lines: list[OpLine], spec: Any, op_time: OpTimeFn) -> float:
    """Fill each line's per-step time and floor (mean over decode context points); return the step's
    kernel time.

    Lines of one (family, dtype, kv dtype, elementwise op) go to the op-time function as ONE call with
    stacked shape arrays: a deployment is ~40 ops, a rank over the catalog thousands of them.
    """
    groups: dict[tuple, list[int]] = defaultdict(list)
    limits = limits_of(op_time)  # the GPU's reachable rates the op times are bounded by (``op_limits``)
    for i, line in enumerate(lines):
        groups[(line.family, line.dtype, line.kv_dtype, line.shape.get("op"))].append(i)
    for (family, dtype, kv_dtype, op), members in groups.items():
        arrays = [
            {k: np.atleast_1d(np.asarray(v, dtype="float64")) for k, v in lines[i].shape.items() if k != "op"}
            for i in members
        ]
        sizes = [max(len(a) for a in shape.values()) for shape in arrays]
        keys = sorted({k for shape in arrays for k in shape})
        stacked: dict[str, Any] = {
            k: np.concatenate([_spread(shape.get(k), k, n) for shape, n in zip(arrays, sizes, strict=True)])
            for k in keys
        }
        if op is not None:
            stacked["op"] = op
        times, tiers = _call(op_time, family, dtype, kv_dtype, stacked, spec)
        floors, tensor_us, memory_us, rest = sol_split(family, dtype, stacked, spec, kv_dtype)
        times = np.maximum(times, floors)
        measured = np.char.startswith(tiers.astype(str), "measured")  # what the GPU itself reached
        rest = np.where(measured, np.nan, rest)  # unmeasured rows: tensor work at the reachable rate
        bounds = np.cumsum([0, *sizes])
        for j, i in enumerate(members):
            part, n = slice(bounds[j], bounds[j + 1]), lines[i].count
            scaled = (times, tensor_us, memory_us, rest)
            lines[i].parts = (*(a[part] * n for a in scaled), measured[part])
            lines[i].each_us = line_times(lines[i].parts, spec, limits)
            lines[i].time_us = float(_mean(lines[i].each_us))
            lines[i].floor_us = float(_mean(floors[part])) * n
            lines[i].tier = _line_tier(tiers[part])
    return sum(line.time_us for line in lines)


def _breakdown(lines: list[OpLine]) -> dict[str, dict[str, Any]]:
    """Per op kind: ms per step, share of the step's kernel time, and the tier(s) that answered its ops."""
    by: dict[str, float] = defaultdict(float)
    tiers: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        by[line.kind] += line.time_us
        tiers[line.kind].update(line.tier.split("+"))
    total = sum(by.values()) or 1.0
    return {
        k: {"ms": round(v / 1e3, 4), "share": round(v / total, 4), "tier": "+".join(sorted(tiers[k]))}
        for k, v in sorted(by.items(), key=lambda x: -x[1])
    }


def line_tiers(lines: list[OpLine]) -> dict[str, str]:
    """The tier(s) that answered each ``phase:kind:family`` of the lines."""
    tiers: dict[str, str] = {}
    for line in lines:
        key = f"{line.phase}:{line.kind}:{line.family}"
        tiers[key] = "+".join(sorted({*tiers.get(key, line.tier).split("+"), *line.tier.split("+")}))
    return tiers


def decode_contexts(isl: float, osl: int) -> np.ndarray:
    """Context lengths at the midpoints of DECODE_POINTS equal ranges of the osl decode steps."""
    points = min(DECODE_POINTS, max(osl, 1))
    return isl + (np.arange(points) + 0.5) * osl / points


@dataclass
class Phases:
    """Kernel-only step times and the lines behind them (before the framework cost)."""

    prefill_kernels_us: float
    decode_kernels_us: float
    prefill_one_us: float  # one request's prefill (steady serving: what a new arrival waits for)
    prefill: list[OpLine]
    decode: list[OpLine]
    one: list[OpLine]

    @staticmethod
    def floor_us(lines: list[OpLine]) -> float:
        return sum(line.floor_us for line in lines)

    @staticmethod
    def overheads(lines: list[OpLine]) -> np.ndarray:
        return overhead_counts(lines)


def overhead_counts(lines: list[OpLine]) -> np.ndarray:
    """(kernels launched, all-reduces answered by physics, those all-reduces x GPUs) of one step.

    The fitted launch and all-reduce latency multiply these; an all-reduce a measured table answered
    already carries its latency, so it is not counted.
    """
    launches = sum(line.count for line in lines if line.time_us > 0)
    physics_ar = [line for line in lines if line.family == "allreduce" and line.tier == "roofline"]
    allreduces = sum(line.count for line in physics_ar)
    gpus = sum(line.count * float(np.mean(line.shape["gpus"])) for line in physics_ar)
    return np.array([launches, allreduces, gpus], dtype="float64")


def phase_lines(d: Deployment, isl_mean: float | None = None) -> tuple[list[OpLine], ...]:
    """The (untimed) ops of one prefill step (concurrency x isl), one decode step and a lone prefill."""
    isl = float(isl_mean or d.isl)
    return (
        step_ops(d, "prefill", d.concurrency, isl, isl),
        step_ops(d, "decode", d.concurrency, 1.0, decode_contexts(isl, d.osl)),
        step_ops(d, "prefill", 1, isl, isl),
    )


def _phases(d: Deployment, prefill: list[OpLine], decode: list[OpLine], one: list[OpLine]) -> Phases:
    pp_hop = (d.pp - 1) * 5.0  # one activation send per stage boundary (NVLink p2p, a few microseconds)
    return Phases(
        sum(x.time_us for x in prefill) + pp_hop,
        sum(x.time_us for x in decode) + pp_hop,
        sum(x.time_us for x in one) + pp_hop,
        prefill,
        decode,
        one,
    )


def compose_many(
    deployments: list[Deployment],
    op_time: OpTimeFn | None = None,
    isl_means: list[float | None] | None = None,
) -> list[Phases]:
    """:func:`compose_phases` of many deployments with ONE op-time call per kind of op and GPU: the op
    engine is vectorised over shapes, so a catalog rank or a bench of a thousand runs costs a few calls per
    GPU, not a few per deployment."""
    op_time = op_time or roofline_op_time
    means = isl_means or [None] * len(deployments)
    lines = [phase_lines(d, m) for d, m in zip(deployments, means, strict=True)]
    specs: list[Any] = []  # distinct GPUs (equal specs share one batch; a spec file with a catalog id not)
    members: list[list[int]] = []
    for i, d in enumerate(deployments):
        k = next((k for k, spec in enumerate(specs) if spec.id == d.gpu.id and spec == d.gpu), None)
        if k is None:
            specs.append(d.gpu)
            members.append([])
            k = len(specs) - 1
        members[k].append(i)
    for spec, group in zip(specs, members, strict=True):
        time_ops([x for i in group for part in lines[i] for x in part], spec, op_time)
    return [_phases(d, *parts) for d, parts in zip(deployments, lines, strict=True)]


def compose_phases(d: Deployment, op_time: OpTimeFn | None = None, isl_mean: float | None = None) -> Phases:
    """Kernel time of one prefill step (concurrency x isl), one decode step (averaged) and a lone prefill."""
    return compose_many([d], op_time, [isl_mean])[0]


def _pipe_notes(d: Deployment) -> list[str]:
    """Say when the GPU lacks the weight dtype's pipe (the GEMMs run as the fallback dtype)."""
    from components.physics.roofline import PhysicsError, pipe_for

    try:
        choice = pipe_for(d.weight_dtype, d.gpu)
    except PhysicsError as exc:
        return [str(exc)]
    if choice.emulated_from:
        return [
            (
                f"{d.gpu.id} has no {choice.emulated_from} pipe: GEMMs run as {choice.dtype} (weights stay "
                f"{d.weight_dtype} in memory)"
            )
        ]
    return []


def describe(d: Deployment) -> dict[str, Any]:
    return {
        "model": d.model.name,
        "gpu": d.gpu.id,
        "isl": d.isl,
        "osl": d.osl,
        "concurrency": d.concurrency,
        "dtype": d.weight_dtype,
        "kv_dtype": d.kv_dtype,
        "tp": d.tp,
        "pp": d.pp,
        "ep": d.ep,
        "dp": d.dp,
        "mode": d.mode,
        "framework": d.framework,
        "parameters_b": round(d.model.parameters / 1e9, 2),
    }
