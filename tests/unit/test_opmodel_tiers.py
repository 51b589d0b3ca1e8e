"""The op engine's tiers on real AIConfigurator tables (H100 GEMMs of one vLLM version, linked in upstream's
layout): the store folds repeats deterministically, the measured tier returns exact hits verbatim and
interpolates held-out sites, falls through outside its hull, calibration shifts the spec tier toward a GPU,
save/load round-trips.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT.parent / "shared" / "datasets"
AIC = DATASETS / "aiconfigurator"
DATA = "aic-core/src/aiconfigurator_core/systems/data"
TABLE = "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"

pytestmark = pytest.mark.skipif(
    not (AIC / DATA / TABLE).is_file(), reason="aiconfigurator tables not present"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    from components.opmodel.store import build_store, load_store

    root = tmp_path_factory.mktemp("aic")
    link = root / DATA / TABLE
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(AIC / DATA / TABLE)
    first, second = root / "store-a", root / "store-b"
    build_store(root, first, families=("gemm",))
    build_store(root, second, families=("gemm",))
    return first, second, load_store(first)["gemm"]


def test_store_is_one_row_per_kernel_and_byte_identical_on_rebuild(built) -> None:
    first, second, gemm = built
    assert (first / "gemm.parquet").read_bytes() == (second / "gemm.parquet").read_bytes()
    assert not gemm.duplicated(["device_id", "dtype", "M", "N", "K"]).any()
    assert (gemm["n_repeats"] >= 1).all() and (gemm["latency_min_us"] <= gemm["latency_us"]).all()
    assert (gemm["latency_us"] <= gemm["latency_max_us"]).all() and set(gemm["device_id"]) == {"h100-sxm"}


def _bf16(gemm):
    return gemm[(gemm["dtype"] == "bf16") & (gemm["M"] >= 1)]


def test_measured_tier_exact_hits_interpolated_sites_and_fall_through(built) -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel.measured import SiteTable
    from components.opmodel.spec import hash_fraction
    from components.physics import roofline as physics

    gemm = _bf16(built[2])
    h100 = load_catalog().get("h100-sxm")
    held = hash_fraction(gemm, ["N", "K"]) < 0.2
    table = SiteTable("gemm", gemm[~held], h100, "bf16", None)
    seen = gemm[~held].iloc[::97]
    shape = {k: seen[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    got = table.resolve(shape, physics.roofline("gemm", "bf16", shape, h100).time_us)
    assert got.exact.all()
    np.testing.assert_allclose(got.duration_us, seen["latency_us"].to_numpy(), rtol=1e-12)
    test = gemm[held]
    shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    roof = physics.roofline("gemm", "bf16", shape, h100)
    got = table.resolve(shape, roof.time_us)
    ok = np.isfinite(got.duration_us)
    assert ok.mean() > 0.9 and not got.exact[ok].any() and (got.neighbours[ok] >= 1).all()
    ape = np.abs(got.duration_us[ok] - test["latency_us"].to_numpy()[ok]) / test["latency_us"].to_numpy()[ok]
    true = test["latency_us"].to_numpy()[ok]
    roof_ape = np.abs(roof.time_us[ok] - true) / true
    assert np.median(ape) < 0.08 and ape.mean() < 0.5 * roof_ape.mean()
    far = {"M": np.array([4096.0]), "N": np.array([3.0]), "K": np.array([3.0])}  # 10+ octaves from any site
    assert np.isnan(table.resolve(far, physics.roofline("gemm", "bf16", far, h100).time_us).duration_us).all()


def test_calibration_moves_the_spec_tier_toward_the_gpu_and_the_engine_round_trips(built, tmp_path) -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier
    from components.opmodel.calibrated import fit_calibration, load_calibrations, save_calibration
    from components.opmodel.engine import OpEngine

    gemm = _bf16(built[2])
    catalog = load_catalog()
    h100 = catalog.get("h100-sxm")
    # a spec model that never saw the H100: fitted on it posing as another GPU would leak, so priors only
    model = spec_tier.SpecModel(priors={"gemm": float(np.log(0.3))})
    engine = OpEngine(None, model)
    rows = gemm.assign(family="gemm").sample(n=500, random_state=3)
    suite, test = rows.iloc[:100], rows.iloc[100:]
    shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    before = engine.predict("gemm", "bf16", shape, h100)
    calibration = fit_calibration(engine, suite, h100)
    save_calibration(tmp_path, "h100-sxm", calibration)
    calibrated = engine.with_calibrations(load_calibrations(tmp_path))
    after = calibrated.predict("gemm", "bf16", shape, h100)
    true = test["latency_us"].to_numpy()
    assert set(before.tier) == {"spec"} and set(after.tier) == {"calibrated"}
    error_before = np.mean(np.abs(before.duration_us - true) / true)
    assert np.mean(np.abs(after.duration_us - true) / true) < 0.7 * error_before
    calibrated.save(tmp_path / "engine")
    again = OpEngine.load(tmp_path / "engine").predict("gemm", "bf16", shape, h100)
    np.testing.assert_allclose(again.duration_us, after.duration_us, rtol=1e-12)


def test_kernelcast_calibrate_rows_reach_the_engine_calibration(built, tmp_path) -> None:
    """A profiled table (canonical columns, as ``kernelcast calibrate`` reads it) of linear/bmm/gemm rows in
    bf16 becomes the engine's calibration of that GPU; fp32 rows (the champion's) are left out."""
    import json

    import pandas as pd

    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier
    from components.opmodel.calibrated import calibrate_engine, engine_rows, load_calibrations
    from components.opmodel.engine import OpEngine

    gemm = _bf16(built[2]).iloc[::400]
    names = np.array(["linear", "bmm", "gemm"], dtype=object)[np.arange(len(gemm)) % 3]
    shapes = [
        json.dumps({"M": int(m), "N": int(n), "K": int(k), **({"B": 1} if f == "bmm" else {})})
        for f, m, n, k in zip(names, gemm["M"], gemm["N"], gemm["K"], strict=True)
    ]
    table = pd.DataFrame(
        {
            "family": names,
            "dtype": "bf16",
            "shape_json": shapes,
            "params_json": "{}",
            "duration_us": gemm["latency_us"].to_numpy(),
        }
    )
    table = pd.concat([table, table.head(3).assign(dtype="fp32")], ignore_index=True)
    rows = engine_rows(table)
    assert len(rows) == len(gemm) and set(rows["family"]) == {"gemm"} and "B" not in rows
    engine = OpEngine(None, spec_tier.SpecModel(priors={"gemm": float(np.log(0.3))}))
    path, used = calibrate_engine(engine, table, load_catalog().get("h100-sxm"), tmp_path)
    assert used == len(gemm) and path is not None and "h100-sxm" in load_calibrations(tmp_path)


def test_spec_config_round_trips_floors_the_base_and_is_monotone_in_the_peaks(built, tmp_path) -> None:
    """A spec model with the latency floor, the L2 feature, no GPU-naming features, a hedge and the monotone
    constraint: saved and loaded it answers alike; never below the roofline; a GPU with every peak doubled
    is never slower (the constraint's promise)."""
    from components.common.flat_trees import FlatTrees
    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier
    from components.physics import roofline as physics

    gemm = _bf16(built[2])
    h100 = load_catalog().get("h100-sxm")
    config = spec_tier.SpecConfig(floor=1.0, l2=True, identity=False, hedge=0.7, monotone=True)
    model = spec_tier.fit({"gemm": gemm.iloc[::7]}, {"h100-sxm": h100}, rounds=20, configs={"gemm": config})
    floor = model.floors["gemm|tensor|bf16"]
    assert 1.0 < floor < 20.0 and model.configs["gemm"] == config  # a few microseconds per kernel
    model.save(tmp_path)
    again = spec_tier.SpecModel.load(tmp_path)
    assert again.configs["gemm"] == config and again.floors == model.floors
    # loaded as flat trees (a question's load imports no LightGBM: scikit-learn and scipy come with it)
    assert all(isinstance(b, FlatTrees) for b in again.boosters.values())
    probe = (
        "import sys; from pathlib import Path; from components.opmodel.spec import SpecModel; "
        f"SpecModel.load(Path({str(tmp_path)!r})); print('lightgbm' in sys.modules)"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    assert imported == "False"
    test = gemm.iloc[3::11]
    shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    peaks = {k: (v * 2.0 if v is not None else None) for k, v in h100.peak_tflops.model_dump().items()}
    faster = h100.model_copy(
        update={
            "id": "h100-x2",
            "dram_gbps": h100.dram_gbps * 2.0,
            "peak_tflops": h100.peak_tflops.model_copy(update=peaks),
        }
    )
    times = {}
    for gpu in (h100, faster):
        roof = physics.roofline("gemm", "bf16", shape, gpu)
        log_util, _ = model.predict_log_util(spec_tier.SpecRows("gemm", "bf16", shape, gpu, roof))
        loaded, _ = again.predict_log_util(spec_tier.SpecRows("gemm", "bf16", shape, gpu, roof))
        np.testing.assert_allclose(loaded, log_util, rtol=1e-12)
        assert np.all(log_util <= 0.0)  # runtime = roofline / util >= roofline
        times[gpu.id] = roof.time_us / np.exp(log_util)
    assert np.all(times["h100-x2"] <= times["h100-sxm"] * (1 + 1e-9))
    # the floor is what small kernels cost: the answer for a tiny GEMM is near it, not near the roofline
    tiny = {"M": np.array([1.0]), "N": np.array([128.0]), "K": np.array([128.0])}
    roof = physics.roofline("gemm", "bf16", tiny, h100)
    log_util, _ = model.predict_log_util(spec_tier.SpecRows("gemm", "bf16", tiny, h100, roof))
    assert roof.time_us[0] / np.exp(log_util[0]) > 0.5 * floor > 10 * roof.time_us[0]


def test_calibration_ridge_corrects_what_the_shifts_leave_and_stays_off_with_few_rows(built) -> None:
    """A flat spec prior errs on H100 GEMMs by the size regime (small kernels are latency-bound), which one
    shift per regime cannot follow: the per-GPU ridge (its strength chosen by leave-one-out on the K rows)
    takes it up and beats the shifts alone; six rows fit no ridge at all."""
    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier
    from components.opmodel.calibrated import (
        CHOSEN_SETTINGS,
        CalibrationSettings,
        fit_calibration,
        settings_for,
    )
    from components.opmodel.engine import OpEngine

    gemm = _bf16(built[2])
    h100 = load_catalog().get("h100-sxm")
    engine = OpEngine(None, spec_tier.SpecModel(priors={"gemm": float(np.log(0.3))}))
    rows = gemm.assign(family="gemm").sample(n=700, random_state=5)
    suite, test = rows.iloc[:200], rows.iloc[200:]
    calibration = fit_calibration(engine, suite, h100)
    assert "gemm" in calibration["_ridge"] and calibration["_ridge"]["gemm"]["lambda"] > 0
    shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    true = test["latency_us"].to_numpy()
    with_ridge = engine.with_calibrations({"h100-sxm": calibration}).predict("gemm", "bf16", shape, h100)
    without = engine.with_calibrations({"h100-sxm": {**calibration, "_ridge": {}}}).predict(
        "gemm", "bf16", shape, h100
    )
    error = {
        name: np.mean(np.abs(t.duration_us - true) / true)
        for name, t in (("ridge", with_ridge), ("shifts", without))
    }
    assert error["ridge"] < 0.9 * error["shifts"], error
    assert fit_calibration(engine, suite.iloc[:6], h100)["_ridge"] == {}
    plain = fit_calibration(engine, suite, h100, CalibrationSettings(ridge=False, local_scale=0.0))
    assert plain["_ridge"] == {} and plain["_local"] == {} and plain["_settings"]["local_scale"] == 0.0
    assert settings_for(90) == CHOSEN_SETTINGS[100] and settings_for(500) == CHOSEN_SETTINGS[400]


def _held_out_gemm(built, dtype: str):
    from components.devices.catalog import load_catalog
    from components.opmodel.spec import hash_fraction
    from components.physics import roofline as physics

    gemm = built[2]
    gemm = gemm[(gemm["dtype"] == dtype) & (gemm["M"] >= 1)]
    h100 = load_catalog().get("h100-sxm")
    held = hash_fraction(gemm, ["N", "K"]) < 0.2
    test = gemm[held]
    shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    return gemm[~held], test, shape, physics.roofline("gemm", dtype, shape, h100).time_us, h100


def test_grid_brackets_beat_the_nearest_site_blend_and_pruning_changes_no_answer(built, monkeypatch) -> None:
    from dataclasses import replace

    from components.opmodel import measured
    from components.opmodel.measured import LAYOUTS, SiteTable

    train, test, shape, roof, h100 = _held_out_gemm(built, "bf16")
    true = test["latency_us"].to_numpy()
    got = SiteTable("gemm", train, h100, "bf16", None).resolve(shape, roof)
    before = replace(LAYOUTS["gemm"], categorical=(), blend="idw", gate=2.0)  # the default before selection
    old = SiteTable("gemm", train, h100, "bf16", None, layout=before).resolve(shape, roof).duration_us
    ape, old_ape = np.abs(got.duration_us - true) / true, np.abs(old - true) / true
    assert np.isfinite(got.duration_us).all() and not got.exact.any()
    assert ape.mean() < 0.8 * old_ape.mean() and np.median(ape) < 0.05
    assert (got.duration_us >= roof * (1 - 1e-9)).all()  # never below the roofline
    # the candidate pruning (nearest sites + line brackets) gives the answers of the search over every site
    monkeypatch.setattr(measured, "NEAREST_KEPT", 10**6)
    full = SiteTable("gemm", train, h100, "bf16", None).resolve(shape, roof).duration_us
    np.testing.assert_allclose(got.duration_us, full, rtol=1e-12)


def test_block_scaled_gemm_sites_never_borrow_across_the_scale_block_grid(built) -> None:
    from dataclasses import replace

    from components.devices.catalog import load_catalog
    from components.opmodel.measured import LAYOUTS, SiteTable
    from components.physics import roofline as physics

    gemm = built[2]
    gemm = gemm[(gemm["dtype"] == "fp8_block") & (gemm["M"] >= 1)]
    aligned = ((gemm["N"] % 128 == 0) & (gemm["K"] % 128 == 0)).to_numpy()
    h100 = load_catalog().get("h100-sxm")
    # K = 64 is off the 128-wide scale-block grid: another (fallback) kernel, 2-3x slower in this table
    test = gemm[(gemm["N"] == 128) & (gemm["K"] == 64)]
    assert len(test) and (test["latency_us"].median() > 1.5 * gemm[aligned]["latency_us"].median())
    shape = {k: test[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    roof = physics.roofline("gemm", "fp8_block", shape, h100).time_us
    kept = SiteTable("gemm", gemm[aligned], h100, "fp8_block", None).resolve(shape, roof)
    assert np.isnan(kept.duration_us).all() and (kept.neighbours == 0).all()  # the spec tier answers instead
    plain = replace(LAYOUTS["gemm"], categorical=())
    mixed = SiteTable("gemm", gemm[aligned], h100, "fp8_block", None, layout=plain).resolve(shape, roof)
    assert np.isfinite(mixed.duration_us).all()  # without the split the aligned sites would answer it
    # an aligned question is answered by aligned sites
    inside = gemm[aligned].iloc[::50]
    shape = {k: inside[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    got = SiteTable("gemm", gemm[aligned], h100, "fp8_block", None).resolve(
        shape, physics.roofline("gemm", "fp8_block", shape, h100).time_us
    )
    assert got.exact.all()
