"""The ``llm-serving-pipeweave`` bench: PipeWeave's offline batches (11 GPUs, TP 1-8), each GPU held out of
a framework-cost fit on the others; prefill, decode step and total beside the published methods."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.metrics import mape
from components.deployments.bench_common import (
    FAMILY,
    FAMILY_ROOFLINE,
    PW_TARGETS,
    SPLIT_PIPEWEAVE,
    BenchInputs,
    ServingBench,
    _apply,
    _named,
    _overheads,
    _published_mape,
    _reason,
    _row,
    _tier_shares,
    _variant_rows,
    fit_step_cost,
    leave_one_out,
    scope_groups,
    source_frames,
    summary,
    with_allreduce,
)
from components.deployments.compose import compose_many, overhead_counts
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.data import (
    AllReduceTable,
    read_allreduce_tables,
    read_pipeweave_runs,
    read_published,
)
from components.deployments.framework_cost import FrameworkCost
from components.deployments.op_limits import line_times
from components.deployments.ops import (
    ENGINE_SOURCE,
    ROOFLINE_SOURCE,
    OpTimeFn,
    roofline_op_time,
)
from components.physics.limits import GpuLimits, sm_bytes_per_clock, sm_clocks, tensor_energy

# ---------------------------------------------------------------- PipeWeave ----------------------------


def compose_pipeweave(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None = None,
    allreduce: Mapping[str, AllReduceTable] | None = None,
    refused: list[dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """Per run: kernel and roofline times of one prefill (the whole batch) and one decode step (all runs of
    a GPU timed in one batch per kind of op).

    With ``refused`` (a list), a run without an answer is appended there with its reason and skipped;
    without, its error propagates."""
    tables = read_allreduce_tables(datasets_dir) if allreduce is None else allreduce
    fn = with_allreduce(op_time or roofline_op_time, tables)
    kept, deployments = [], []
    for run in runs.itertuples():
        try:
            model = model_shape(run.model, datasets_dir)
            spec = catalog.resolve(run.device_id)
            d = Deployment(
                model=model, gpu=spec, isl=round(run.isl), osl=int(run.osl), concurrency=run.batch, tp=run.tp
            )
        except (DeploymentError, LookupError) as exc:
            if refused is None:
                raise
            refused.append(
                {
                    "id": f"{run.gpu}/tp{run.tp}/{run.model}-{run.workload}",
                    "device_id": run.device_id,
                    "reason": _reason(exc),
                }
            )
            continue
        kept.append(run)
        deployments.append(d)
    phases = compose_many(deployments, fn, [float(run.isl) for run in kept])
    out = [
        {
            **run._asdict(),
            "layers": d.model.layers,
            "prefill_tokens": run.batch * run.isl,
            **_spec_columns(d),
            **_line_columns("prefill", ph.prefill),
            **_line_columns("decode", ph.decode),
            "prefill_kernels_us": ph.prefill_kernels_us,
            "decode_kernels_us": ph.decode_kernels_us,
            "prefill_roof_us": sum(x.floor_us for x in ph.prefill),
            "decode_roof_us": sum(x.floor_us for x in ph.decode),
            **_named("prefill", overhead_counts(ph.prefill)),
            **_named("decode", overhead_counts(ph.decode)),
            **_tier_shares(ph.prefill + ph.decode),
        }
        for run, d, ph in zip(kept, deployments, phases, strict=True)
    ]
    frame = pd.DataFrame(out)
    return frame.drop(columns=["Index"], errors="ignore")


def own_kernels(frame: pd.DataFrame, catalog: Any, engine_fn: Any) -> dict[str, bool]:
    """Per GPU of ``frame``: whether the op engine answers it from its own measured kernels (``engine_fn``:
    ``ops.engine_op_time``; without one, or for a GPU it has no kernels of, False: relatives or physics)."""
    judge = getattr(engine_fn, "own_kernels", None)
    pairs = frame[["gpu", "device_id"]].drop_duplicates("gpu")
    return {str(g): judge is not None and bool(judge(catalog.resolve(d))) for g, d in pairs.to_numpy()}


# ---------------------------------------------------------------- reachable rates ---------------------
# The GPU's power-capped tensor rate and SM-fed DRAM rate (``physics.limits``) bound the op times as in
# every deployment answer (``op_limits.line_times``, what ``compose.time_ops`` applies); each fold learns them
# on its training GPUs only and re-bounds the composed op lines with them.


def _spec_columns(d: Deployment) -> dict[str, Any]:
    """What the limits read of a run's GPU: its SM design, board power, bf16 tensor peak, SMs x clock."""
    return {
        "spec": d.gpu,
        "sm_design": str(d.gpu.compute_capability),
        "tdp_w": d.gpu.tdp_w,
        "peak_tflops": d.gpu.peak_tflops.bf16_tensor,
        "dram_gbps": d.gpu.dram_gbps,
        "sm_clocks": sm_clocks(d.gpu),
    }


def _line_columns(phase: str, lines: list[Any]) -> dict[str, Any]:
    """A phase's op lines (their bounding parts) and the speed-of-light parts the limits are learned from."""
    parts = [x.parts for x in lines if x.parts is not None]
    return {
        f"{phase}_lines": parts,
        f"{phase}_tensor_sol_us": sum(float(np.mean(p[1])) for p in parts),
        f"{phase}_memory_sol_us": sum(float(np.mean(p[2])) for p in parts),
    }


def fit_limits(train: pd.DataFrame) -> GpuLimits:
    """The reachable rates learned on ``train``'s measured steps: watts per sustained tensor TFLOP/s per SM
    design from the prefills, DRAM bytes per SM-clock from the decode steps for the designs they cover
    (``physics.limits``)."""
    rows = train.dropna(subset=["tdp_w", "peak_tflops"])
    watts = tensor_energy(
        rows["sm_design"].to_numpy(),
        rows["tdp_w"].to_numpy(float),
        rows["peak_tflops"].to_numpy(float),
        rows["prefill_tensor_sol_us"].to_numpy(float),
        rows["prefill_ms"].to_numpy(float) * 1e3,
    )
    fed = train.dropna(subset=["dram_gbps", "sm_clocks"])
    feed = sm_bytes_per_clock(
        fed["sm_design"].to_numpy(),
        fed["dram_gbps"].to_numpy(float),
        fed["sm_clocks"].to_numpy(float),
        fed["decode_memory_sol_us"].to_numpy(float),
        fed["decode_ms"].to_numpy(float) * 1e3,
    )
    return GpuLimits(watts, feed, f"PipeWeave runs on {', '.join(sorted(train['gpu'].unique()))}")


def bounded(frame: pd.DataFrame, limits: GpuLimits) -> pd.DataFrame:
    """``frame`` with each step's kernel time re-summed from its op lines bounded by ``limits``, and the
    slowdowns they set on each run's GPU (``power_slowdown``, ``sm_feed_slowdown``)."""
    if "prefill_lines" not in frame:
        return frame
    out = frame.copy()
    for phase in ("prefill", "decode"):
        out[f"{phase}_kernels_us"] = [
            sum(float(np.mean(line_times(p, spec, limits))) for p in lines)
            for lines, spec in zip(frame[f"{phase}_lines"], frame["spec"], strict=True)
        ]
    out["power_slowdown"] = [limits.tensor_slowdown(spec) for spec in frame["spec"]]
    out["sm_feed_slowdown"] = [limits.dram_slowdown(spec) for spec in frame["spec"]]
    return out


@dataclass(frozen=True)
class PipeweaveCost(FrameworkCost):
    """The framework cost of a fold and the reachable rates learned on its training GPUs."""

    limits: GpuLimits = field(default_factory=GpuLimits)


def _physics_of(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    """``frame`` under the fold's learned reachable rates (as it was, for a plain cost)."""
    limits = getattr(fw, "limits", None)
    return bounded(frame, limits) if limits else frame


def fit_pipeweave(train: pd.DataFrame) -> PipeweaveCost:
    limits = fit_limits(train) if "sm_design" in train else GpuLimits()
    train = _physics_of(train, PipeweaveCost(limits=limits))
    pre = fit_step_cost(
        train["prefill_ms"].to_numpy() * 1e3,
        train["prefill_kernels_us"].to_numpy(),
        train["layers"].to_numpy(float),
        train["prefill_tokens"].to_numpy(float),
        _overheads(train, "prefill"),
    )
    dec = fit_step_cost(
        train["decode_ms"].to_numpy() * 1e3,
        train["decode_kernels_us"].to_numpy(),
        train["layers"].to_numpy(float),
        train["batch"].to_numpy(float),
        _overheads(train, "decode"),
    )
    fw = PipeweaveCost(
        prefill=pre,
        decode=dec,
        source=f"PipeWeave runs on {', '.join(sorted(train['gpu'].unique()))}",
        limits=limits,
    )
    pred = predict_pipeweave(train, fw)
    train_mape = {
        "prefill": mape(train["prefill_ms"].to_numpy(), pred["prefill_pred_ms"].to_numpy()),
        "decode": mape(train["decode_ms"].to_numpy(), pred["decode_pred_ms"].to_numpy()),
    }
    return PipeweaveCost(
        prefill=pre,
        decode=dec,
        source=fw.source,
        train_mape=train_mape,
        limits=limits,
    )


def predict_pipeweave(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    frame = _physics_of(frame, fw)
    layers = frame["layers"].to_numpy(float)
    out = frame.copy()
    for phase, count in (("prefill", "prefill_tokens"), ("decode", "batch")):  # tokens or sequences per step
        step_us = _apply(
            getattr(fw, phase),
            layers,
            frame[count].to_numpy(float),
            frame[f"{phase}_kernels_us"].to_numpy(),
            _overheads(frame, phase),
        )
        # never below the roofline: a negative efficiency correction cannot take a step under its floor
        out[f"{phase}_pred_ms"] = np.maximum(step_us / 1e3, frame[f"{phase}_roof_us"] / 1e3)
        out[f"{phase}_roof_ms"] = frame[f"{phase}_roof_us"] / 1e3
    out["total_pred_ms"] = out["prefill_pred_ms"] + out["osl"] * out["decode_pred_ms"]
    out["total_roof_ms"] = out["prefill_roof_ms"] + out["osl"] * out["decode_roof_ms"]
    return out


def run_pipeweave_bench(datasets_dir: Path, catalog: Any, **inputs: Any) -> ServingBench:
    """Leave one GPU out: per fold, choose the op source (roofline or engine) by an inner leave-one-GPU-out
    on the training GPUs, fit the framework cost on the training GPUs with those op times, score the
    held-out GPU's runs. Also scored per fold: each source on its own, and the engine blind to the held-out
    GPU's kernels (spec tier) with the framework cost fitted on the engine's training-side times."""
    given = BenchInputs(**inputs)
    log, engine = given.log, given.engine
    runs = read_pipeweave_runs(datasets_dir) if given.runs is None else given.runs
    runs = runs.assign(
        run_id=[f"{r.gpu}/tp{r.tp}/{r.model}/{r.workload}/{i}" for i, r in enumerate(runs.itertuples())]
    )
    sources = given.sources()

    def compose(asked: pd.DataFrame, fn: OpTimeFn) -> pd.DataFrame:
        return compose_pipeweave(asked, catalog, datasets_dir, fn)

    composed = {k: compose(runs, fn) for k, fn in sources.items()}
    frames = source_frames(composed, "run_id", runs, compose, engine, datasets_dir, log)
    targets = {"prefill": "prefill_ms", "decode": "decode_ms"}
    own = own_kernels(frames[ROOFLINE_SOURCE], catalog, sources.get(ENGINE_SOURCE))
    folds, chosen = leave_one_out(
        frames, "gpu", "gpu", fit_pipeweave, predict_pipeweave, targets, osl=True, own=own, blend=True
    )
    preds = {family: pd.concat(parts, ignore_index=True) for family, parts in folds.items()}
    pred = preds[FAMILY]
    bench = ServingBench(predictions=pred, variants=preds)
    published = read_published(datasets_dir)
    for scope_col in ("", "gpu", "tp"):
        for scope, _, g in scope_groups(pred, scope_col):
            for target in PW_TARGETS:
                ours = mape(g[f"{target}_ms"].to_numpy(), g[f"{target}_pred_ms"].to_numpy())
                roof = mape(g[f"{target}_ms"].to_numpy(), g[f"{target}_roof_ms"].to_numpy())
                pub = _published_mape(published, "pipeweave", scope, target)
                bench.rows.append(
                    _row(
                        SPLIT_PIPEWEAVE,
                        FAMILY,
                        f"{target}_ms",
                        scope,
                        ours,
                        len(g),
                        len(g),
                        pub,
                        "PipeWeave (published)" if pub is not None else None,
                    )
                )
                bench.rows.append(
                    _row(SPLIT_PIPEWEAVE, FAMILY_ROOFLINE, f"{target}_ms", scope, roof, len(g), len(g))
                )
                for method in ("neusight", "habitat", "roofline"):
                    other = _published_mape(published, method, scope, target)
                    if other is not None:
                        bench.rows.append(
                            _row(SPLIT_PIPEWEAVE, f"published:{method}", f"{target}_ms", scope, other, 0, 0)
                        )
    bench.rows += _variant_rows(SPLIT_PIPEWEAVE, preds, PW_TARGETS, ("", "gpu"), lambda col, k, g: len(g))
    worse = {
        family: [
            g
            for g, sub in p.groupby("gpu")
            if mape(sub["total_ms"].to_numpy(), sub["total_pred_ms"].to_numpy())
            > mape(sub["total_ms"].to_numpy(), sub["total_roof_ms"].to_numpy())
        ]
        for family, p in preds.items()
    }
    picks = Counter(chosen.values())
    bench.notes.append(
        f"{SPLIT_PIPEWEAVE}: {len(pred)} runs on {pred['gpu'].nunique()} GPUs, leave-one-GPU-out (op source "
        "per phase chosen by inner leave-one-GPU-out and framework cost refitted per fold on the other GPUs "
        f"only: {'; '.join(f'{k} in {n} folds' for k, n in sorted(picks.items()))}); total worse "
        f"than the roofline composition on: {', '.join(worse[FAMILY]) or 'none'}"
        + "".join(f"; {family}: {', '.join(w) or 'none'}" for family, w in worse.items() if family != FAMILY)
    )
    for line in summary(bench, SPLIT_PIPEWEAVE):
        log(line)
    return bench
