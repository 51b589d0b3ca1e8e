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
from components.deployments.ops import (
    ENGINE_SOURCE,
    ROOFLINE_SOURCE,
    OpTimeFn,
    roofline_op_time,
)

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
            **_power_columns(d),
            "prefill_kernels_us": ph.prefill_kernels_us,
            "decode_kernels_us": ph.decode_kernels_us,
            "prefill_roof_us": sum(x.floor_us for x in ph.prefill),
            "prefill_tensor_us": sum(x.time_us for x in ph.prefill if x.kind in TENSOR_KINDS),
            "prefill_tensor_roof_us": sum(x.floor_us for x in ph.prefill if x.kind in TENSOR_KINDS),
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


# ---------------------------------------------------------------- board power -------------------------
# A GPU whose board power cannot feed its tensor cores at the boost clock runs its compute-bound kernels at
# the clock its power cap allows: the L40 and the RTX 6000 Ada (142 Ada SMs, 300 W) reach in PipeWeave's
# prefills about the tensor rate of the L20 (92 SMs, 275 W), about half and a third of their datasheet
# peaks, while the H20 (78 quarter-rate Hopper SMs at 400 W) runs near its peak. The energy of a tensor
# FLOP is a property of the SM design (compute capability): learned per design as the lowest watts per
# sustained TFLOP/s any training GPU of that design showed, it sets a GPU's tensor rate at
# min(peak, tdp / that energy), and its prefill's tensor ops are answered at that rate's speed of light
# (the framework fit's efficiency term corrects all GPUs alike). A design no training GPU shares keeps
# the op source's own tensor-op times (A100 and the RTX PRO 6000 S in PipeWeave's set).


TENSOR_KINDS = ("gemm", "attention", "moe")  # the ops a prefill runs on the tensor cores


def _power_columns(d: Deployment) -> dict[str, Any]:
    """What the power cap needs of a run: its GPU's SM design, board power and dense tensor peak."""
    peak = getattr(d.gpu.peak_tflops, f"{d.weight_dtype}_tensor", None) or d.gpu.peak_tflops.bf16_tensor
    sm_clocks = d.gpu.sms * d.gpu.boost_clock_mhz * 1e-3  # SM x GHz: bytes per SM-clock -> GB/s
    return {
        "sm_design": str(d.gpu.compute_capability),
        "tdp_w": d.gpu.tdp_w,
        "peak_tflops": peak,
        "dram_gbps": d.gpu.dram_gbps,
        "sm_clocks": sm_clocks,
    }


def tensor_energy(train: pd.DataFrame) -> dict[str, float]:
    """Per SM design: the lowest watts per sustained tensor TFLOP/s among the training runs' GPUs (a run's
    sustained rate: its datasheet peak x its prefill's tensor ops' speed-of-light time / its measured
    prefill, a lower bound of the rate its tensor cores ran at)."""
    rows = train.dropna(subset=["tdp_w", "peak_tflops"])
    sustained = rows["peak_tflops"] * rows["prefill_tensor_roof_us"] / (rows["prefill_ms"] * 1e3)
    watts = rows["tdp_w"] / sustained
    return {str(k): float(v) for k, v in watts.groupby(rows["sm_design"]).min().items()}


def sm_bytes_per_clock(train: pd.DataFrame) -> float:
    """The most DRAM bytes per SM per clock any training GPU streamed in a decode step (its step's
    speed-of-light bytes over its measured step): a lower bound of what one SM can keep in flight. A GPU
    with few SMs for its DRAM (the H20: 78 SMs for 4 TB/s) cannot keep its DRAM busy. One figure for every
    design: the largest seen, so that the bound binds only on a GPU starved of SMs (a design's own maximum
    would understate the SMs of a design whose GPUs all have SMs to spare, as GDDR cards do). 0: none."""
    rows = train.dropna(subset=["dram_gbps", "sm_clocks"])
    achieved = rows["dram_gbps"] * rows["decode_roof_us"] / (rows["decode_ms"] * 1e3) / rows["sm_clocks"]
    return float(achieved.max()) if len(achieved) else 0.0


def sm_fed(frame: pd.DataFrame, bytes_per_clock: float) -> pd.DataFrame:
    """``frame`` with each decode step at least its speed-of-light time at the DRAM rate its SMs can issue
    (``min(dram, SMs x clock x bytes per SM-clock)``)."""
    slowdown = (frame["dram_gbps"] / (bytes_per_clock * frame["sm_clocks"])).fillna(1.0).clip(lower=1.0)
    out = frame.copy()
    out["decode_kernels_us"] = np.maximum(frame["decode_kernels_us"], slowdown * frame["decode_roof_us"])
    out["sm_feed_slowdown"] = slowdown.to_numpy()
    return out


def power_capped(frame: pd.DataFrame, watts_per_tflops: Mapping[str, float]) -> pd.DataFrame:
    """``frame`` with each prefill's tensor ops at their speed-of-light time at the power-capped tensor rate
    (``min(peak, tdp / watts per TFLOP/s)`` of its SM design); a run whose design has no learned energy
    keeps its op source's tensor-op times."""
    energy = frame["sm_design"].map(dict(watts_per_tflops)).astype(float)
    slowdown = (frame["peak_tflops"] * energy / frame["tdp_w"]).fillna(1.0).clip(lower=1.0)
    capped = slowdown * frame["prefill_tensor_roof_us"]
    out = frame.copy()
    tensor = np.where(energy.notna(), capped, frame["prefill_tensor_us"])
    out["prefill_kernels_us"] = frame["prefill_kernels_us"] - frame["prefill_tensor_us"] + tensor
    out["power_slowdown"] = slowdown.to_numpy()
    return out


@dataclass(frozen=True)
class PipeweaveCost(FrameworkCost):
    """The framework cost of a fold and the tensor energy per SM design learned on its training GPUs."""

    watts_per_tflops: dict[str, float] = field(default_factory=dict)
    bytes_per_sm_clock: float = 0.0


def _physics_of(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    """``frame`` under the fold's learned power cap and SM feed rate (as it was, for a plain cost)."""
    watts = getattr(fw, "watts_per_tflops", None)
    feed = getattr(fw, "bytes_per_sm_clock", None)
    if watts and "sm_design" in frame:
        frame = power_capped(frame, watts)
    if feed and "sm_design" in frame:
        frame = sm_fed(frame, feed)
    return frame


def fit_pipeweave(train: pd.DataFrame) -> PipeweaveCost:
    watts = tensor_energy(train) if "sm_design" in train else {}
    feed = sm_bytes_per_clock(train) if "sm_design" in train else 0.0
    train = _physics_of(train, PipeweaveCost(watts_per_tflops=watts, bytes_per_sm_clock=feed))
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
        watts_per_tflops=watts,
        bytes_per_sm_clock=feed,
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
        watts_per_tflops=watts,
        bytes_per_sm_clock=feed,
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
        frames, "gpu", "gpu", fit_pipeweave, predict_pipeweave, targets, osl=True, own=own
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
