"""Build the op engine the train stage saves beside the champion (``<predictor dir>/opmodel``) and under
``$KERNELCAST_HOME/models/opmodel``: the measured store (built from the aiconfigurator tables when the
state folder has none), the spec model fitted on a hash-chosen sample of every measured GPU, the measured
tier's held-out residual quantiles as its interval, the transfer tier's model (``transfer.json``: settings
chosen by leave-one-GPU-out over the measured GPUs, corrections, floors, achievable peaks).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PER_GROUP = 3000  # training rows per (GPU, dtype[, kv dtype]) for the spec booster: ~1 min on 2 cores
STORE_FAMILIES_IN_ENGINE: tuple[str, ...] = ("gemm", "attention", "moe")  # moe: the transfer tier's curves


def state_store(settings: Any) -> Path:
    return Path(settings.data_dir) / "opmodel" / "store"


def ensure_store(settings: Any, say: Callable[[str], None] = lambda _: None) -> Path | None:
    """The state folder's measured store, built from ``<datasets>/aiconfigurator`` and ``<datasets>/aiter``
    when missing, built from other sources than the datasets folder now holds or by an older layout; None
    when neither source exists (the engine then has no measured tier)."""
    from components.opmodel.store import (
        MANIFEST_NAME,
        STORE_VERSION,
        build_store,
        built_from,
        source_roots,
        store_version,
    )

    store = state_store(settings)
    root = Path(settings.datasets_dir)
    present = sorted(name for name in source_roots(root) if (root / name).is_dir())
    manifest = store / MANIFEST_NAME
    if manifest.is_file() and built_from(store) == present and store_version(store) == STORE_VERSION:
        return store
    if not present:
        return None
    started = time.perf_counter()
    rows = build_store(Path(settings.datasets_dir), store)
    say(f"op engine: measured store built from {root} ({rows}) in {time.perf_counter() - started:.0f} s")
    return store


def measured_intervals(engine: Any, store: dict, quantiles: tuple[float, float] = (0.05, 0.95)) -> dict:
    """(low, high) log-ratio quantiles of the measured tier on whole GEMM sites held out by hash (one GPU per
    dtype, a fifth of its sites): the interval of an interpolated answer."""
    from components.opmodel.measured import SiteTable
    from components.opmodel.spec import hash_fraction
    from components.physics import roofline as physics

    gemm = store.get("gemm")
    specs = engine.measured.specs if engine.measured is not None else {}
    if gemm is None or not specs:
        return {}
    ratios = []
    for (device, dtype), part in gemm[gemm["M"] >= 1].groupby(["device_id", "dtype"], sort=True):
        if device not in specs or dtype != "bf16":
            continue
        held = hash_fraction(part, ["N", "K"]) < 0.2
        table = SiteTable("gemm", part[~held], specs[device], dtype, None)
        test = part[held]
        shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
        roof = physics.roofline("gemm", dtype, shape, specs[device])
        got = table.resolve(shape, roof.time_us).duration_us
        ok = np.isfinite(got)
        ratios.append(np.log(test["latency_us"].to_numpy()[ok] / got[ok]))
    if not ratios:
        return {}
    r = np.concatenate(ratios)
    return {"measured": (float(np.quantile(r, quantiles[0])), float(np.quantile(r, quantiles[1])))}


def fit_transfer_tier(
    engine: Any, store_dir: Path, say: Callable[[str], None] = lambda _: None, spec_without: Any = None
) -> Any:
    """The transfer tier over the store's GPUs, its model fitted leave-one-GPU-out over all of them
    (``transfer_fit.fit_transfer``; ``spec_without``: a GPU -> the spec model fitted without it, for the
    answer of a GPU without a relative of its generation, ``tier_choice``)."""
    from components.opmodel.store import load_store
    from components.opmodel.transfer import CURVE_FAMILIES, TransferTier
    from components.opmodel.transfer_fit import TRANSFER_FAMILIES, fit_transfer

    started = time.perf_counter()
    frames = load_store(store_dir, TRANSFER_FAMILIES)
    model = fit_transfer(engine.measured, frames, sorted(engine.measured.specs), spec_without=spec_without)
    chosen = ", ".join(f"{f}: {vars(s)}" for f, s in sorted(model.settings.items()))
    chosen += "; without a near relative " + ", ".join(
        f"{f}: {v['tier']}" for f, v in sorted(model.far.items())
    )
    say(
        f"op engine: transfer tier over {len(model.meta['devices'])} GPUs ({chosen}) in "
        f"{time.perf_counter() - started:.0f} s; achievable peaks {model.achievable}"
    )
    return TransferTier(engine.measured, {f: v for f, v in frames.items() if f in CURVE_FAMILIES}, model)


def copy_engine_store(store_dir: Path, dest: Path) -> None:
    """The store tables a saved engine answers from, copied into ``dest``: the manifest, the pooled tables
    of its families, NeuSight's measured-only rows and the per-framework tables (``by_framework/``). Without
    the last, ``OpEngine.for_framework`` finds no framework's rows in the saved engine and every serving
    engine's step is timed from the pooled kernels (an engine loaded from a predictor folder or
    ``models/opmodel``: the bench's and the product's)."""
    from components.opmodel.store import FRAMEWORK_DIR, MEASURED_ONLY_DIR

    dest.mkdir(parents=True, exist_ok=True)
    for name in (
        "store.json",
        *(f"{f}.parquet" for f in STORE_FAMILIES_IN_ENGINE),
        *(f"{FRAMEWORK_DIR}/{f}.parquet" for f in STORE_FAMILIES_IN_ENGINE),
    ):
        if (store_dir / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(store_dir / name, dest / name)
    if (store_dir / MEASURED_ONLY_DIR).is_dir():  # NeuSight's rows: the measured tier's only
        shutil.copytree(store_dir / MEASURED_ONLY_DIR, dest / MEASURED_ONLY_DIR)


def train_engine(settings: Any, out_dir: Path, say: Callable[[str], None] = lambda _: None) -> Path | None:
    """Fit and save the engine into ``out_dir`` and ``$KERNELCAST_HOME/models/opmodel``; None without data."""
    from components.common.atomic import atomic_write_dir
    from components.devices.catalog import load_catalog
    from components.opmodel.engine import OpEngine
    from components.opmodel.spec import PRIOR_ONLY_FAMILIES, fit, fit_priors, training_rows
    from components.opmodel.store import load_store
    from components.opmodel.transfer import TransferTier

    store_dir = ensure_store(settings, say)
    if store_dir is None:
        return None
    started = time.perf_counter()
    store = load_store(store_dir, STORE_FAMILIES_IN_ENGINE)
    catalog = load_catalog()
    rows = training_rows(store, Path(settings.datasets_dir), per_group=PER_GROUP)
    specs = {
        str(d): catalog.get(str(d)) for f in rows.values() for d in f["device_id"].unique() if d in catalog
    }
    model = fit(rows, specs)
    others = load_store(store_dir, PRIOR_ONLY_FAMILIES)
    every = {
        **specs,
        **{
            str(d): catalog.get(str(d))
            for f in others.values()
            for d in f["device_id"].unique()
            if d in catalog
        },
    }
    fit_priors(model, others, every)

    def spec_without(*held: str) -> Any:
        """The spec model as trained here, without ``held``'s rows (the far and kin choices' inner folds)."""
        inner = fit({f: r[~r["device_id"].isin(held)] for f, r in rows.items()}, specs)
        return fit_priors(inner, {f: v[~v["device_id"].isin(held)] for f, v in others.items()}, every)

    engine = OpEngine.from_store(store_dir, model)
    intervals = measured_intervals(engine, store)
    # the transfer tier's model fitted without NeuSight's rows; they answer their own GPU only (the
    # measured tier), never another GPU as a relative: not validated for that, MI210 FP32 GEMMs got 2x slower
    fitted = fit_transfer_tier(
        OpEngine.from_store(store_dir, model, measured_only=False), store_dir, say, spec_without
    )
    transfer = TransferTier(engine.measured, None, fitted.model)
    transfer.curve_groups = fitted.curve_groups  # the MoE curves (no measured-only rows among them)
    transfer.not_relatives = engine.transfer.not_relatives
    engine = OpEngine(
        engine.measured,
        model,
        intervals=intervals,
        meta={"spec_rows": {f: len(r) for f, r in rows.items()}, "devices": sorted(specs)},
        transfer=transfer,
    )

    def write(tmp: Path) -> None:
        copy_engine_store(store_dir, tmp / "store")
        engine.save(tmp)

    atomic_write_dir(Path(out_dir), write)
    atomic_write_dir(Path(settings.models_dir) / "opmodel", write)
    n_rows = sum(len(r) for r in rows.values())
    say(
        f"op engine: spec model on {n_rows:,} measured rows of {len(specs)} GPUs, "
        f"saved in {time.perf_counter() - started:.0f} s"
    )
    return Path(out_dir)
