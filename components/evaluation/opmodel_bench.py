"""The op engine's two benchmark splits on AIConfigurator's measured tables (``components/opmodel``).

- ``aiconfigurator-unseen-gpu`` (spec tier): each GPU of the store held out of every source in turn -- the
  spec model is fitted on the other GPUs' rows (and PipeWeave's FP8 GEMM train file) and scores the held-out
  GPU's GEMM and attention rows from its spec sheet alone.
- ``aiconfigurator-unseen-shape`` (measured tier): whole GEMM (N, K) sites, and whole attention (phase, H,
  HKV, D, window, batch) groups, held out of a measured GPU by hash; the rest of that GPU's table answers
  them.

Both report MAPE per family and per GPU beside the training-free roofline. Rows are capped by hash per
(GPU, dtype) on both sides so the gate's cost stays small; the caps are in the report.
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.bench_rows import bench_row
from components.common.metrics import relative_errors
from components.platform.config import OPMODEL_SPLITS  # the names live below the registry, which checks them

HELD_SHARE = 0.2  # of a GPU's GEMM sites / attention groups, by hash (unseen-shape)


def _shape(family: str, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    from components.physics import roofline as physics

    keys = physics.SHAPE_KEYS[family]
    return {k: frame[k].to_numpy(dtype="float64") for k in (*keys[0], *keys[1]) if k in frame}


def _cap(frame: pd.DataFrame, keys: list[str], cap: int | None, salt: str) -> pd.DataFrame:
    from components.opmodel.spec import hash_fraction

    if cap is None:
        return frame
    h = hash_fraction(frame.assign(_salt=salt), [*keys, "_salt"])
    group = ["device_id", "dtype"] + (["kv_dtype"] if "kv_dtype" in frame else [])
    grouped = pd.Series(h, index=frame.index).groupby([frame[g] for g in group], observed=True)
    rank = grouped.rank(method="first")
    return frame[rank.to_numpy() <= cap]


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled metrics + per (family, GPU) rows from per-group results (family, device, n, sum_ape, ...)."""
    frame = pd.DataFrame(results)
    out: dict[str, Any] = {"metrics": {}, "per_gpu": {}}
    if frame.empty:
        return out
    total = frame["n"].sum()
    out["metrics"]["runtime_mape"] = float(frame["sum_ape"].sum() / total)
    out["metrics"]["roofline_runtime_mape"] = float(frame["sum_roof"].sum() / total)
    for family, part in frame.groupby("family"):
        out["metrics"][f"{family}_runtime_mape"] = float(part["sum_ape"].sum() / part["n"].sum())
        out["metrics"][f"{family}_roofline_mape"] = float(part["sum_roof"].sum() / part["n"].sum())
        if "coverage" in part:  # rows asked, where the tier may decline some
            part = part.assign(asked=np.where(part["coverage"] > 0, part["n"] / part["coverage"], 0.0))
        per = part.groupby("device")[[c for c in ("sum_ape", "sum_roof", "n", "asked") if c in part]].sum()
        gpu = {
            d: {
                "mape": float(r.sum_ape / r.n),
                "roofline_mape": float(r.sum_roof / r.n),
                "n": int(r.n),
                **({"coverage": float(r.n / r.asked)} if "asked" in r and r.asked > 0 else {}),
            }
            for d, r in per.iterrows()
        }
        out["per_gpu"][family] = gpu
        out["metrics"][f"worst_gpu_{family}_runtime_mape"] = max(g["mape"] for g in gpu.values())
        median = statistics.median(g["mape"] for g in gpu.values())
        out["metrics"][f"median_gpu_{family}_runtime_mape"] = float(median)
    out["metrics"]["n"] = float(total)
    return out


def score_held_gpu(
    model: Any, store: dict[str, pd.DataFrame], held: str, spec: Any, test_per_group: int | None
) -> list[dict[str, Any]]:
    """Per (family, dtype[, kv]) group of ``held``'s rows (capped by hash): the spec tier's and the
    roofline's summed absolute percentage errors."""
    from components.opmodel import spec as spec_tier
    from components.physics import roofline as physics

    results = []
    for family, test in _held_rows(store, held, test_per_group):
        for key, part in test.groupby(spec_tier.group_keys(family), sort=True, observed=True):
            kv = key[2] if family == "attention" else None
            shape = _shape(family, part)
            roof = physics.roofline(family, key[1], shape, spec, kv)
            group = spec_tier.SpecRows(family, roof.choice.dtype, shape, spec, roof, kv)
            log_util, _ = model.predict_log_util(group)
            pred = physics.clamp(roof.time_us / np.exp(log_util), roof)
            true = part["latency_us"].to_numpy(dtype="float64")
            results.append(
                {
                    "family": family,
                    "device": held,
                    "dtype": "|".join(map(str, key[1:])),
                    "n": len(part),
                    "sum_ape": float(np.sum(relative_errors(true, pred))),
                    "sum_roof": float(np.sum(relative_errors(true, roof.time_us))),
                }
            )
    return results


def unseen_gpu(
    store: dict[str, pd.DataFrame],
    datasets_root: Path | None,
    *,
    train_per_group: int = 3000,
    test_per_group: int | None = 2000,
    rounds: int | None = None,
    params: dict[str, Any] | None = None,
    gpus: tuple[str, ...] | None = None,
    calibration_rows: tuple[int, ...] = (),
    configs: dict[str, Any] | None = None,
    transfer_pair_rows: int | None = None,
    detail: list | None = None,
) -> dict[str, Any]:
    """Leave-one-GPU-out of the spec tier over the store's GPUs (``configs``: per family, default the
    spec tier's chosen ones). With ``transfer_pair_rows``: the engine (transfer tier, else spec) answers the
    held-out GPU beside the spec tier and the sibling rule, on the same rows (``transfer_bench``); ``detail``:
    their rows with every answer (``transfer_bench.row_detail``)."""
    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier

    catalog = load_catalog()
    rows = spec_tier.training_rows(store, datasets_root, per_group=train_per_group)
    specs = {
        str(d): catalog.get(str(d)) for f in rows.values() for d in f["device_id"].unique() if d in catalog
    }
    held_gpus = gpus or tuple(
        sorted(
            {
                str(d)
                for f in ("gemm", "attention")
                if f in store
                for d in store[f]["device_id"].unique()
                if d in catalog
            }
        )
    )
    results, calibrated, chosen, full, memo = [], [], {}, None, {}
    from components.evaluation.transfer_bench import SpecFits

    fit_args = {**({"rounds": rounds} if rounds else {}), "params": params, "configs": configs}
    spec_without = SpecFits(rows, store if transfer_pair_rows else None, specs, fit_args)
    for held in held_gpus:
        model = spec_without(held)
        if transfer_pair_rows:
            from components.evaluation.transfer_bench import held_gpu_scores

            if full is None:
                from components.opmodel.measured import LAYOUTS, MeasuredTier

                every = {f: v for f, v in store.items() if f in LAYOUTS}
                stored = {str(d) for v in store.values() for d in v["device_id"].unique() if d in catalog}
                full = MeasuredTier(every, {d: catalog.get(d) for d in stored})
            inner = functools.partial(spec_without, held)  # the far choice's inner folds: held and one more
            scored, transfer_model = held_gpu_scores(
                store, held, model, test_per_group, transfer_pair_rows, full, memo, inner, detail
            )
            results.extend(scored)
            chosen[held] = {
                **{f: vars(s) for f, s in transfer_model.settings.items()},
                "near": {f: vars(s) for f, s in transfer_model.near_settings.items()},
                "far": transfer_model.far,
                "inconsistent": transfer_model.inconsistent,
                "l2_capacity": transfer_model.l2_capacity,
                "l2_scores": transfer_model.meta.get("l2_scores"),
                "overlap": transfer_model.overlap,
                "overlap_scores": transfer_model.meta.get("overlap_scores"),
                "elasticity": transfer_model.elasticity,
                "elasticity_scores": transfer_model.meta.get("elasticity_scores"),
            }
        else:
            results.extend(score_held_gpu(model, store, held, specs[held], test_per_group))
        if calibration_rows:
            calibrated.extend(
                _calibration_scores(model, store, held, specs[held], calibration_rows, test_per_group)
            )
    if transfer_pair_rows:
        from components.evaluation.transfer_bench import summarise

        out = summarise(results)
        out["transfer_settings"] = chosen
    else:
        out = _summary(results)
    out["groups"] = results
    out["caps"] = {"train_per_group": train_per_group, "test_per_group": test_per_group}
    if transfer_pair_rows:
        out["caps"]["transfer_pair_rows"] = transfer_pair_rows
    if calibrated:
        frame = pd.DataFrame(calibrated)
        out["calibration"] = frame.to_dict("records")
        for k, part in frame.groupby("k"):
            out["metrics"][f"calibrated_k{k}_median_gpu_runtime_mape"] = float(part["mape"].median())
    return out


def _held_rows(
    store: dict[str, pd.DataFrame], held: str, test_per_group: int | None
) -> list[tuple[str, pd.DataFrame]]:
    """(family, rows) of the held-out GPU per spec family, capped per group by hash (``training_rows``)."""
    from components.opmodel import spec as spec_tier

    out = []
    for family in spec_tier.SPEC_FAMILIES:
        frame = store.get(family)
        if frame is None:
            continue
        rows = spec_tier.training_rows(
            {family: frame[frame["device_id"] == held]}, None, per_group=test_per_group or 10**9
        ).get(family)
        if rows is not None and not rows.empty:
            out.append((family, rows))
    return out


def _calibration_scores(
    model: Any,
    store: dict[str, pd.DataFrame],
    held: str,
    spec: Any,
    ks: tuple[int, ...],
    test_per_group: int | None,
    settings: Any = None,
) -> list[dict[str, Any]]:
    """K hash-chosen rows of the held-out GPU calibrate the spec tier; the GPU's other rows score it
    (``settings``: a CalibrationSettings for every K, default the chosen one of each K)."""
    from components.opmodel import spec as spec_tier
    from components.opmodel.calibrated import fit_calibration
    from components.opmodel.engine import OpEngine
    from components.physics import roofline as physics

    parts = [rows.assign(family=family) for family, rows in _held_rows(store, held, test_per_group)]
    if not parts:
        return []
    rows = pd.concat(parts, ignore_index=True)
    dims = [c for c in ("M", "N", "K", "B", "S", "KV", "H", "HKV", "D", "W") if c in rows]
    filled = rows.fillna({c: 0 for c in dims})
    rows = rows.assign(_h=spec_tier.hash_fraction(filled, ["family", "dtype", *dims]))
    rows = rows.sort_values("_h", kind="mergesort").reset_index(drop=True)
    base = OpEngine(None, model)
    out = []
    for k in ks:
        suite, test = rows.iloc[:k], rows.iloc[k:]
        engine = base.with_calibrations({held: fit_calibration(base, suite, spec, settings)})
        apes = []
        for (family, dtype), part in test.groupby(["family", "dtype"], sort=True):
            inners = part.groupby("kv_dtype", sort=True) if family == "attention" else [(None, part)]
            for kv, inner in inners:
                keys = physics.SHAPE_KEYS[family]
                shape = {
                    c: inner[c].to_numpy(dtype="float64")
                    for c in (*keys[0], *keys[1])
                    if c in inner and inner[c].notna().all()
                }
                got = engine.predict(family, dtype, shape, spec, kv_dtype=kv).duration_us
                true = inner["latency_us"].to_numpy(dtype="float64")
                apes.append(relative_errors(true, got))
        out.append(
            {
                "device": held,
                "k": k,
                "mape": float(np.mean(np.concatenate(apes))),
                "n": int(sum(len(a) for a in apes)),
            }
        )
    return out


SITE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("N", "K"),
    "attention": ("phase", "H", "HKV", "D", "W", "B"),
}
SHAPE_COLUMNS = ("M", "N", "K", "B", "S", "KV", "H", "HKV", "D", "W", "phase")


def _held_sites(family: str, frame: pd.DataFrame) -> np.ndarray:
    from components.opmodel.spec import hash_fraction

    return hash_fraction(frame, list(SITE_COLUMNS[family])) < HELD_SHARE


def measured_groups(store: dict[str, pd.DataFrame], family: str, gpus: tuple[str, ...] | None = None):
    """(key, rows, spec, kv_dtype) per measured (GPU, dtype[, kv_dtype]) table of ``family`` in the catalog,
    with the rows the measured tier has a layout for (GEMM M >= 1; attention prefill S = KV or decode)."""
    from components.devices.catalog import load_catalog

    frame = store.get(family)
    if frame is None:
        return
    catalog = load_catalog()
    if family == "gemm":
        frame = frame[frame["M"] >= 1]
    else:
        frame = frame[(frame["S"] == 1) | (frame["S"] == frame["KV"])]
    keys = ["device_id", "dtype"] + (["kv_dtype"] if family == "attention" else [])
    for key, part in frame.groupby(keys, sort=True, observed=True):
        device = str(key[0])
        if device not in catalog or (gpus and device not in gpus):
            continue
        yield key, part, catalog.get(device), (key[2] if family == "attention" else None)


def score_group(
    family: str,
    part: pd.DataFrame,
    held: np.ndarray,
    spec: Any,
    dtype: str,
    kv: str | None,
    test_per_group: int | None,
    layout: Any = None,
) -> tuple[np.ndarray, int, float]:
    """The measured tier built from ``part[~held]`` answers ``part[held]`` (capped by hash): the APEs of the
    answered rows, the rows asked, and the roofline's summed APE over the answered rows."""
    from components.opmodel.measured import SiteTable
    from components.physics import roofline as physics

    table = SiteTable(family, part[~held], spec, dtype, kv, layout=layout)
    test = _cap(part[held], [c for c in part.columns if c in SHAPE_COLUMNS], test_per_group, "shape")
    shape = _shape(family, test)
    roof = physics.roofline(family, dtype, shape, spec, kv)
    got = table.resolve(shape, roof.time_us).duration_us
    ok = np.isfinite(got)
    true = test["latency_us"].to_numpy(dtype="float64")
    ape = relative_errors(true[ok], got[ok])
    return ape, len(test), float(np.sum(relative_errors(true[ok], roof.time_us[ok])))


def unseen_shape(
    store: dict[str, pd.DataFrame], *, test_per_group: int | None = 2000, gpus: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """Whole sites held out of each measured GPU's table, answered by the measured tier from the rest."""
    results, median_ape = [], {}
    for family in ("gemm", "attention"):
        apes = []
        for key, part, spec, kv in measured_groups(store, family, gpus):
            held = _held_sites(family, part)
            if not held.any() or held.all():
                continue
            ape, asked, sum_roof = score_group(family, part, held, spec, key[1], kv, test_per_group)
            apes.append(ape)
            results.append(
                {
                    "family": family,
                    "device": str(key[0]),
                    "dtype": "|".join(map(str, key[1:])),
                    "n": len(ape),
                    "coverage": len(ape) / asked if asked else 0.0,
                    "sum_ape": float(ape.sum()),
                    "sum_roof": sum_roof,
                }
            )
        if apes:
            median_ape[family] = float(np.median(np.concatenate(apes)))
    out = _summary(results)
    for family, value in median_ape.items():
        out["metrics"][f"{family}_median_ape"] = value
    covered = sum(r["n"] for r in results)
    asked = sum(r["n"] / r["coverage"] for r in results if r["coverage"] > 0)
    out["metrics"]["coverage"] = float(covered / asked) if asked else 0.0
    out["groups"] = results
    out["caps"] = {"test_per_group": test_per_group, "held_share": HELD_SHARE}
    return out


def gate_entry(
    split: str, store_dir: Path, datasets_root: Path | None, caps: dict[str, Any] | None = None
) -> dict:
    """One gate-report entry (status ok + metrics) for an op-engine split."""
    from components.opmodel.store import load_store

    started = time.perf_counter()
    caps = caps or {}
    if split == "aiter-unseen-gpu":
        from components.evaluation.aiter_bench import unseen_mi300x

        result = unseen_mi300x(
            load_store(store_dir, ("gemm", "attention", "bmm")),
            datasets_root,
            train_per_group=caps.get("train_per_group", 1000),
            test_per_group=caps.get("test_per_group", 400),
            rounds=caps.get("rounds", 60),
        )
    elif split == "aiconfigurator-unseen-gpu":
        from components.devices.aiconfigurator_sheet import aiconfigurator_device_ids

        store = load_store(store_dir, ("gemm", "attention", "moe", "bmm"))
        # AIConfigurator's GPUs are held out in turn (aiter's MI300X has its own split; AMD rows train)
        held = {str(d) for f in store.values() for d in f["device_id"].unique()} & aiconfigurator_device_ids()
        result = unseen_gpu(
            store,
            datasets_root,
            gpus=tuple(sorted(held)),
            train_per_group=caps.get("train_per_group", 600),
            test_per_group=caps.get("test_per_group", 100),
            rounds=caps.get("rounds", 40),
            transfer_pair_rows=caps.get("transfer_pair_rows", 80),
        )
    elif split == "aiconfigurator-unseen-shape":
        result = unseen_shape(
            load_store(store_dir, ("gemm", "attention")), test_per_group=caps.get("test_per_group", 400)
        )
    else:
        raise ValueError(f"unknown op-engine split {split!r}; choose one of {', '.join(OPMODEL_SPLITS)}")
    n = int(result["metrics"].get("n", 0))
    return {
        "status": "ok",
        "mode": "refit",
        "folds": sorted({g["device"] for g in result.get("groups", [])}),
        "n": n,
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": result["metrics"],
        "report": {
            "per_gpu": result.get("per_gpu", {}),
            "caps": result.get("caps"),
            **({"per_dtype": result["per_dtype"]} if "per_dtype" in result else {}),
            **{k: result[k] for k in ("per_gpu_spec", "per_gpu_sibling", "transfer_settings") if k in result},
        },
        "timings": [],
        "note": None,
    }


# ------------------------------------------------------------------ `kernelcast bench accuracy` rows

ENGINE_FAMILY = "op engine"  # the bench table's column for the engine's answer (tier per split)
ROOFLINE_FAMILY = "roofline"
SPLIT_SOURCES = {"aiter-unseen-gpu": "aiter (MI300X held out; trained on NVIDIA and MI308X)"}
SPEC_FAMILY = "spec tier"  # unseen-gpu: the spec tier alone (the engine's answer before the transfer tier)
SIBLING_FAMILY = "sibling physics"  # training-free: a measured relative's time x the roofline ratio
SPLIT_TIERS = {
    "aiconfigurator-unseen-gpu": "transfer tier (spec where no relative)",
    "aiconfigurator-unseen-shape": "measured tier",
    "aiter-unseen-gpu": "spec tier",
}


def bench_rows(split: str, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A gate entry (``gate_entry``) as accuracy-bench rows (``components.evaluation.bench``'s row shape):
    runtime MAPE per op family, per (op family, GPU), and the median/worst GPU, the engine beside the
    roofline."""
    metrics, per_gpu = entry["metrics"], entry["report"]["per_gpu"]
    rows: list[dict[str, Any]] = []

    def add(
        scope: str,
        family: str,
        value: float | None,
        n: int,
        coverage: float | None = None,
        metric: str = "mape",
    ) -> None:
        asked = round(n / coverage) if coverage else int(n)
        target = f"duration_us[{scope}]"
        rows.append(bench_row(split, family, target, scope, metric, value, n, asked, coverage=coverage))

    for op, gpus in sorted(per_gpu.items()):
        n = sum(g["n"] for g in gpus.values())
        asked = sum(g["n"] / g["coverage"] for g in gpus.values() if g.get("coverage"))
        coverage = n / asked if asked else None
        add(f"op={op}", ENGINE_FAMILY, metrics.get(f"{op}_runtime_mape"), n, coverage)
        add(f"op={op}", ROOFLINE_FAMILY, metrics.get(f"{op}_roofline_mape"), n, coverage)
        for family, prefix in ((SPEC_FAMILY, "spec_"), (SIBLING_FAMILY, "sibling_")):
            if f"{prefix}{op}_runtime_mape" in metrics:  # unseen-gpu: the baselines on the same rows
                add(f"op={op}", family, metrics[f"{prefix}{op}_runtime_mape"], n)
        if f"{op}_median_ape" in metrics:
            add(f"op={op}", ENGINE_FAMILY, metrics[f"{op}_median_ape"], n, coverage, metric="median_ape")
        for device, g in sorted(gpus.items()):
            add(f"op={op},device={device}", ENGINE_FAMILY, g["mape"], g["n"], g.get("coverage"))
            add(f"op={op},device={device}", ROOFLINE_FAMILY, g["roofline_mape"], g["n"], g.get("coverage"))
        for dtype, d in sorted(entry["report"].get("per_dtype", {}).get(op, {}).items()):
            add(f"op={op},dtype={dtype}", ENGINE_FAMILY, d["mape"], d["n"])
            add(f"op={op},dtype={dtype}", ROOFLINE_FAMILY, d["roofline_mape"], d["n"])
            if "sibling_mape" in d:  # on the shapes the held GPU and its sibling both measured
                shared = f"op={op},dtype={dtype},shared shapes"
                add(shared, SIBLING_FAMILY, d["sibling_mape"], d["sibling_n"])
                add(shared, SPEC_FAMILY, d.get("shared_mape"), d["sibling_n"])  # the spec tier's
                if "engine_shared_mape" in d:  # the engine on the plain GEMMs of those shapes
                    add(shared, ENGINE_FAMILY, d["engine_shared_mape"], d["engine_shared_n"])
            for other, g in sorted(d.get("siblings", {}).items()):
                add(f"op={op},dtype={dtype},from {other}", SIBLING_FAMILY, g["mape"], g["n"])
        for family, key in ((SPEC_FAMILY, "per_gpu_spec"), (SIBLING_FAMILY, "per_gpu_sibling")):
            for device, g in sorted((entry["report"].get(key) or {}).get(op, {}).items()):
                add(f"op={op},device={device}", family, g["mape"], g["n"], g.get("coverage"))
        worst = max(gpus, key=lambda d: gpus[d]["mape"])
        add(f"op={op},median GPU", ENGINE_FAMILY, metrics.get(f"median_gpu_{op}_runtime_mape"), len(gpus))
        add(f"op={op},worst GPU={worst}", ENGINE_FAMILY, gpus[worst]["mape"], gpus[worst]["n"])
    return rows


def extend_result(
    result: Any, splits: list[str], store_dir: Path, datasets_root: Path | None, *, log: Any = lambda _: None
) -> None:
    """Run the asked op-engine splits on the measured store at ``store_dir`` (the gate's caps); append their
    rows and a note per split to ``result`` (a ``bench.BenchResult``)."""
    for split in splits:
        entry = gate_entry(split, Path(store_dir), datasets_root)
        log(f"{split}: {entry['n']} rows, {entry['seconds']} s")
        result.rows += bench_rows(split, entry)
        caps = ", ".join(f"{k} {v}" for k, v in (entry["report"].get("caps") or {}).items())
        tier = SPLIT_TIERS.get(split, "")
        result.notes.append(
            f"{split} ({tier}, components/evaluation/opmodel_bench.py): "
            f"{SPLIT_SOURCES.get(split, 'AIConfigurator')}'s measured tables (the measured store the train "
            "stage builds), GPUs "
            f"{', '.join(entry['folds'])}; rows capped by hash per (GPU, dtype): {caps}"
        )


def markdown_section(rows: list[dict[str, Any]]) -> list[str]:
    """README lines for the op-engine splits: one line per (split, op family, GPU) with the engine's and the
    roofline's runtime MAPE, the rows and the share answered; [] when no such rows."""
    ours = [r for r in rows if r["split"] in SPLIT_TIERS and r["metric"] in ("mape", "median_ape")]
    if not ours:
        return []
    keyed: dict[tuple[str, str], dict[str, Any]] = {}
    for row in ours:
        entry = keyed.setdefault((row["split"], row["scope"]), {})
        entry[(row["family"], row["metric"])] = row["ours"]
        if row["family"] in (ENGINE_FAMILY, ROOFLINE_FAMILY):
            entry["n"], entry["coverage"] = row.get("n_asked", row["n"]), row.get("coverage")

    def pct(value: Any) -> str:
        return "\N{EN DASH}" if value is None else f"{100 * float(value):.1f}%"

    lines = [
        "",
        "Op engine on AIConfigurator's measured tables (runtime MAPE; GPUs held out of every source "
        "for unseen-gpu, whole GEMM (N, K) sites / attention groups held out of a measured GPU for "
        "unseen-shape):",
        "",
        "| split | tier | scope | op engine | median APE | roofline | rows | answered | spec tier "
        "| sibling physics |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (split, scope), entry in keyed.items():
        lines.append(
            "| "
            + " | ".join(
                [
                    split,
                    SPLIT_TIERS[split],
                    scope.replace("op=", "").replace("device=", "").replace(",", ", "),
                    pct(entry.get((ENGINE_FAMILY, "mape"))),
                    pct(entry.get((ENGINE_FAMILY, "median_ape"))),
                    pct(entry.get((ROOFLINE_FAMILY, "mape"))),
                    str(entry["n"]),
                    pct(entry["coverage"]),
                    pct(entry.get((SPEC_FAMILY, "mape"))),
                    pct(entry.get((SIBLING_FAMILY, "mape"))),
                ]
            )
            + " |"
        )
    return lines


OPENGINE_BLOCK = "opengine"  # README block <!-- opengine:start --> ... <!-- opengine:end -->


def is_opengine_note(note: str) -> bool:
    return note.startswith(OPMODEL_SPLITS)


def split_opengine(result: Any) -> tuple[Any, list[dict[str, Any]], list[str]]:
    """(``result`` without the op-engine rows and notes, those rows, those notes)."""
    engine = [r for r in result.rows if r["split"] in OPMODEL_SPLITS]
    notes = [n for n in result.notes if is_opengine_note(n)]
    rest = type(result)(
        rows=[r for r in result.rows if r["split"] not in OPMODEL_SPLITS],
        notes=[n for n in result.notes if not is_opengine_note(n)],
        timings=getattr(result, "timings", []),
    )
    return rest, engine, notes


def write_opengine_markdown(path: Path, rows: list[dict[str, Any]], notes: list[str], command: str) -> None:
    """The op engine's table and its notes into the README's op-engine block (atomically; ValueError naming
    the file when it lacks the block's markers)."""
    from components.common.marked_blocks import write_marked_block

    lines = [f"Generated by `{command}`.", *markdown_section(rows), "", *(f"- {n}" for n in notes)]
    write_marked_block(path, OPENGINE_BLOCK, "\n".join(lines))
