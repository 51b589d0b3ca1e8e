"""A deployment answered by simulating its serving engine (what production answers with).

Per deployment: the engine (``engines.registry``: its defaults on that GPU and its fitted constants), the
memory and KV capacity at the engine's memory fraction (refused when not one request fits), the step model
on the op times of that GPU's best tier (the state folder's op engine: measured where measured), the
engine's scheduler simulated over the workload (steady: aiperf's closed loop of ``concurrency`` clients;
batch: every request at once), TTFT / TPOT / e2e read off the timeline. Physics bounds every answer:
TPOT >= reading the weights and the decode batch's KV cache at the DRAM bandwidth and >= the decode step;
TTFT >= one request's prefill alone; the interval (the engine's leave-one-GPU-out error) contains both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from components.deployments.compose import (
    BATCH,
    Answer,
    _breakdown,
    _pipe_notes,
    compose_many,
    describe,
    line_tiers,
)
from components.deployments.config import Deployment, DeploymentError
from components.deployments.engines.base import ServingEngine
from components.deployments.engines.registry import DEFAULT_ENGINE, engine_for
from components.deployments.op_limits import limit_notes
from components.deployments.ops import OpTimeFn, link_gbps, production_op_time
from components.deployments.serve import (
    Served,
    decode_floor_row,
    kv_capacity,
    one_prefill_us,
    physics_floors,
    simulate_deployment,
)
from components.deployments.simulate import BATCH as SIM_BATCH
from components.deployments.simulate import CLOSED
from components.deployments.stepmodel import StepModel, build_step_models


def _interval(value: float, spread: float, floor: float) -> list[float]:
    lo, hi = max(value * (1 - spread), floor), value * (1 + spread)
    return [round(min(lo, value), 4), round(max(hi, value), 4)]


def _answer_one(
    d: Deployment,
    engine: ServingEngine,
    step: StepModel,
    served: Served,
    lines: Any,
    workload: str,
    limits: list[str] = (),  # type: ignore[assignment]
) -> Answer:
    cost = engine.cost
    ttft_us, tpot_us = served.times_us(engine)
    batch = max(served.decode.decode_batch, 1.0)
    decode_us = float(decode_floor_row(d, engine, step, batch) @ np.asarray(cost.vector()))
    prefill_alone = one_prefill_us(d, engine, step)
    floors = physics_floors(d, step, batch)
    tpot_us = max(tpot_us, decode_us, floors["tpot"])
    ttft_us = max(ttft_us, prefill_alone)
    e2e_us = ttft_us + tpot_us * max(d.osl - 1, 0)
    if workload == BATCH:
        tokens_per_s = d.concurrency * d.dp * d.osl / (e2e_us / 1e6) / d.gpus
    else:
        tokens_per_s = d.concurrency * d.dp / (tpot_us / 1e6) / d.gpus
    notes = list(d.notes) + _pipe_notes(d) + list(limits)
    if d.tp > 1:
        note = link_gbps(d.gpu)[1]
        if note:
            notes.append(note)
    held = served.memory["kv_tokens_per_gpu"] / (d.isl + d.osl)
    if held < d.concurrency:
        notes.append(
            f"KV cache: room for {held:.0f} of {d.concurrency} requests at {d.isl + d.osl} tokens: the "
            "others wait for a finished one (the simulated TTFT includes the wait)"
        )
    notes += served.prefill.notes
    notes.append(f"engine {engine.name}: {engine.policy} scheduling, {engine.provenance}")
    if lines is None:  # a rank's option: no per-op breakdown asked (the times above do not use it)
        breakdown: dict[str, Any] = {}
        tiers: dict[str, str] = {}
    else:
        one, dec = lines
        tiers = line_tiers(one.one + dec.decode)
        breakdown = {"prefill": _breakdown(one.one), "decode": _breakdown(dec.decode)}
    times = dict(ttft=ttft_us, tpot=tpot_us, e2e=e2e_us, prefill=prefill_alone, decode_step=decode_us)
    return Answer.from_us(
        times,
        tokens_per_s,
        breakdown=breakdown,
        memory=served.memory,
        interval={
            "ttft_ms": _interval(ttft_us / 1e3, engine.errors[0], prefill_alone / 1e3),
            "tpot_ms": _interval(tpot_us / 1e3, engine.errors[1], max(floors["tpot"], decode_us) / 1e3),
        },
        notes=notes,
        tiers=tiers,
        deployment={**describe(d), "engine": engine.settings()},
    )


def _phases_once(deployments: Sequence[Deployment], fn: OpTimeFn) -> list[Any]:
    """``compose_many`` once per deployment as the op engine sees it: the serving engine does not change a
    phase's kernels, so a rank over three engines times each GPU x TP option once."""
    per_framework = getattr(fn, "for_framework", None)  # each engine's own kernels (stepmodel)
    own = getattr(fn, "own_kernels", lambda spec: True)
    index: dict[Deployment, int] = {}
    firsts: list[Deployment] = []
    where = []
    for d in deployments:
        key = d if per_framework and own(d.gpu) else replace(d, framework=DEFAULT_ENGINE)
        if key not in index:
            index[key] = len(firsts)
            firsts.append(d)
        where.append(index[key])
    if per_framework is None:
        phases = compose_many(firsts, fn)
    else:
        phases = [None] * len(firsts)
        names = [d.framework if own(d.gpu) else "" for d in firsts]  # "": the pooled timing, shared
        for name in sorted(set(names)):
            members = [i for i, n in enumerate(names) if n == name]
            fn_of = per_framework(name) if name else fn
            for i, ph in zip(members, compose_many([firsts[i] for i in members], fn_of), strict=True):
                phases[i] = ph
    return [phases[i] for i in where]


def answer_deployments(
    deployments: Sequence[Deployment],
    op_time: OpTimeFn | None = None,
    workload: str = "steady",
    constants: Path | None = None,
    per_client: tuple[int, int] | None = None,
    detail: bool = True,
) -> list[Answer | DeploymentError]:
    """One answer per deployment (a :class:`DeploymentError` -- e.g. ``DoesNotFit`` -- where there is
    none); the op times of every deployment on a GPU come from one batch per kind of op. ``constants``:
    the engines' constants file a model carries (``engines.registry.engine_for``); ``per_client``:
    (measured, warm-up) requests per client of a steady workload (default aiperf's 20 and 2); ``detail``
    False: no per-op breakdown or op tiers (a rank's rows show neither; composing them was a third of a
    warm whole-catalog rank)."""
    fn = op_time if op_time is not None else production_op_time()[0]
    engines = [engine_for(d.framework, d.gpu, constants=constants) for d in deployments]
    out: list[Answer | DeploymentError | None] = []
    for d, engine in zip(deployments, engines, strict=True):  # memory first: only what fits is composed
        try:
            kv_capacity(d, engine)
            out.append(None)
        except DeploymentError as exc:
            out.append(exc)
    fits = [i for i, a in enumerate(out) if a is None]
    chosen = [deployments[i] for i in fits]
    steps = build_step_models(chosen, fn)  # one grid per step key: engines share their GPU's
    phases = _phases_once(chosen, fn) if detail else [None] * len(chosen)
    kind = SIM_BATCH if workload == BATCH else CLOSED
    for i, step, ph in zip(fits, steps, phases, strict=True):
        d, engine = deployments[i], engines[i]
        try:
            served = simulate_deployment(d, engine, step, kind, per_client=per_client)
        except DeploymentError as exc:
            out[i] = exc
            continue
        except ValueError as exc:  # one request's prompt does not fit the KV cache
            out[i] = DeploymentError(f"{d.model.name} on {d.gpu.id}: {exc}")
            continue
        lines = None if ph is None else (ph, ph)
        out[i] = _answer_one(d, engine, step, served, lines, workload, limit_notes(fn, d.gpu))
    return [a for a in out if a is not None]
