"""The fitted framework cost of the composition (before the engines were simulated): a per-step cost learned
on measured runs on top of the composed kernels (:class:`FrameworkCost`), its steady-serving regressions,
and :func:`answer` -- still what the PipeWeave bench and the silicon bench's ``deployment`` family score,
kept beside the simulation (``answer.answer_deployments``, what production answers with) for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.deployments.compose import (
    BATCH,
    STEADY,
    Answer,
    Phases,
    _breakdown,
    _pipe_notes,
    compose_many,
    compose_phases,
    describe,
    line_tiers,
    memory_check,
    memory_notes,
    overhead_counts,
)
from components.deployments.config import Deployment, DeploymentError
from components.deployments.op_limits import limit_notes, limited, limits_of
from components.deployments.ops import (
    ENGINE_SOURCE,
    ROOFLINE_SOURCE,
    OpTimeFn,
    link_gbps,
    production_op_time,
    roofline_op_time,
)
from components.physics.limits import GpuLimits


@dataclass(frozen=True)
class FrameworkCost:
    """Per-step serving-framework cost on top of the kernels, learned from measured runs.

    step_us = c0 + c1 * layers + c2 * tokens + c3 * kernels_us + launch_us * kernels launched
    + ar_us * all-reduces + ar_gpu_us * all-reduces x GPUs, for the prefill and decode steps separately.
    ``c3`` corrects the op library's average efficiency; the last three are the kernel launch cost and the
    all-reduce start-up latency (a + b * GPUs) of the all-reduces physics answers (a measured collective
    table carries its own latency): parameters of the fit, learned on the training runs only.
    ``train_mape`` (prefill, decode, steady_ttft, steady_tpot) is the fit's own error: the half-width of
    the answer's interval.
    """

    prefill: tuple[float, ...] = (0.0,) * 7
    decode: tuple[float, ...] = (0.0,) * 7
    # Steady serving (requests keep arriving; learned on AIConfigurator's silicon runs), on kernel times:
    # ttft = t0 + t1 * one request's prefill + t2 * the whole batch's prefill (agg) + t3 * decode step
    #        + overheads of one request's prefill step (launches, all-reduces, all-reduce x GPUs)
    # tpot = p0 + p1 * decode step + p2 * stall (agg: one prefill x concurrency / osl stalls every decode)
    #        + overheads of the decode step
    steady_ttft: tuple[float, ...] | None = None
    steady_tpot: tuple[float, ...] | None = None
    steady_source: str = "none"
    source: str = "none"
    train_mape: dict[str, float] = field(default_factory=dict)
    # The op times each part was fitted on ("roofline" or "engine"), per part (prefill, decode, steady_ttft,
    # steady_tpot): a part answers with the op times it was fitted on. Missing: the roofline.
    sources: dict[str, str] = field(default_factory=dict)

    def source_of(self, part: str) -> str:
        return self.sources.get(part, ROOFLINE_SOURCE)

    def step_us(
        self, phase: str, layers: float, tokens: float, kernels_us: float, overheads: np.ndarray
    ) -> float:
        coef = np.asarray(self.prefill if phase == "prefill" else self.decode, dtype="float64")
        return float(coef @ np.r_[1.0, layers, tokens, kernels_us, overheads])


def resolve_ops(
    framework: FrameworkCost | None, op_time: OpTimeFn | None
) -> tuple[FrameworkCost, dict[str, OpTimeFn]]:
    """The framework cost and the op-time function of each source it names. Production (no ``op_time``):
    the state folder's op engine with the framework cost fitted on it, or the roofline and its own fit
    where there is no engine. A given ``op_time`` answers for every source."""
    if op_time is not None:
        return framework or default_framework(), {ROOFLINE_SOURCE: op_time, ENGINE_SOURCE: op_time}
    fn, source = production_op_time()
    roof = limited(roofline_op_time, limits_of(fn) or GpuLimits())  # the same reachable rates
    if source == ENGINE_SOURCE:
        return framework or default_framework(), {ROOFLINE_SOURCE: roof, ENGINE_SOURCE: fn}
    return framework or default_framework(engine=False), {ROOFLINE_SOURCE: roof, ENGINE_SOURCE: roof}


PARTS = ("prefill", "decode", "steady_ttft", "steady_tpot")


def answer_many(
    deployments: list[Deployment],
    op_time: OpTimeFn | None = None,
    framework: FrameworkCost | None = None,
    workload: str = STEADY,
) -> list[Answer | DeploymentError]:
    """:func:`answer` of many deployments, composed in one batch per GPU and op source (a rank); a
    deployment that does not fit answers with its :class:`DoesNotFit`."""
    fw, ops = resolve_ops(framework, op_time)
    fits: list[int] = []
    out: list[Answer | DeploymentError] = []
    for i, d in enumerate(deployments):
        try:
            memory_check(d)
        except DeploymentError as exc:
            out.append(exc)
            continue
        fits.append(i)
        out.append(None)  # type: ignore[arg-type]  # filled below
    sources = {fw.source_of(p) for p in PARTS}
    composed = {s: compose_many([deployments[i] for i in fits], ops[s]) for s in sources}
    for j, i in enumerate(fits):
        phases = {s: composed[s][j] for s in sources}
        out[i] = answer(deployments[i], framework=fw, workload=workload, phases=phases)
    return out


def answer(
    d: Deployment,
    op_time: OpTimeFn | None = None,
    framework: FrameworkCost | None = None,
    workload: str = STEADY,
    isl_mean: float | None = None,
    phases: dict[str, Phases] | None = None,
) -> Answer:
    """TTFT, TPOT, e2e, per-GPU throughput, breakdowns and memory of a deployment (memory checked first).

    ``workload``: "steady" (requests keep arriving: each new prefill stalls the running decodes, TTFT waits
    for its own prefill) or "batch" (all requests start together: TTFT is the whole batch's prefill).
    Each part (prefill, decode, steady TTFT/TPOT) answers with the op times its framework cost was fitted
    on (``FrameworkCost.sources``); ``phases``: those op times per source when already composed
    (:func:`answer_many`).
    """
    memory = memory_check(d)
    fw, ops_used = resolve_ops(framework, op_time)
    if phases is None:
        phases = {s: compose_phases(d, ops_used[s], isl_mean) for s in {fw.source_of(p) for p in PARTS}}
    else:
        fw = framework or default_framework()
    pre, dec = phases[fw.source_of("prefill")], phases[fw.source_of("decode")]
    layers = d.model.layers
    prefill_us = pre.prefill_kernels_us + fw.step_us(
        "prefill", layers, d.concurrency * d.isl, pre.prefill_kernels_us, overhead_counts(pre.prefill)
    )
    step_us = dec.decode_kernels_us + fw.step_us(
        "decode", layers, d.concurrency, dec.decode_kernels_us, overhead_counts(dec.decode)
    )
    # never below the roofline: a negative efficiency correction cannot take a step under its floor
    prefill_us = max(prefill_us, Phases.floor_us(pre.prefill))
    step_us = max(step_us, Phases.floor_us(dec.decode))
    notes = list(d.notes)
    notes += limit_notes(ops_used[fw.source_of("prefill")], d.gpu)  # the reachable rates where they bind
    notes += memory_notes(d, memory)
    notes += _pipe_notes(d)
    if d.tp > 1:
        note = link_gbps(d.gpu)[1]
        if note:
            notes.append(note)
    if workload == BATCH:
        ttft_us, tpot_us = prefill_us, step_us
    else:
        ph_ttft, ph_tpot = phases[fw.source_of("steady_ttft")], phases[fw.source_of("steady_tpot")]
        ttft_us, tpot_us = steady_times(d, ph_ttft, ph_tpot, fw)
        pre, dec = ph_ttft, ph_tpot
        notes.append(f"steady serving cost: {fw.steady_source}")
    e2e_us = ttft_us + tpot_us * max(d.osl - 1, 0)
    tokens_per_s = (
        d.concurrency * d.osl / (e2e_us / 1e6) / d.gpus
        if workload == BATCH
        else d.concurrency / (tpot_us / 1e6) / d.gpus
    )
    spread = fw.train_mape or {}
    keys = ("prefill", "decode") if workload == BATCH else ("steady_ttft", "steady_tpot")
    interval = {
        name: [round(v * (1 - spread.get(k, 0.5)), 3), round(v * (1 + spread.get(k, 0.5)), 3)]
        for name, k, v in (("ttft_ms", keys[0], ttft_us / 1e3), ("tpot_ms", keys[1], tpot_us / 1e3))
    }
    tiers = line_tiers(pre.prefill + dec.decode)
    notes.append(f"framework cost: {fw.source}")
    times = {"ttft": ttft_us, "tpot": tpot_us, "e2e": e2e_us, "prefill": prefill_us, "decode_step": step_us}
    return Answer.from_us(
        times,
        tokens_per_s,
        breakdown={"prefill": _breakdown(pre.prefill), "decode": _breakdown(dec.decode)},
        memory=memory,
        interval=interval,
        notes=notes,
        tiers=tiers,
        deployment=describe(d),
    )


def steady_times(d: Deployment, ph: Phases, ph_tpot: Phases, fw: FrameworkCost) -> tuple[float, float]:
    """(TTFT, TPOT) in microseconds of steady serving from the kernel times and the learned cost (TTFT on
    ``ph``, TPOT on ``ph_tpot``: each with the op times its part was fitted on).

    Without a learned steady cost: TTFT is one request's prefill, TPOT the decode step plus the stalls of
    the other requests' prefills (aggregated mode: ~concurrency arrivals per request lifetime of osl steps).
    """
    agg = d.mode == "agg"
    if fw.steady_ttft is None or fw.steady_tpot is None:
        stall = ph_tpot.prefill_one_us * d.concurrency / max(d.osl, 1) if agg else 0.0
        return ph.prefill_one_us, ph_tpot.decode_kernels_us + stall

    def design(p: Phases) -> tuple[np.ndarray, np.ndarray]:
        return steady_features(
            np.array([p.prefill_one_us]),
            np.array([p.prefill_kernels_us if agg else 0.0]),
            np.array([p.decode_kernels_us]),
            np.array([float(d.concurrency)]),
            np.array([float(d.osl)]),
            np.array([agg]),
            overhead_counts(p.one)[None, :],
            overhead_counts(p.decode)[None, :],
        )

    x_ttft, x_tpot = design(ph)[0], design(ph_tpot)[1]
    floor_ttft, floor_tpot = Phases.floor_us(ph.one), Phases.floor_us(ph_tpot.decode)
    ttft = float(x_ttft[0] @ np.asarray(fw.steady_ttft))
    tpot = float(x_tpot[0] @ np.asarray(fw.steady_tpot))
    return max(ttft, floor_ttft), max(tpot, floor_tpot)


def steady_features(
    one_us: np.ndarray,
    batch_us: np.ndarray,
    step_us: np.ndarray,
    concurrency: np.ndarray,
    osl: np.ndarray,
    agg: np.ndarray,
    one_overheads: np.ndarray,
    step_overheads: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Design matrices of the steady TTFT and TPOT regressions (the terms of :func:`steady_times`);
    ``*_overheads`` are :func:`overhead_counts` rows (n x 3) of one request's prefill and the decode step."""
    ones = np.ones(len(one_us))
    stall = np.where(agg, one_us * concurrency / np.maximum(osl, 1), 0.0)
    return (
        np.c_[ones, one_us, np.where(agg, batch_us, 0.0), step_us, one_overheads],
        np.c_[ones, step_us, stall, step_overheads],
    )


def default_framework(engine: bool = True) -> FrameworkCost:
    """The offline-batch framework cost kept as data (``engines/constants.json``, section ``framework``):
    the one fitted on the op engine's times, or (``engine=False``) on the roofline's alone."""
    from components.deployments.engines.base import framework_constants

    part = framework_constants().get("engine" if engine else "roofline")
    if not part:
        return FrameworkCost()
    tuples = ("prefill", "decode", "steady_ttft", "steady_tpot")
    fields = {k: (tuple(v) if k in tuples and v is not None else v) for k, v in part.items()}
    return FrameworkCost(**fields)
