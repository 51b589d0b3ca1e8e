"""Fused MoE: T tokens, each routed to ``topk`` of E experts, through each expert's gated MLP
(H -> 2I gate+up, activation, I -> H down), with I split over ``tp`` GPUs and the experts over ``ep``.

Variants (``op``): ``mlp`` (default: the whole layer, three projections) or one of its fused GEMMs as vLLM's
``fused_moe`` runs them: ``w13`` (gate and up in one GEMM: H -> 2I outputs) and ``w2`` (down: I -> H).
PipeWeave's sweeps spell T as M and I as N (``N`` = the expert's intermediate size, as vLLM's tuned configs
name it: ``E=128,N=768`` is Qwen3-30B-A3B). Settled (tests/unit/test_physics_registry.py):

- w13 computes 2N columns, so 4*rows*H*N FLOPs, not 2*rows*H*N: on PipeWeave's measured w13 rows the half
  count put the best kernels at 31-48% of the bf16 peak on every GPU, flat at 48.3% on the H20 -- i.e. at
  97% of it with the full count;
- experts touched (weights read) are the expected number of distinct experts under uniform routing,
  E*(1-(1-topk/E)^T) (each token picks topk distinct experts), not min(E, T*topk), which assumes every
  (token, expert) pair hits a new expert (16 tokens x top-2 of 64: 25.5 expected, not 32).
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, PhysicsError, Work, get
from components.physics.dtypes import gemm_bytes

# variant -> number of H x I projections its GEMMs compute
PROJECTIONS: dict[str, float] = {"mlp": 3.0, "w13": 2.0, "w2": 1.0}


def variant(op: str | None) -> str:
    """``w13``/``w2`` for a fused GEMM (PipeWeave's ``weight_type``, e.g. ``w13``), else ``mlp``."""
    name = str(op or "mlp").lower()
    for known in ("w13", "w2"):
        if name.startswith(known):
            return known
    if name in ("mlp", "moe", "fused_moe"):
        return "mlp"
    raise PhysicsError(f"moe op {op!r}: choose mlp, w13 or w2")


def experts_touched(tokens: np.ndarray, experts: np.ndarray, topk: np.ndarray) -> np.ndarray:
    """Expected distinct experts hit by ``tokens`` tokens, each routed to ``topk`` distinct ones uniformly."""
    share = np.clip(topk / experts, 0.0, 1.0)
    return experts * (1.0 - np.power(1.0 - share, tokens))


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    """FLOPs of the routed rows' projections; bytes: the touched experts' weights, the tokens in and out,
    and (whole layer) the I-wide intermediate written and read back once."""
    a, w, o = gemm_bytes(dtype)
    which = variant(op)
    t, e_all, topk, h, inter = d["T"], d["E"], d["topk"], d["H"], d["I"]
    tp, ep = get(d, "tp", 1.0), get(d, "ep", 1.0)
    routed = t * topk / ep  # (token, expert) pairs this GPU computes
    inter_local = inter / tp
    flops = 2.0 * routed * PROJECTIONS[which] * h * inter_local
    weights = experts_touched(t, e_all, topk) / ep * PROJECTIONS[which] * h * inter_local * w
    if which == "w13":  # tokens in, 2I-wide gate/up rows out
        activations = t * h * a + routed * 2.0 * inter_local * o
    elif which == "w2":  # I-wide activated rows in, one H-wide row per (token, expert) out (summed later)
        activations = routed * inter_local * a + routed * h * o
    else:
        activations = t * h * (a + o) + 2.0 * routed * inter_local * a
    return Work(flops, weights + activations, np.zeros_like(flops))


FAMILY = OpFamily(
    name="moe",
    required=("T", "E", "topk", "H", "I"),
    optional=("tp", "ep"),
    work=work,
    dim_aliases={
        "T": ("m", "tokens", "num_tokens"),
        "E": ("e", "experts", "num_experts"),
        "topk": ("top_k",),
        "H": ("h", "hidden", "hidden_size"),
        "I": ("n", "i", "intermediate", "moe_intermediate_size"),
    },
    engine=True,
    tabular=False,
)
