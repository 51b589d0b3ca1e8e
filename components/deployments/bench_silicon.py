"""The ``llm-serving-silicon`` bench: AIConfigurator's steady-serving runs on H100 and H200, each held out
of a fit on the other; TTFT and TPOT per model, precision, mode and engine (the simulated engines:
``bench_engines``); every run answered or its reason counted."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.metrics import mape
from components.deployments.bench_common import (
    FAMILY,
    FAMILY_ROOFLINE,
    SI_TARGETS,
    SPLIT_SILICON,
    BenchInputs,
    ServingBench,
    _named,
    _overheads,
    _reason,
    _row,
    _tier_shares,
    _unseen_to_zero,
    _variant_rows,
    leave_one_out,
    relative_l1,
    scope_groups,
    source_frames,
    summary,
)
from components.deployments.compose import compose_many, memory_check, overhead_counts
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.data import (
    read_silicon_runs,
)
from components.deployments.disagg_workers import id_concurrency, with_derived_workers
from components.deployments.framework_cost import FrameworkCost, steady_features
from components.deployments.ops import (
    ENGINE_SOURCE,
    ROOFLINE_SOURCE,
    OpTimeFn,
    roofline_op_time,
)

# ---------------------------------------------------------------- AIConfigurator silicon ---------------

SILICON_DTYPES = {"fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "int4_wo": "int4_wo"}


def _num(value: Any, default: int = 1) -> int:
    return default if value is None or (isinstance(value, float) and not np.isfinite(value)) else int(value)


def silicon_deployments(
    row: Mapping[str, Any], catalog: Any, datasets_dir: Path
) -> tuple[Deployment, Deployment]:
    """(prefill worker, decode worker) deployments of one silicon run; DeploymentError says why none."""
    model = model_shape(str(row["model_path"]), datasets_dir)
    spec = catalog.resolve(str(row["device_id"]))
    quant = row.get("gemm_quant_mode")
    dtype = SILICON_DTYPES.get(str(quant), "bf16") if isinstance(quant, str) else "bf16"
    kv = "fp8" if str(row.get("precision")) in ("fp8", "fp4") else "bf16"
    common = {
        "model": model,
        "gpu": spec,
        "isl": int(row["isl"]),
        "osl": int(row["osl"]),
        "weight_dtype": dtype,
        "kv_dtype": kv,
        "mode": str(row["mode"]),
        "framework": str(row["backend"]),  # the engine whose kernels time its steps (engine_name)
    }

    def worker(prefix: str, concurrency: Any, clients: int | None = None) -> Deployment:
        """``concurrency`` per DP rank, or ``clients`` over the whole worker (split over its DP ranks)."""
        dp = _num(row.get(f"{prefix}attention_dp_size"))
        pp = _num(row.get(f"{prefix}pp_size"))
        ep = _num(row.get(f"{prefix}moe_ep_size")) if model.is_moe else 1
        tp = _num(row.get(f"{prefix}tp_size"))
        moe_tp = _num(row.get(f"{prefix}moe_tp_size"))
        moe_world = moe_tp * ep if model.is_moe else tp * dp
        if model.is_moe and moe_tp == 0 and ep == 0:
            # neither recorded (0): the engine's default, the experts sharded over every GPU of the worker
            # (vLLM without --enable-expert-parallel flattens its MoE TP across the attention DP ranks)
            moe_world, ep = tp * dp, 1
        if dp == 1 and moe_world > tp and moe_world % tp == 0:
            dp = moe_world // tp  # e.g. tp 1 with moe_tp 2: the attention runs data-parallel over the 2 GPUs
        if moe_world != tp * dp:
            raise DeploymentError(
                f"moe_tp_size x moe_ep_size {moe_world}: not the tp_size x attention_dp_size {tp * dp} GPUs"
            )
        # the recorded DP ranks share the clients (a DP read off the MoE group above is not in the record)
        ranks = _num(row.get(f"{prefix}attention_dp_size"))
        per_rank = _num(concurrency) if clients is None else max(round(clients / ranks), 1)
        return Deployment(**common, concurrency=per_rank, tp=tp, pp=pp, ep=max(ep, 1), dp=dp)

    if row["mode"] == "disagg":
        pre_c, dec_c = disagg_concurrency(row)
        return worker("prefill_", pre_c), worker("decode_", dec_c)
    # aiperf's concurrency as the run's id records it (``_c<C>_``): the clients of the whole worker, which
    # its attention-DP ranks share. ``batch_size`` equals C / DP on 1,573 of the 1,585 aggregated runs that
    # name C; on the other 12 it is C / 64 (DeepSeek-R1 with attention DP 8, 2026-04-06 rows) or C / TP
    # (gpt-oss-120b on H100): read as the clients, those runs were simulated with 1/4 to 1/8 of them
    agg = worker("", row.get("batch_size"), id_concurrency(row))
    return agg, agg


def _finite(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if np.isfinite(out) else None


def disagg_concurrency(row: Mapping[str, Any]) -> tuple[int, int]:
    """(prefill, decode) clients per worker and attention-DP rank of a disaggregated run.

    aiperf's ``--concurrency C`` is the whole system's: every client's request is prefilled on a prefill
    worker, then decoded on a decode worker. Where the run records it, ``decode_batch_size`` is per decode
    worker and DP rank (C = decode_batch_size x decode_attention_dp_size x decode_num_workers on every run
    that has all four); C itself is the ``_c<C>_`` of the run id.

    Runs that record no worker count (248 DeepSeek-R1 runs of 2026-03/04) get them derived before this
    (``disagg_workers.with_derived_workers``: AIConfigurator's rate matching); read as one prefill and one
    decode worker they are not what was measured (on H100 at C = 9, ISL 8192, TTFT 4.6 s where one prefill
    worker takes under 0.3 s). A run whose counts were neither recorded nor derived is refused here."""
    found = id_concurrency(row)
    dec_dp = _finite(row.get("decode_attention_dp_size")) or 1.0
    pre_dp = _finite(row.get("prefill_attention_dp_size")) or 1.0
    dec_workers = _finite(row.get("decode_num_workers"))
    pre_workers = _finite(row.get("prefill_num_workers"))
    if dec_workers is None or pre_workers is None:
        raise DeploymentError(
            "prefill_num_workers / decode_num_workers: not recorded for a disaggregated run (the total "
            "concurrency does not say how many workers shared it)"
        )
    batch = _finite(row.get("decode_batch_size"))
    if found is not None:
        total = float(found)
    elif batch is not None:
        total = batch * dec_dp * dec_workers
    else:
        raise DeploymentError(
            "concurrency: a disaggregated run with neither decode_batch_size nor _c<C>_ in its id"
        )
    dec = batch if batch is not None else total / (dec_dp * dec_workers)
    pre = total / (pre_dp * pre_workers)
    return max(round(pre), 1), max(round(dec), 1)


def compose_silicon(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Kernel times per answerable run, and (id, reason) of the runs without an answer. Each distinct
    (prefill worker, decode worker) pair is composed once; all of a GPU's in one batch per kind of op."""
    fn = op_time or roofline_op_time
    runs = with_derived_workers(runs, catalog, datasets_dir, fn)
    keys: dict[tuple, int] = {}
    pairs: list[tuple[Deployment, Deployment]] = []
    kept: list[tuple[dict[str, Any], int]] = []
    refused = []
    for row in runs.to_dict("records"):
        try:
            pre, dec = silicon_deployments(row, catalog, datasets_dir)
            memory_check(dec)
        except (DeploymentError, LookupError) as exc:
            refused.append(
                {
                    "id": row["id"],
                    "model_path": row["model_path"],
                    "device_id": row["device_id"],
                    "reason": _reason(exc),
                }
            )
            continue
        key = (
            pre.model.name,
            pre.gpu.id,
            pre.isl,
            pre.osl,
            pre.weight_dtype,
            pre.kv_dtype,
            pre.tp,
            pre.ep,
            pre.concurrency,
            dec.concurrency,
            dec.tp,
            dec.ep,
        )
        if key not in keys:
            keys[key] = len(pairs)
            pairs.append((pre, dec))
        kept.append((row, keys[key]))
    phases = compose_many([d for pair in pairs for d in pair], fn)
    answered = []
    for row, k in kept:
        pre, dec = pairs[k]
        ph_p, ph_d = phases[2 * k], phases[2 * k + 1]
        answered.append(
            {
                **row,
                "layers": pre.model.layers,
                "c": dec.concurrency,
                "prefill_c": pre.concurrency,
                "one_prefill_us": ph_p.prefill_one_us,
                "batch_prefill_us": ph_p.prefill_kernels_us,
                "decode_step_us": ph_d.decode_kernels_us,
                "one_prefill_roof_us": ph_p.floor_us(ph_p.one),
                "decode_roof_us": ph_d.floor_us(ph_d.decode),
                **_named("one", overhead_counts(ph_p.one)),
                **_named("step", overhead_counts(ph_d.decode)),
                **_tier_shares(ph_p.one + ph_d.decode),
            }
        )
    log(f"silicon: {len(answered)} runs composed, {len(refused)} without an answer")
    return pd.DataFrame(answered), pd.DataFrame(refused)


def _steady_design(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return steady_features(
        frame["one_prefill_us"].to_numpy(),
        frame["batch_prefill_us"].to_numpy(),
        frame["decode_step_us"].to_numpy(),
        frame["c"].to_numpy(float),
        frame["osl"].to_numpy(float),
        (frame["mode"] == "agg").to_numpy(),
        _overheads(frame, "one"),
        _overheads(frame, "step"),
    )


def _relative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least absolute relative error (``relative_l1``) with every coefficient >= 0 (each term is a cost:
    none makes serving faster)."""
    return _unseen_to_zero(relative_l1(x, y, y, [(0.0, None)] * x.shape[1]), x)


def fit_steady(train: pd.DataFrame, base: FrameworkCost | None = None) -> FrameworkCost:
    """The steady-serving TTFT/TPOT regressions fitted on ``train``'s silicon runs (least absolute
    relative error). Runs whose worker counts were derived (``workers_derived``) are answered with the
    constants but do not fit them: a constant is learned from what was recorded, not from our guess of it."""
    recorded = ~train["workers_derived"].fillna(False).astype(bool) if "workers_derived" in train else None
    if recorded is not None and recorded.any():
        train = train[recorded]
    x_ttft, x_tpot = _steady_design(train)
    ttft, tpot = train["silicon_ttft_ms"].to_numpy() * 1e3, train["silicon_tpot_ms"].to_numpy() * 1e3
    c_ttft, c_tpot = _relative_lstsq(x_ttft, ttft), _relative_lstsq(x_tpot, tpot)
    base = base or FrameworkCost()
    train_mape = {
        **base.train_mape,
        "steady_ttft": mape(ttft, x_ttft @ c_ttft),
        "steady_tpot": mape(tpot, x_tpot @ c_tpot),
    }
    source = (
        f"AIConfigurator silicon runs on {', '.join(sorted(train['device_id'].unique()))} ({len(train)} runs)"
    )
    return FrameworkCost(
        prefill=base.prefill,
        decode=base.decode,
        steady_ttft=tuple(float(c) for c in c_ttft),
        steady_tpot=tuple(float(c) for c in c_tpot),
        steady_source=source,
        source=base.source,
        train_mape=train_mape,
    )


def predict_steady(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    x_ttft, x_tpot = _steady_design(frame)
    out = frame.copy()
    floor_ttft, floor_tpot = frame["one_prefill_roof_us"].to_numpy(), frame["decode_roof_us"].to_numpy()
    out["ttft_pred_ms"] = np.maximum(x_ttft @ np.asarray(fw.steady_ttft), floor_ttft) / 1e3
    out["tpot_pred_ms"] = np.maximum(x_tpot @ np.asarray(fw.steady_tpot), floor_tpot) / 1e3
    out["ttft_roof_ms"], out["tpot_roof_ms"] = floor_ttft / 1e3, floor_tpot / 1e3
    return out


SI_SCOPES = ("", "device_id", "model_path", "precision", "mode", "backend", "backend_device")
FAMILY_STEADY = "deployment:steady-composition"  # the composition + fitted steady regressions


def _scoped(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the scope columns: precision (bf16 where none), engine x GPU."""
    return frame.assign(
        precision=frame["precision"].fillna("bf16"),
        backend_device=frame["backend"].astype(str) + "/" + frame["device_id"].astype(str),
    )


def run_silicon_bench(datasets_dir: Path, catalog: Any, **inputs: Any) -> ServingBench:
    """H100 and H200 each held out of a fit on the other; TTFT/TPOT MAPE per GPU, model, precision, mode,
    engine and engine x GPU. The gate's family (``deployment``) is what ``predict --llm`` answers: each
    run's serving engine simulated (``bench_engines.silicon_predictions``: step cost and settings fitted on
    the training GPU's runs, physics floors kept). The composition with the fitted steady regressions
    (``compose_silicon`` + ``fit_steady``; its op source chosen per fold by an inner leave-one-model-out on
    the training GPU's runs) is scored beside it (``deployment:steady-composition``) with its roofline."""
    from components.deployments.bench_engines import silicon_predictions

    given = BenchInputs(**inputs)
    op_time, log, engine = given.op_time, given.log, given.engine
    runs = read_silicon_runs(datasets_dir) if given.runs is None else given.runs
    sources = given.sources()
    composed_by, refused_by = {}, {}
    for k, fn in sources.items():
        composed_by[k], refused_by[k] = compose_silicon(runs, catalog, datasets_dir, fn, log=log)

    def recompose(asked: pd.DataFrame, fn: OpTimeFn) -> pd.DataFrame:
        return compose_silicon(asked, catalog, datasets_dir, fn)[0]

    frames = source_frames(composed_by, "id", runs, recompose, engine, datasets_dir, log)
    refused = refused_by[ROOFLINE_SOURCE]
    targets = {t: f"silicon_{t}_ms" for t in SI_TARGETS}
    folds, chosen = leave_one_out(
        frames, "device_id", "model_path", fit_steady, predict_steady, targets, osl=False, label=str.upper
    )
    preds = {}
    for family, parts in folds.items():
        preds[FAMILY_STEADY if family == FAMILY else family] = _scoped(pd.concat(parts, ignore_index=True))
    fn = op_time if op_time is not None else sources.get(ENGINE_SOURCE, sources[ROOFLINE_SOURCE])
    simulated, sim_notes = silicon_predictions(runs, catalog, datasets_dir, fn, log)
    pred = _scoped(simulated)
    asked = _scoped(runs)
    bench = ServingBench(predictions=pred, variants=preds)

    def n_asked(col: str, key: Any, g: pd.DataFrame) -> int:
        return len(asked) if not col else int((asked[col] == key).sum())

    for family, frame, column in (
        (FAMILY, pred, "{}_pred_ms"),
        (FAMILY_ROOFLINE, preds[FAMILY_STEADY], "{}_roof_ms"),
    ):
        for scope_col in SI_SCOPES:
            for scope, key, g in scope_groups(frame, scope_col):
                for target in SI_TARGETS:
                    value = mape(g[f"silicon_{target}_ms"].to_numpy(), g[column.format(target)].to_numpy())
                    n = n_asked(scope_col, key, g)
                    bench.rows.append(_row(SPLIT_SILICON, family, f"{target}_ms", scope, value, len(g), n))
    scopes = ("", "device_id", "mode", "backend")
    bench.rows += _variant_rows(SPLIT_SILICON, preds, SI_TARGETS, scopes, n_asked)
    bench.notes += sim_notes
    reasons = refused["reason"].value_counts() if not refused.empty else pd.Series(dtype=int)
    steady = preds[FAMILY_STEADY]
    bench.notes.append(
        f"{SPLIT_SILICON} {FAMILY_STEADY}: {len(steady)} of {len(runs)} runs answered (each GPU held out of "
        "a fit on the other; op source chosen by leave-one-model-out on the training GPU: "
        + ", ".join(f"{d} held out: {c}" for d, c in sorted(chosen.items()))
        + "); not answered: "
        + "; ".join(f"{n} x {r}" for r, n in reasons.items())
    )
    for line in summary(bench, SPLIT_SILICON):
        log(line)
    return bench
