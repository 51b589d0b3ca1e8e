"""The simulated engines on AIConfigurator's measured serving runs: per-engine constants fitted
leave-one-GPU-out (H100 and H200 each held out of a fit on the other), TTFT / TPOT MAPE per engine and GPU.

Each run is simulated ONCE per candidate KV memory fraction: its TTFT and TPOT are linear in the engine's
step cost (``simulate`` module docstring), so the step cost of a fold is a linear program on the training
runs (least absolute relative error, ``bench.relative_l1``); the memory fraction (what the engine leaves for
its KV cache: not derivable from the GPU alone) is chosen among a few candidates by the training runs'
error. Nothing is chosen on a held-out GPU.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.metrics import mape
from components.deployments.config import Deployment, DeploymentError
from components.deployments.engines.aic_benchmark import PARTS, as_benchmarked, as_disaggregated
from components.deployments.engines.base import StepCost
from components.deployments.engines.registry import engine_for, engine_name
from components.deployments.ops import OpTimeFn
from components.deployments.serve import (
    Served,
    decode_floor_row,
    one_prefill_us,
    physics_floors,
    simulate_deployment,
)
from components.deployments.simulate import Simulations
from components.deployments.stepmodel import build_step_models

# Candidate memory fractions below the engine's documented default: none. A fraction fitted below it on one
# GPU's runs emptied the KV cache of runs that measurably ran on the other (Qwen3-235B FP8 on two H200s).
FRACTION_OFFSETS = (0.0,)
# Bounds of the step cost: the op engine's kernels within a factor (0.5-3) of the engine's; costs >= 0.
COST_BOUNDS = [(0.5, 3.0), (0.5, 3.0), *[(0.0, None)] * 7]
N_COST = len(COST_BOUNDS)
# The step cost the fitting simulations run at (only the jitter of arrivals against step boundaries
# depends on it): a typical engine's, not fitted on any run.
SIM_COST = StepCost(base_us=2000.0, allreduce_us=10.0)
# Requests per client the bench simulates (measured, warm-up): fewer than aiperf's 20 and 2 -- the closed
# loop's steady state repeats, so 6 per client average it within noise at a quarter of the time.
BENCH_PER_CLIENT = (6, 1)
# The engine settings an aggregated run is simulated under, a candidate each, chosen per engine on each
# fold's training GPU like the memory fraction: the engine's own defaults, or those AIConfigurator's
# benchmark deployed its runs with (``engines.aic_benchmark``: batch limit C, token budget C + ISL + 1500,
# CUDA graphs at 1..C). Disaggregated runs: the defaults under both.
DEFAULTS, BENCHMARKED = "defaults", "aiconfigurator"
SETTINGS = (DEFAULTS, BENCHMARKED)
BENCHMARKED_PARTS = PARTS
# What a run's recorded engine version says under either candidate: SGLang's mixed chunk, which
# AIConfigurator's templates pass from SGLang 0.5.6 on (``aic_benchmark.MIXED_CHUNK_FROM``) -- read off the
# template per version, not a choice
RECORDED_PARTS = ("mixed",)


def candidates() -> list[tuple[float, str]]:
    """(memory-fraction offset, settings) pairs each run is simulated under."""
    return [(off, setting) for off in FRACTION_OFFSETS for setting in SETTINGS]


@dataclass
class Simulated:
    """Per run: id, engine, GPU, measured TTFT/TPOT (us), and per candidate (memory-fraction offset,
    settings) the TTFT and TPOT feature rows (n x 8 each); runs without an answer with their reason.
    ``floors`` per candidate: the physics every answer keeps (as ``answer._answer_one``): (decode-step rows
    n x 8, TPOT floor us, TTFT floor us); none given, none applied."""

    runs: pd.DataFrame
    ttft_x: dict[tuple[float, str], np.ndarray] = field(default_factory=dict)
    ttft_extra: dict[tuple[float, str], np.ndarray] = field(default_factory=dict)
    tpot_x: dict[tuple[float, str], np.ndarray] = field(default_factory=dict)
    refused: list[dict[str, Any]] = field(default_factory=list)
    floors: dict[tuple[float, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def predict(
        self, key: tuple[float, str], mask: np.ndarray, coef: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT, TPOT) us of the runs in ``mask`` under candidate ``key`` and step cost ``coef``, never
        below the physics floors: TPOT >= the decode step and reading the weights and KV cache at DRAM
        bandwidth, TTFT >= one request's prefill alone."""
        ttft = self.ttft_x[key][mask] @ coef + self.ttft_extra[key][mask]
        tpot = self.tpot_x[key][mask] @ coef
        if key in self.floors:
            step_x, tpot_floor, ttft_floor = self.floors[key]
            tpot = np.maximum.reduce([tpot, step_x[mask] @ coef, tpot_floor[mask]])
            ttft = np.maximum(ttft, ttft_floor[mask])
        return ttft, tpot


def _pairs(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    to_pair: Callable[..., tuple[Deployment, Deployment]],
) -> tuple[list[dict[str, Any]], list[tuple[Deployment, Deployment]], list[dict[str, Any]]]:
    kept, pairs, refused = [], [], []
    for row in runs.to_dict("records"):
        try:
            pairs.append(to_pair(row, catalog, datasets_dir))
            kept.append(row)
        except (DeploymentError, LookupError) as exc:
            refused.append({"id": row["id"], "backend": row["backend"], "reason": _reason(exc)})
    return kept, pairs, refused


def _reason(exc: Exception) -> str:
    text = str(exc)
    return text.split(";")[0] if ":" in text else text


def simulate_runs(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None,
    to_pair: Callable[..., tuple[Deployment, Deployment]],
    log: Callable[[str], None] = lambda _: None,
) -> Simulated:
    """Every run simulated under each candidate (memory fraction, settings) of its engine (default step
    cost); a disaggregated run once, its features shared by the settings candidates."""
    kept, pairs, refused = _pairs(runs, catalog, datasets_dir, to_pair)
    flat = [d for pair in pairs for d in pair]
    steps = build_step_models(flat, op_time)
    out_rows: list[dict[str, Any]] = []
    keys = candidates()
    memo: Simulations = {}  # runs that repeat a deployment, workload and engine settings: simulated once
    ttft_x: dict[tuple[float, str], list] = {k: [] for k in keys}
    tpot_x: dict[tuple[float, str], list] = {k: [] for k in keys}
    extra: dict[tuple[float, str], list] = {k: [] for k in keys}
    floors: dict[tuple[float, str], list] = {k: [] for k in keys}
    for i, row in enumerate(kept):
        pre, dec = pairs[i]
        name = engine_name(row["backend"])
        base = engine_for(name, pre.gpu, fitted=False).with_cost(SIM_COST)
        rows: dict[tuple[float, str], tuple[np.ndarray, float, np.ndarray]] = {}
        bounds: dict[tuple[float, str], tuple[np.ndarray, float, float]] = {}
        try:
            for off, setting in keys:
                if setting != DEFAULTS and row["mode"] != "agg":
                    rows[off, setting], bounds[off, setting] = rows[off, DEFAULTS], bounds[off, DEFAULTS]
                    continue
                eng = base.with_settings(memory_fraction=base.memory_fraction + off)
                deng = eng
                if row["mode"] == "agg":
                    parts = BENCHMARKED_PARTS if setting == BENCHMARKED else RECORDED_PARTS
                    eng = as_benchmarked(eng, pre.isl, pre.concurrency, parts, row.get("backend_version"))
                else:
                    # a disaggregated run's decode worker as AIConfigurator's rules deploy it (its batch, a
                    # CUDA graph at every size up to it); the prefill worker's rule (one prompt of ISL + 1500
                    # tokens per rank and step) is not applied: on the training side (inner
                    # leave-one-model-out per GPU) it raised TTFT 46.5% -> 48.2% (H200), 41.8% -> 42.1% (H100)
                    deng = as_disaggregated(eng, pre.isl, dec.concurrency)[1]
                worker = None if row["mode"] != "disagg" else (dec, steps[2 * i + 1])
                served: Served = simulate_deployment(
                    pre,
                    eng,
                    steps[2 * i],
                    decode_worker=worker,
                    per_client=BENCH_PER_CLIENT,
                    memo=memo,
                    decode_engine=deng,
                )
                rows[off, setting] = served.features()
                dd, dstep = worker or (pre, steps[2 * i])
                batch = served.decode.decode_batch
                bounds[off, setting] = (
                    decode_floor_row(dd, deng, dstep, batch),
                    physics_floors(dd, dstep, batch)["tpot"],
                    one_prefill_us(pre, eng, steps[2 * i]),
                )
        except (DeploymentError, ValueError) as exc:
            refused.append({"id": row["id"], "backend": row["backend"], "reason": _reason(exc)})
            continue
        for key, (a, e, b) in rows.items():
            ttft_x[key].append(a)
            extra[key].append(e)
            tpot_x[key].append(b)
            floors[key].append(bounds[key])
        out_rows.append(
            {
                "id": row["id"],
                "engine": name,
                "device_id": row["device_id"],
                "model_path": row["model_path"],
                "mode": row["mode"],
                "ttft_us": float(row["silicon_ttft_ms"]) * 1e3,
                "tpot_us": float(row["silicon_tpot_ms"]) * 1e3,
            }
        )
    log(f"simulated {len(out_rows)} runs, {len(refused)} without an answer")
    return Simulated(
        pd.DataFrame(out_rows),
        {k: np.asarray(v).reshape(-1, N_COST) for k, v in ttft_x.items()},
        {k: np.asarray(v, dtype="float64") for k, v in extra.items()},
        {k: np.asarray(v).reshape(-1, N_COST) for k, v in tpot_x.items()},
        refused,
        {
            k: (
                np.asarray([f[0] for f in v]).reshape(-1, N_COST),
                np.asarray([f[1] for f in v], dtype="float64"),
                np.asarray([f[2] for f in v], dtype="float64"),
            )
            for k, v in floors.items()
        },
    )


def fit_cost(
    ttft_x: np.ndarray, tpot_x: np.ndarray, ttft: np.ndarray, tpot: np.ndarray, ttft_scale: np.ndarray
) -> np.ndarray:
    """The step cost minimising the summed absolute relative errors of TTFT and TPOT (``ttft``: the
    measured TTFT less the part outside the features, ``ttft_scale`` the measured TTFT)."""
    from components.deployments.bench_common import relative_l1

    x = np.vstack([ttft_x, tpot_x])
    return relative_l1(x, np.r_[ttft, tpot], np.r_[ttft_scale, tpot], COST_BOUNDS)


def fit_engine(sim: Simulated, mask: np.ndarray) -> tuple[tuple[float, str], np.ndarray, dict[str, float]]:
    """((memory-fraction offset, settings) chosen, step-cost vector, train MAPE) of the runs in ``mask``:
    the candidate whose fitted cost errs least on them (TTFT + TPOT MAPE)."""
    y1, y2 = sim.runs["ttft_us"].to_numpy()[mask], sim.runs["tpot_us"].to_numpy()[mask]
    best = None
    for off in sim.ttft_x:
        x1, x2, e1 = sim.ttft_x[off][mask], sim.tpot_x[off][mask], sim.ttft_extra[off][mask]
        coef = fit_cost(x1, x2, y1 - e1, y2, y1)
        err = {"ttft": mape(y1, x1 @ coef + e1), "tpot": mape(y2, x2 @ coef)}
        score = err["ttft"] + err["tpot"]
        if best is None or score < best[0]:
            best = (score, off, coef, err)
    assert best is not None
    return best[1], best[2], best[3]


FRONT = slice(
    N_COST - 2, N_COST
)  # StepCost's request_us, per_client_us: the server front end's, on TTFT only


def fit_front(sim: Simulated, key: tuple[float, str], coef: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``coef`` with its front-end terms refitted on the runs in ``mask`` (one engine's): their TTFT less
    what the steps under ``coef`` explain, least absolute relative error, each term >= 0."""
    from components.deployments.bench_common import relative_l1

    x1, e1 = sim.ttft_x[key][mask], sim.ttft_extra[key][mask]
    y1 = sim.runs["ttft_us"].to_numpy()[mask]
    steps = x1[:, : FRONT.start] @ coef[: FRONT.start] + e1
    out = np.array(coef, dtype="float64")
    out[FRONT] = relative_l1(x1[:, FRONT], y1 - steps, y1, COST_BOUNDS[FRONT])
    return out


def fit_engines(sim: Simulated, mask: np.ndarray) -> dict[str, tuple[tuple[float, str], np.ndarray, dict]]:
    """Per engine with runs in ``mask``: (candidate, step cost, train MAPE). The step cost's kernel scales
    and per-step terms are fitted on EVERY engine's runs in ``mask`` (shared: each engine's own kernels are
    already in the op times; per engine, the few models a GPU's runs hold overfit them), the front end's
    TTFT terms on the engine's own runs (its HTTP server, tokenizer and event loop); an engine without runs
    in ``mask`` takes the shared fit's front end (train MAPE empty). Chosen on the training
    side: an inner leave-one-model-out on each training GPU erred TTFT 47.8% / TPOT 28.5% with this, 54.5% /
    33.6% with every term per engine, 51.5% / 28.5% with every term shared (docs/engines.md)."""
    key, shared, _ = fit_engine(sim, mask)
    engines = sim.runs["engine"].to_numpy()
    y1, y2 = sim.runs["ttft_us"].to_numpy(), sim.runs["tpot_us"].to_numpy()
    out: dict[str, tuple[tuple[float, str], np.ndarray, dict]] = {}
    for name in sorted(set(engines)):
        mine = mask & (engines == name)
        if not mine.any():
            out[name] = (key, shared, {})
            continue
        coef = fit_front(sim, key, shared, mine)
        ttft, tpot = sim.predict(key, mine, coef)
        out[name] = (key, coef, {"ttft": mape(y1[mine], ttft), "tpot": mape(y2[mine], tpot)})
    return out


def leave_one_gpu_out(sim: Simulated) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Held-out predictions of every run: each GPU's runs predicted by the fit on the other GPUs' measured
    runs (``fit_engines``; a run without a measurement -- a system asked about, not measured -- is answered,
    never fitted on)."""
    frame = sim.runs.copy()
    frame["ttft_pred_us"] = np.nan
    frame["tpot_pred_us"] = np.nan
    fits: dict[str, Any] = {}
    measured = np.isfinite(frame["ttft_us"].to_numpy(float)) & np.isfinite(frame["tpot_us"].to_numpy(float))
    for device in sorted(frame["device_id"].unique()):
        train = (frame["device_id"] != device).to_numpy() & measured
        if not train.any():
            continue
        for name, (off, coef, err) in fit_engines(sim, train).items():
            test = ((frame["engine"] == name) & (frame["device_id"] == device)).to_numpy()
            if not test.any():
                continue
            frame.loc[test, "ttft_pred_us"], frame.loc[test, "tpot_pred_us"] = sim.predict(off, test, coef)
            fits[f"{name} ({device} held out)"] = {
                "fraction_offset": off[0],
                "settings": off[1],
                "cost": coef.tolist(),
                "train": err,
            }
    return frame, fits


def scores(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """MAPE of TTFT and TPOT overall, per engine, per GPU and per engine x GPU."""
    done = frame.dropna(subset=["ttft_pred_us", "ttft_us", "tpot_us"])  # measured runs only
    out = []
    for scope, groups in (
        ("all", [("", done)]),
        ("engine", list(done.groupby("engine"))),
        ("gpu", list(done.groupby("device_id"))),
        ("engine x gpu", list(done.groupby(["engine", "device_id"]))),
    ):
        for key, g in groups:
            out.append(
                {
                    "scope": scope,
                    "key": key if isinstance(key, str) else "/".join(map(str, key)),
                    "n": len(g),
                    "ttft_mape": mape(g["ttft_us"].to_numpy(), g["ttft_pred_us"].to_numpy()),
                    "tpot_mape": mape(g["tpot_us"].to_numpy(), g["tpot_pred_us"].to_numpy()),
                }
            )
    return out


def production_constants(sim: Simulated, commit: str | None = None) -> dict[str, Any]:
    """Per engine: the step cost and memory fraction fitted on every run of both GPUs, with provenance
    (what they were fitted on, the leave-one-GPU-out errors of the same procedure, date, commit)."""
    frame, _ = leave_one_gpu_out(sim)
    out: dict[str, Any] = {}
    every = np.ones(len(sim.runs), dtype=bool)
    for name, (off, coef, err) in fit_engines(sim, every).items():
        mask = (sim.runs["engine"] == name).to_numpy()
        held = frame[mask]
        out[name] = {
            "cost": dict(zip(StepCost.__dataclass_fields__, (round(float(c), 6) for c in coef), strict=True)),
            "memory_fraction_offset": off[0],
            "provenance": {
                "fitted_on": (
                    f"AIConfigurator silicon runs, {name}, "
                    f"{', '.join(sorted(sim.runs.loc[mask, 'device_id'].unique()))} ({int(mask.sum())} runs; "
                    f"kernel scales and per-step costs shared with the other engines, {len(sim.runs)} runs)"
                ),
                "runs_simulated_with": f"{off[1]} engine settings (aggregated runs)",
                "train_mape": {k: round(v, 4) for k, v in err.items()},
                "leave_one_gpu_out_mape": {
                    "ttft": round(mape(held["ttft_us"].to_numpy(), held["ttft_pred_us"].to_numpy()), 4),
                    "tpot": round(mape(held["tpot_us"].to_numpy(), held["tpot_pred_us"].to_numpy()), 4),
                },
                "date": _dt.date.today().isoformat(),
                "commit": commit or _commit(),
            },
        }
    return out


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_constants(path: Path, engines: Mapping[str, Any], framework: Mapping[str, Any]) -> None:
    """The constants data file (engines + offline-batch framework cost), written atomically."""
    from components.common.atomic import atomic_write_text

    body = {"engines": dict(engines), "framework": dict(framework)}
    atomic_write_text(Path(path), json.dumps(body, indent=1, sort_keys=True) + "\n")


FAMILY_SIM = "deployment"  # the gate's family: the simulated engines, constants fitted leave-one-GPU-out
PUBLISHED_AIC_TTFT = "AIConfigurator's own estimator errs 30-50% on TTFT on such runs (issue 35)"


def silicon_answers(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """(answered runs with ``engine``, ``ttft_pred_ms``, ``tpot_pred_ms``; refused runs: id, backend,
    reason; the simulated frame; each fold's fit) of the silicon runs: every run's engine simulated, each
    GPU's runs answered by constants fitted on the other GPUs' measured runs."""
    from components.deployments.bench_silicon import silicon_deployments
    from components.deployments.disagg_workers import with_derived_workers

    runs = with_derived_workers(runs, catalog, datasets_dir, op_time)
    sim = simulate_runs(runs, catalog, datasets_dir, op_time, silicon_deployments, log)
    frame, fits = leave_one_gpu_out(sim)
    held = frame.dropna(subset=["ttft_pred_us", "tpot_pred_us"]).set_index("id")  # engines on both GPUs
    answered = runs[runs["id"].isin(held.index)].copy()
    answered["engine"] = answered["backend"].map(engine_name)
    for target in ("ttft", "tpot"):
        answered[f"{target}_pred_ms"] = held.loc[answered["id"], f"{target}_pred_us"].to_numpy() / 1e3
    refused = pd.DataFrame(sim.refused, columns=["id", "backend", "reason"])
    unfitted = runs[~runs["id"].isin(held.index) & ~runs["id"].isin(refused["id"])]
    if len(unfitted):  # simulated, but no measured run of its engine on another GPU to fit constants on
        extra = unfitted[["id", "backend"]].assign(reason="no measured run of its engine on another GPU")
        refused = pd.concat([refused, extra], ignore_index=True)
    return answered, refused, frame, fits


def silicon_predictions(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[pd.DataFrame, list[str]]:
    """The simulated engines' held-out answers to the silicon runs (each GPU's from constants fitted on the
    other GPU's runs, physics floors kept): the answered runs with ``engine``, ``ttft_pred_ms`` and
    ``tpot_pred_ms``; and notes (the share answered and why not, the candidates each fold chose)."""
    from components.deployments.bench_common import SPLIT_SILICON
    from components.deployments.disagg_workers import derived_note

    answered, refused, frame, fits = silicon_answers(runs, catalog, datasets_dir, op_time, log)
    reasons = refused["reason"].value_counts() if len(refused) else pd.Series(dtype=int)
    note = (
        f"{SPLIT_SILICON} {FAMILY_SIM}: {len(answered)} of {len(runs)} runs answered by simulating their "
        "engine as `predict --llm` does (constants per engine fitted on the other GPU's runs; "
        + "; ".join(
            f"{k}: offset {v['fraction_offset']:+g}, {v['settings']} settings" for k, v in fits.items()
        )
        + f"); {PUBLISHED_AIC_TTFT}; not answered: "
        + "; ".join(f"{n} x {r}" for r, n in reasons.items())
    )
    stated = derived_note(answered)
    for s in scores(frame):
        if s["scope"] in ("all", "engine x gpu"):
            log(
                f"{SPLIT_SILICON} {FAMILY_SIM} {s['key'] or 'all':24s} TTFT {s['ttft_mape']:.1%} "
                f"TPOT {s['tpot_mape']:.1%} n={s['n']}"
            )
    return answered.reset_index(drop=True), [note] + (
        [f"{SPLIT_SILICON} {FAMILY_SIM}: {stated}"] if stated else []
    )


def main() -> None:  # python -m components.deployments.bench_engines: the simulated engines' scores alone
    import os
    from collections import Counter

    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import op_sources
    from components.deployments.bench_silicon import silicon_deployments
    from components.deployments.data import read_silicon_runs
    from components.deployments.disagg_workers import with_derived_workers
    from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE
    from components.devices import load_catalog
    from components.platform.config import DEFAULT_DATASETS_DIR

    datasets = Path(os.environ.get("KERNELCAST_DATASETS_DIR", DEFAULT_DATASETS_DIR))
    runs = read_silicon_runs(datasets)
    sources = op_sources(bench_engine(), False)
    fn = sources.get(ENGINE_SOURCE, sources[ROOFLINE_SOURCE])
    runs = with_derived_workers(runs, load_catalog(), datasets, fn)
    sim = simulate_runs(runs, load_catalog(), datasets, fn, silicon_deployments, print)
    frame, fits = leave_one_gpu_out(sim)
    print(f"answered {len(frame)} of {len(runs)} runs ({len(frame) / len(runs):.1%})")
    for s in scores(frame):
        where = f"{s['scope']:13s} {s['key'] or 'all':22s} n={s['n']:5d}"
        print(f"{where} TTFT {s['ttft_mape']:.1%} TPOT {s['tpot_mape']:.1%}")
    for name, fit in fits.items():
        print(name, fit)
    for reason, n in Counter(r["reason"] for r in sim.refused).most_common():
        print(f"not answered: {n} x {reason}")


if __name__ == "__main__":
    main()
