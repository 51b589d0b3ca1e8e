"""The calibrated tier: K profiled rows of a GPU shift the spec tier's efficiency on that GPU.

The spec tier errs on a new GPU mostly by a factor per regime (its tensor pipe reaches 70% where the training
GPUs reached 85%) and by how that factor changes between launch-bound and pipe-bound kernels. From K measured
rows the calibration learns, per (family, pipe) and per (family, pipe, dtype) regime, a shift of log efficiency
``a + b * (log2 roofline_us - ref)``, each level shrunk toward its parent by its row count (``SHRINK`` pseudo
rows; the root is the GPU-wide shift): a regime seen twice moves little. Plain JSON per GPU under
``$KERNELCAST_HOME/opmodel/calibrations/<device>.json``; the engine applies it (``OpEngine.calibrations``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.atomic import atomic_write_text

SHRINK = 8.0  # pseudo-rows pulling a regime's shift toward its parent's
SLOPE_RIDGE = 30.0  # pseudo-rows of "no slope"
CALIBRATION_DIR = ("opmodel", "calibrations")


def calibration_dir(home: Path) -> Path:
    return Path(home).joinpath(*CALIBRATION_DIR)


def _fit_level(x: np.ndarray, y: np.ndarray, parent: tuple[float, float], shrink: float) -> tuple[float, float]:
    """(a, b) of y ~ a + b x, shrunk toward ``parent`` (ridge with ``shrink`` pseudo-rows on a, SLOPE_RIDGE on b)."""
    pa, pb = parent
    r = y - (pa + pb * x)
    n = len(r)
    lhs = np.array([[n + shrink, x.sum()], [x.sum(), (x * x).sum() + SLOPE_RIDGE]])
    rhs = np.array([r.sum(), (x * r).sum()])
    da, db = np.linalg.solve(lhs, rhs)
    return pa + float(da), pb + float(db)


def fit_calibration(engine: Any, rows: pd.DataFrame, spec: Any) -> dict[str, dict[str, float]]:
    """Shifts per regime of one GPU from its measured rows: columns family, dtype, [kv_dtype], the shape's
    dimensions, latency_us. The spec tier's prediction is the base (measured rows of this GPU are not used)."""
    from components.opmodel import physics
    from components.opmodel.spec import regime

    xs, ys, regimes = [], [], []
    kv = rows["kv_dtype"] if "kv_dtype" in rows else pd.Series(None, index=rows.index, dtype=object)
    frame = rows.assign(_kv=kv.astype(object).where(kv.notna(), None))
    for (family, dtype, kv_dtype), part in frame.groupby(["family", "dtype", "_kv"], sort=True, dropna=False):
        kv_dtype = None if kv_dtype is None or (isinstance(kv_dtype, float) and np.isnan(kv_dtype)) else kv_dtype
        keys = physics.SHAPE_KEYS[family]
        shape = {k: part[k].to_numpy(dtype="float64") for k in (*keys[0], *keys[1]) if k in part and
                 part[k].notna().all()}
        roof = physics.roofline(family, dtype, shape, spec, kv_dtype)
        log_util, _ = engine.spec_log_util(family, roof.choice.dtype, shape, spec, roof, kv_dtype)
        measured = np.clip(roof.time_us / part["latency_us"].to_numpy(dtype="float64"), 1e-4, 1.0)
        xs.append(np.log2(np.maximum(roof.time_us, 1e-3)))
        ys.append(np.log(measured) - log_util)
        regimes.append(np.full(len(part), regime(family, roof.choice.dtype, spec), dtype=object))
    if not xs:
        return {}
    x, y, reg = np.concatenate(xs), np.concatenate(ys), np.concatenate(regimes)
    ref = float(np.median(x))
    x = x - ref
    out: dict[str, dict[str, float]] = {}
    root = _fit_level(x, y, (0.0, 0.0), SHRINK)
    out["*"] = {"log_shift": root[0], "slope": root[1], "ref": ref, "rows": int(len(y))}
    pipes = np.array(["|".join(r.split("|")[:2]) for r in reg], dtype=object)
    for pipe in np.unique(pipes):
        mask = pipes == pipe
        level = _fit_level(x[mask], y[mask], root, SHRINK)
        out[str(pipe)] = {"log_shift": level[0], "slope": level[1], "ref": ref, "rows": int(mask.sum())}
        for name in np.unique(reg[mask]):
            inner = reg == name
            leaf = _fit_level(x[inner], y[inner], level, SHRINK)
            out[str(name)] = {"log_shift": leaf[0], "slope": leaf[1], "ref": ref, "rows": int(inner.sum())}
    return out


def shift_for(calibration: dict[str, dict[str, float]], key: str) -> dict[str, float] | None:
    """The most specific level of ``calibration`` for regime ``key`` (regime, then family|pipe, then GPU-wide)."""
    for candidate in (key, "|".join(key.split("|")[:2]), "*"):
        if candidate in calibration:
            return calibration[candidate]
    return None


def apply_shift(log_util: np.ndarray, roof_time_us: np.ndarray, shift: dict[str, float]) -> np.ndarray:
    x = np.log2(np.maximum(roof_time_us, 1e-3)) - float(shift.get("ref", 0.0))
    return log_util + float(shift["log_shift"]) + float(shift.get("slope", 0.0)) * x


def save_calibration(home: Path, device_id: str, calibration: dict[str, dict[str, float]]) -> Path:
    path = calibration_dir(home) / f"{device_id}.json"
    atomic_write_text(path, json.dumps(calibration, indent=1, sort_keys=True) + "\n")
    return path


def load_calibrations(home: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{device_id: calibration}`` of every GPU calibrated under ``home`` (unreadable files skipped)."""
    folder = calibration_dir(home)
    out = {}
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            try:
                out[path.stem] = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
    return out
