"""Op questions answered by the one op engine, and the one physics pass every op answer takes.

Every op question goes to the op engine; the engine picks the tier per row (``components.opmodel.routing``):
tensor-dtype GEMMs (``gemm``, ``linear``, ``bmm``: one product, one answer), ``attention``, ``moe`` and
``allreduce`` from its data tiers (measured > calibrated > transfer > spec: ``answer_with_engine``); FP32/FP64
GEMMs, elementwise, softmax, norms and convolutions from its measured tier where the GPU's own kernels are
near (``answer_measured``), else from the learned tier (the tabular champion's prediction,
``components.serving.op_answers``). Which engine: the one saved in the champion's predictor folder
(``opmodel/``), else the state folder's (``$KERNELCAST_HOME/models/opmodel``), else one built from the state
folder's measured store (``$KERNELCAST_HOME/data/opmodel/store``), else a bare engine (roofline at a fixed
efficiency, said so).

The physics pass (``physics_pass``): whatever answered, the runtime is at least the roofline time; GFLOP/s,
GB/s and intensity are derived from that one runtime (never above a peak); the roofline class is the side of
the bound pipe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.opmodel.loading import engine_for  # noqa: F401  (the engine a predictor answers with)

GEMM_NAMES: tuple[str, ...] = ("gemm", "linear", "bmm")


def engine_shape(family: str, shape: dict[str, int]) -> tuple[str, dict[str, float]]:
    """The engine's family and shape of a question: linear and bmm are GEMMs; a batch of one is no batch."""
    if family in GEMM_NAMES:
        out = {k: float(v) for k, v in shape.items() if k in ("B", "M", "N", "K")}
        if out.get("B", 1.0) == 1.0:
            out.pop("B", None)
        return "gemm", out
    return family, {k: float(v) for k, v in shape.items()}


def answer_with_engine(engine: Any, questions: list[Any]) -> list[dict[str, Any]]:
    """Per question (same order): duration_us, lo/hi, tier, support, bound_pipe, roofline_us, rates, note."""

    def times_of(family: str, dtype: str, arrays: dict, spec: Any, kv: str | None) -> Any:
        return engine.predict(family, dtype, arrays, spec, kv_dtype=kv)

    return _answers(times_of, questions)


def answer_measured(engine: Any, questions: list[Any]) -> list[dict[str, Any] | None]:
    """Per question of a learned-tier family (same order): the engine's measured-tier answer where the GPU's
    own kernels are near the shape (``routing.measured_answers``), else None (the learned tier answers)."""
    from components.opmodel.routing import measured_answers

    def times_of(family: str, dtype: str, arrays: dict, spec: Any, kv: str | None) -> Any:
        return measured_answers(engine, family, dtype, arrays, spec)

    return [a if a.get("duration_us") is not None else None for a in _answers(times_of, questions)]


def _answers(times_of: Any, questions: list[Any]) -> list[dict[str, Any]]:
    """``times_of(family, dtype, shape arrays, spec, kv_dtype)`` -> ``OpTimes`` (or None: no answer) asked
    once per (family, dtype, kv dtype, GPU, dimensions) group; one answer dict per question ({} or
    ``{"note": ...}`` where none)."""
    from components.physics import roofline as physics

    groups: dict[tuple, list[int]] = {}
    shapes = []
    for row, q in enumerate(questions):
        family, shape = engine_shape(q.family, q.shape or {})
        shapes.append(shape)
        kv = getattr(q, "kv_dtype", None)
        groups.setdefault((family, q.dtype, kv, q.device.id, tuple(sorted(shape))), []).append(row)
    out: list[dict[str, Any]] = [{} for _ in questions]
    for (family, dtype, kv, _, keys), rows in groups.items():
        spec = questions[rows[0]].device
        arrays = {k: np.array([shapes[r][k] for r in rows], dtype="float64") for k in keys}
        try:
            times = times_of(family, dtype, arrays, spec, kv)
        except physics.PhysicsError as exc:
            for r in rows:
                out[r] = {"note": str(exc)}
            continue
        if times is None:
            continue
        rates = physics.derive(times.duration_us, times.roof)
        for i, r in enumerate(rows):
            if not np.isfinite(times.duration_us[i]):
                continue
            out[r] = {
                "duration_us": float(times.duration_us[i]),
                "duration_us_lo": float(times.lo[i]),
                "duration_us_hi": float(times.hi[i]),
                "tier": str(times.tier[i]),
                "support": str(times.support[i]),
                "bound_pipe": str(times.bound_pipe[i]),
                "roofline_us": float(times.roof.time_us[i]),
                "headroom": float(times.duration_us[i] / times.roof.time_us[i]),
                "gflops": float(rates["gflops"][i]),
                "achieved_gbps": float(rates["achieved_gbps"][i]),
                "arith_intensity": _finite(rates["arith_intensity"][i]),
                "roofline_class": str(rates["roofline_class"][i]),
                "note": times.note[i],
                "ood": times.unseen is not None and times.unseen[i] is not None,
                "unseen": None if times.unseen is None else times.unseen[i],
                "l1_hit_rate": None,
                "l2_hit_rate": None,
            }
    return out


def _finite(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def gemm_physics_pass(answers: list[dict[str, Any]], questions: list[Any]) -> None:
    """Learned-tier GEMMs (fp32/fp64): clamp at ``physics.roofline``, rates derived from the runtime."""
    from components.physics import roofline as physics

    for answer, q in zip(answers, questions, strict=True):
        if q.family not in GEMM_NAMES or answer.get("duration_us") is None:
            continue
        family, shape = engine_shape(q.family, q.shape or {})
        try:
            roof = physics.roofline(family, q.dtype, shape, q.device)
        except physics.PhysicsError:
            continue
        _apply(
            answer,
            roof.time_us[0],
            physics.derive(np.array([answer["duration_us"]]), roof),
            0,
            str(roof.bound_pipe[0]),
        )


def physics_pass(answers: list[dict[str, Any]], cols: dict[str, Any], rows: np.ndarray) -> None:
    """Champion answers of the analytical families: runtime >= the analytical roofline, rates derived from it,
    the class the analytical bound's (the bound pipe then agrees with it). ``rows``: each answer's row in
    cols."""
    roof = np.asarray(cols["f_roofline_time_us"], dtype="float64")[rows]
    flops = np.asarray(cols["f_flops"], dtype="float64")[rows]
    nbytes = np.asarray(cols["f_dram_bytes_min"], dtype="float64")[rows]
    compute = np.asarray(
        cols.get("f_compute_time_us", np.full(len(cols["f_roofline_time_us"]), np.nan)), dtype="float64"
    )[rows]
    dram = np.asarray(
        cols.get("f_dram_time_us", np.full(len(cols["f_roofline_time_us"]), np.nan)), dtype="float64"
    )[rows]
    for i, answer in enumerate(answers):
        duration = answer.get("duration_us")
        if duration is None or not np.isfinite(roof[i]):
            continue
        duration = max(float(duration), float(roof[i]))
        answer["duration_us"] = duration
        if answer.get("duration_us_hi") is not None:
            answer["duration_us_hi"] = max(float(answer["duration_us_hi"]), duration)
        if answer.get("duration_us_lo") is not None:
            answer["duration_us_lo"] = min(max(float(answer["duration_us_lo"]), float(roof[i])), duration)
        seconds = duration * 1e-6
        answer["gflops"] = float(flops[i] / seconds / 1e9) if np.isfinite(flops[i]) else None
        answer["achieved_gbps"] = float(nbytes[i] / seconds / 1e9) if np.isfinite(nbytes[i]) else None
        answer["arith_intensity"] = (
            float(flops[i] / nbytes[i]) if np.isfinite(flops[i]) and nbytes[i] > 0 else None
        )
        answer["headroom"] = duration / float(roof[i])
        if np.isfinite(compute[i]) and np.isfinite(dram[i]):
            answer["roofline_class"] = "compute" if compute[i] >= dram[i] else "bandwidth"


def _apply(answer: dict[str, Any], roof_us: float, rates: dict[str, np.ndarray], i: int, pipe: str) -> None:
    duration = float(rates["duration_us"][i])
    answer["duration_us"] = duration
    if answer.get("duration_us_hi") is not None:
        answer["duration_us_hi"] = max(float(answer["duration_us_hi"]), duration)
    if answer.get("duration_us_lo") is not None:
        answer["duration_us_lo"] = min(max(float(answer["duration_us_lo"]), roof_us), duration)
    answer["gflops"] = float(rates["gflops"][i])
    answer["achieved_gbps"] = float(rates["achieved_gbps"][i])
    answer["arith_intensity"] = _finite(rates["arith_intensity"][i])
    answer["roofline_class"] = str(rates["roofline_class"][i])
    answer["roofline_us"] = float(roof_us)
    answer["headroom"] = duration / float(roof_us)
    answer["bound_pipe"] = pipe
