"""A deployment served by an engine: memory -> KV capacity -> the engine's scheduler simulated -> timings.

``simulate_deployment`` runs one deployment (aggregated, or a disaggregated prefill/decode worker pair)
through ``simulate`` on the step model of its GPU and op times; ``physics_floors`` are the times no answer
goes below (reading the weights and the KV cache a decode step touches at the GPU's DRAM bandwidth; one
request's prefill alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.deployments.compose import kv_bytes_per_token, memory_check
from components.deployments.config import Deployment, DeploymentError
from components.deployments.engines.base import ServingEngine
from components.deployments.memory import EMBED_BYTES, state_bytes_per_request
from components.deployments.simulate import BATCH, CLOSED, RequestStats, Simulations, Workload, simulate
from components.deployments.stepmodel import StepModel
from components.physics.dtypes import STORE_BYTES


@dataclass
class Served:
    """The simulated prefill side (TTFT) and decode side (TPOT) of a deployment: one simulation when
    aggregated, the two workers' when disaggregated."""

    prefill: RequestStats
    decode: RequestStats
    memory: dict[str, float]

    clients: int = 1

    def features(self) -> tuple[np.ndarray, float, np.ndarray]:
        """(TTFT row, TTFT extra us, TPOT row) over the whole ``StepCost.vector``: the step features of
        ``simulate.RequestStats.features`` and the front end's (1, clients) on TTFT."""
        ttft, extra, _ = self.prefill.features()
        tpot = self.decode.features()[2]
        return np.r_[ttft, 1.0, float(self.clients)], extra, np.r_[tpot, 0.0, 0.0]

    def times_us(self, engine: ServingEngine) -> tuple[float, float]:
        """(TTFT, TPOT) in microseconds under the engine's step cost."""
        th = np.asarray(engine.cost.vector(), dtype="float64")
        ttft, extra, tpot = self.features()
        return float(ttft @ th) + extra, float(tpot @ th)


def kv_capacity(d: Deployment, engine: ServingEngine) -> tuple[float, dict[str, float]]:
    """KV tokens the engine's cache holds on each GPU (DoesNotFit when not one request), and the memory;
    a DeploymentError when the engine does not run on the GPU's vendor."""
    vendor = str(getattr(d.gpu, "vendor", "nvidia"))
    if vendor not in engine.vendors:
        raise DeploymentError(
            f"framework {engine.name}: runs on {' / '.join(engine.vendors)} GPUs, "
            f"not on {d.gpu.id} ({vendor})"
        )
    fraction = engine.kv_fraction(float(d.gpu.memory_gb), d.tp, d.pp)
    memory = memory_check(d, fraction, engine.max_num_batched_tokens, engine.kv_rule)
    return memory["kv_tokens_per_gpu"], memory


def simulate_deployment(
    d: Deployment,
    engine: ServingEngine,
    step: StepModel,
    kind: str = CLOSED,
    decode_worker: tuple[Deployment, StepModel] | None = None,
    per_client: tuple[int, int] | None = None,
    memo: Simulations | None = None,
    decode_engine: ServingEngine | None = None,
) -> Served:
    """The deployment's requests through the engine (``kind``: closed loop, batch); with a decode worker,
    ``d`` is the prefill worker (osl 1) and the decode worker receives prefilled requests. ``per_client``:
    (measured, warm-up) requests per client (default aiperf's 20 and 2). An attention-DP worker (``d.dp``
    ranks of ``d.concurrency`` clients each) is simulated whole: its ranks share one queue and step together
    (``StepModel.rank_step_us``), each with its own KV cache. ``memo``: simulations to reuse
    (``simulate``); ``decode_engine``: the decode worker's settings when they differ from ``engine``'s."""
    kw = _requests(per_client, d)
    kv, memory = kv_capacity(d, engine)
    if decode_worker is None:
        stagger = lifetime_us(d, engine, step)
        clients = d.concurrency * d.dp
        stats = simulate(
            step, engine, kv * d.dp, Workload(d.isl, d.osl, clients, kind, stagger_us=stagger, **kw), memo
        )
        return Served(stats, stats, memory, clients)
    dd, dstep = decode_worker
    deng = decode_engine or engine
    dkv, dmem = kv_capacity(dd, deng)
    span = lifetime_us(dd, deng, dstep)
    dec = simulate(
        dstep,
        deng,
        dkv * dd.dp,
        Workload(
            dd.isl,
            dd.osl,
            dd.concurrency * dd.dp,
            kind,
            prefilled=True,
            stagger_us=span,
            **_requests(per_client, dd),
        ),
        memo,
    )
    # the prefill worker's clients come back after their request's time on the decode worker, as the
    # decode worker's simulation at the same step cost has it
    think = decode_worker_us(dec)
    pre = simulate(
        step,
        engine,
        kv * d.dp,
        Workload(
            d.isl,
            1,
            d.concurrency * d.dp,
            kind,
            stagger_us=lifetime_us(d, engine, step, 1) + think,
            think_us=think,
            **kw,
        ),
        memo,
    )
    return Served(pre, dec, dmem, d.concurrency * d.dp)


def decode_worker_us(dec: RequestStats) -> float:
    """Mean time a request spends on a disaggregated decode worker (its arrival there, prefilled, to its
    last token), from that worker's simulation: what a prefill worker's client spends away between its
    first token and its next request."""
    return float(np.mean(dec.finish_us - dec.arrival_us))


def _requests(per_client: tuple[int, int] | None, d: Deployment) -> dict[str, int]:
    """Workload request counts for ``per_client`` (measured, warm-up) per client of the worker's ranks."""
    if per_client is None:
        return {}
    clients = d.concurrency * d.dp
    return {"requests": per_client[0] * clients, "warmup": per_client[1] * clients}


def lifetime_us(d: Deployment, engine: ServingEngine, step: StepModel, osl: int | None = None) -> float:
    """Kernel-time estimate of one request's life at the deployment's concurrency: the span over which a
    steady closed loop's clients are out of phase."""
    out = osl or d.osl
    pad = engine.graph_batch(d.concurrency)
    return one_prefill_us(d, engine, step) + (out - 1) * step.decode_us(d.concurrency, d.isl + out / 2.0, pad)


def decode_weight_bytes_per_gpu(d: Deployment) -> float:
    """Weight bytes one GPU reads at the least in a decode step: every dense layer's weights and the LM
    head (the input embedding table is gathered, a row per token, not read whole), and of the routed experts
    the ``topk / experts`` share of its own expert bytes -- each token picks ``topk`` experts per MoE layer,
    so a step touches ``topk`` of them at the least, and however they are placed (sliced over the GPUs, or
    whole experts on ``ep`` of them) the busiest GPU reads at least that share of what it holds."""
    m = d.model
    counts = m.parameter_counts()
    width = STORE_BYTES[d.weight_dtype]
    touched = min(1.0, m.topk / m.experts) if m.experts else 1.0
    experts = counts["experts"] * width / d.gpus * touched
    dense = sum(v for k, v in counts.items() if k not in ("embeddings", "experts"))
    return (dense * width + m.vocab * m.hidden * EMBED_BYTES) / (d.tp * d.pp) + experts


def kv_tokens_read(d: Deployment, context: float) -> float:
    """Tokens of KV cache per attention layer a decode step reads for one request at ``context``: a
    sliding-window layer reads at most its window."""
    m = d.model
    layers = max(m.attention_layers, 1)
    sliding = min(m.sliding_layers, layers) if m.sliding_window else 0
    capped = min(context, float(m.sliding_window or context))
    return (context * (layers - sliding) + capped * sliding) / layers


def physics_floors(d: Deployment, step: StepModel, decode_batch: float) -> dict[str, float]:
    """Microseconds no answer goes below: ``tpot`` reads the weights a decode step must touch
    (``decode_weight_bytes_per_gpu``) and the KV cache of the decode batch at its mean context (a
    sliding-window layer's window at most) at the GPU's DRAM bandwidth."""
    dram = float(d.gpu.dram_gbps) * 1e9
    ctx = kv_tokens_read(d, d.isl + d.osl / 2.0)
    per_request = ctx * kv_bytes_per_token(d) + state_bytes_per_request(d)  # every GDN state is read once
    touched = decode_weight_bytes_per_gpu(d) + max(decode_batch, 1.0) * per_request
    return {"tpot": touched / dram * 1e6}


def decode_floor_row(
    d: Deployment, engine: ServingEngine, step: StepModel, decode_batch: float
) -> np.ndarray:
    """The decode step an answer's TPOT never goes below, as a row over ``StepCost.vector`` (its time is
    ``row @ cost``): the kernels of the mean decode batch at its mean context (padded to the engine's CUDA
    graph), the step's base, per-sequence, all-reduce and per-layer costs."""
    batch = max(decode_batch, 1.0)
    n = round(batch)
    kernels = step.decode_us(n, d.isl + d.osl / 2.0, engine.graph_batch(n))
    return np.array([kernels, 0.0, 1.0, batch, 0.0, float(step.allreduces), float(step.layers), 0.0, 0.0])


def one_prefill_us(d: Deployment, engine: ServingEngine, step: StepModel) -> float:
    """Kernel time of one request's prefill alone, in chunks of the engine's budget."""
    left, done, total = d.isl, 0, 0.0
    while left > 0:
        take = min(left, engine.max_num_batched_tokens)
        total += step.step_us(0, 0.0, [(float(take), float(done + take))], int(take == left))
        done += take
        left -= take
    return total


__all__ = [
    "BATCH",
    "CLOSED",
    "Served",
    "decode_floor_row",
    "kv_capacity",
    "one_prefill_us",
    "physics_floors",
    "simulate_deployment",
]
