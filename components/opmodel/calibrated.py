"""The calibrated tier: K profiled rows of a GPU shift the spec tier's efficiency on that GPU.

The spec tier errs on a new GPU mostly by a factor per regime (its tensor pipe reaches 70% where the training
GPUs reached 85%) and by how that factor changes between launch-bound and pipe-bound kernels. From K measured
rows the calibration learns, per (family, pipe) and per (family, pipe, dtype) regime, a shift of log
efficiency ``a + b * (log2 roofline_us - ref)``, each level shrunk toward its parent by its row count
(``SHRINK`` pseudo rows; the root is the GPU-wide shift): a regime seen twice moves little. What the shifts
leave is fitted per family by a ridge regression on a few transferable features (``correction_features``: log
roofline time and its square, intensity over the ridge, memory-bound, waves and tail, the spec tier's own
log efficiency, log sizes), its strength chosen per GPU by leave-one-out over the K rows themselves
(closed form), "no correction" among the choices -- so few rows correct little. Last, a question near
calibration rows gets their leftover error (``local_residual``). Plain JSON per GPU
under ``$KERNELCAST_HOME/opmodel/calibrations/<device>.json``; the engine applies it
(``OpEngine.calibrations``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from components.common.atomic import atomic_write_text

if TYPE_CHECKING:  # pandas loads in the fitting functions: answering a question needs none of it
    import pandas as pd

SHRINK = 8.0  # pseudo-rows pulling a regime's shift toward its parent's
LOCAL_SCALE = 1.5  # octaves: a calibration row this far away corrects with weight 1/e
SLOPE_RIDGE = 30.0  # pseudo-rows of "no slope"
CALIBRATION_DIR = ("opmodel", "calibrations")


@dataclass(frozen=True)
class CalibrationSettings:
    """How much a calibration trusts its K rows: ``shrink`` pseudo-rows toward each level's parent, the
    per-GPU ridge on or off, ``local_scale`` octaves of the local correction's reach (0 = none)."""

    shrink: float = SHRINK
    ridge: bool = True
    local_scale: float = LOCAL_SCALE

    def as_dict(self) -> dict[str, Any]:
        return {"shrink": self.shrink, "ridge": self.ridge, "local_scale": self.local_scale}


DEFAULT_SETTINGS = CalibrationSettings()
# Per number of calibration rows (the nearest in log wins): the settings the nested leave-one-GPU-out
# selection chose most often (benchmarks/opmodel_calibration_selection.py; the ridge and the 3-octave local
# reach on every fold, the shrinkage varying; per-fold choices in benchmarks/results/
# opmodel_calibration_selection.json).
CHOSEN_SETTINGS: dict[int, CalibrationSettings] = {
    100: CalibrationSettings(shrink=8.0, ridge=True, local_scale=3.0),
    400: CalibrationSettings(shrink=32.0, ridge=True, local_scale=3.0),
}


def settings_for(rows: int) -> CalibrationSettings:
    """The chosen settings of the row count nearest (in log) to ``rows``."""
    if not CHOSEN_SETTINGS:
        return DEFAULT_SETTINGS
    nearest = min(CHOSEN_SETTINGS, key=lambda k: abs(np.log(max(rows, 1)) - np.log(k)))
    return CHOSEN_SETTINGS[nearest]


def calibration_dir(home: Path) -> Path:
    return Path(home).joinpath(*CALIBRATION_DIR)


def _fit_level(
    x: np.ndarray, y: np.ndarray, parent: tuple[float, float], shrink: float
) -> tuple[float, float]:
    """(a, b) of y ~ a + b x, shrunk toward ``parent`` (ridge: ``shrink`` pseudo-rows on a, SLOPE_RIDGE
    on b)."""
    pa, pb = parent
    r = y - (pa + pb * x)
    n = len(r)
    lhs = np.array([[n + shrink, x.sum()], [x.sum(), (x * x).sum() + SLOPE_RIDGE]])
    rhs = np.array([r.sum(), (x * r).sum()])
    da, db = np.linalg.solve(lhs, rhs)
    return pa + float(da), pb + float(db)


LOCAL_DIMS: dict[str, tuple[str, ...]] = {
    "gemm": ("M", "N", "K"),
    "attention": ("B", "S", "KV", "H", "HKV", "D"),
}
LOCAL_NEIGHBOURS = 8


def local_coords(family: str, shape: dict[str, np.ndarray], n: int) -> np.ndarray:
    """log2 of the family's size dimensions (the space the local correction measures distance in)."""
    dims = LOCAL_DIMS.get(family, ())
    if not dims:
        return np.zeros((n, 0))
    return np.column_stack(
        [np.log2(np.broadcast_to(np.asarray(shape.get(d, 1.0), dtype="float64"), (n,))) for d in dims]
    )


RIDGE_GRID: tuple[float, ...] = (1.0, 4.0, 16.0, 64.0, 256.0)  # pseudo-rows per feature; LOO picks one
TILE = 128.0


def correction_features(
    family: str, shape: dict[str, np.ndarray], roof: Any, spec: Any, spec_log_util: np.ndarray
) -> np.ndarray:
    """The features the per-GPU ridge correction reads (no GPU identity: the fit is of one GPU)."""
    n = len(roof.time_us)
    x = np.log2(np.maximum(roof.time_us, 1e-3))
    ridge = roof.peak_flops / roof.peak_bps
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(roof.dram_bytes > 0, roof.flops / roof.dram_bytes, 1.0)
    rel = np.clip(np.log2(np.maximum(intensity / ridge, 1e-9)), -12.0, 12.0)
    sms = float(spec.sms)
    arrays = {k: np.broadcast_to(np.asarray(v, dtype="float64"), (n,)) for k, v in shape.items()}
    if family == "gemm":
        b = arrays.get("B", np.ones(n))
        tiles = b * np.ceil(arrays["M"] / TILE) * np.ceil(arrays["N"] / TILE)
    else:
        tiles = arrays["B"] * arrays["H"] * np.ceil(arrays["S"] / TILE)
    waves = tiles / sms
    sizes = local_coords(family, arrays, n)
    cols = [
        x,
        x * x / 8.0,
        rel,
        (roof.memory_us >= roof.compute_us).astype(float),
        np.log2(waves),
        waves / np.ceil(waves),
        spec_log_util,
        *sizes.T,
    ]
    return np.column_stack(cols)


def _fit_ridge(z: np.ndarray, r: np.ndarray) -> dict[str, Any] | None:
    """Ridge of ``r`` on standardised ``z`` (free intercept); its strength by leave-one-out over the rows
    (closed form: the hat matrix), None when no strength beats no correction at all."""
    n = len(r)
    if n < 8:
        return None
    mean, scale = z.mean(axis=0), z.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    design_matrix = np.hstack([np.ones((n, 1)), (z - mean) / scale])
    best_cv, best = float(np.mean(r**2)), None
    for lam in RIDGE_GRID:
        penalty = np.diag(np.r_[1e-6, np.full(z.shape[1], lam)])
        try:
            inverse = np.linalg.inv(design_matrix.T @ design_matrix + penalty)
        except np.linalg.LinAlgError:
            continue
        coef = inverse @ design_matrix.T @ r
        hat = np.einsum("ij,jk,ik->i", design_matrix, inverse, design_matrix)
        cv = float(np.mean(((r - design_matrix @ coef) / np.maximum(1.0 - hat, 1e-3)) ** 2))
        if cv < best_cv:
            best_cv, best = (
                cv,
                {
                    "lambda": lam,
                    "mean": mean.tolist(),
                    "scale": scale.tolist(),
                    "intercept": float(coef[0]),
                    "coef": coef[1:].tolist(),
                },
            )
    return best


def ridge_correction(model: dict[str, Any] | None, z: np.ndarray) -> np.ndarray:
    """The fitted correction of log efficiency at features ``z`` (0 without a model)."""
    if not model:
        return np.zeros(len(z))
    zs = (z - np.asarray(model["mean"])) / np.asarray(model["scale"])
    return np.clip(float(model["intercept"]) + zs @ np.asarray(model["coef"]), -3.0, 3.0)


def fit_calibration(
    engine: Any, rows: pd.DataFrame, spec: Any, settings: CalibrationSettings | None = None
) -> dict[str, Any]:
    """Shifts per regime of one GPU from its measured rows: columns family, dtype, [kv_dtype], the shape's
    dimensions, latency_us. The spec tier's prediction is the base (measured rows of this GPU are not used).
    What the shifts leave is kept per regime with each row's log shape (``_local``): a question near
    calibration rows gets their residual too (``local_residual``)."""
    import pandas as pd

    from components.opmodel.spec import SpecRows, regime
    from components.physics import roofline as physics

    xs, ys, regimes, coords, feats, families = [], [], [], [], [], []
    kv = rows["kv_dtype"] if "kv_dtype" in rows else pd.Series(None, index=rows.index, dtype=object)
    frame = rows.assign(_kv=kv.astype(object).where(kv.notna(), "-"))
    for (family, dtype, kv_dtype), part in frame.groupby(["family", "dtype", "_kv"], sort=True, dropna=False):
        kv_dtype = None if kv_dtype == "-" else kv_dtype
        keys = physics.SHAPE_KEYS[family]
        shape = {
            k: part[k].to_numpy(dtype="float64")
            for k in (*keys[0], *keys[1])
            if k in part and part[k].notna().all()
        }
        roof = physics.roofline(family, dtype, shape, spec, kv_dtype)
        log_util, _ = engine.spec_log_util(SpecRows(family, roof.choice.dtype, shape, spec, roof, kv_dtype))
        measured = np.clip(roof.time_us / part["latency_us"].to_numpy(dtype="float64"), 1e-4, 1.0)
        xs.append(np.log2(np.maximum(roof.time_us, 1e-3)))
        ys.append(np.log(measured) - log_util)
        key = regime(family, roof.choice.dtype, spec)
        if kv_dtype is not None and kv_dtype != dtype:
            key = f"{key}|kv={kv_dtype}"
        regimes.append(np.full(len(part), key, dtype=object))
        coords.append((key, local_coords(family, shape, len(part))))
        feats.append(correction_features(family, shape, roof, spec, log_util))
        families.append(np.full(len(part), family, dtype=object))
    if not xs:
        return {}
    x, y, reg = np.concatenate(xs), np.concatenate(ys), np.concatenate(regimes)
    ref = float(np.median(x))
    x = x - ref
    out: dict[str, Any] = {}
    settings = settings or settings_for(len(y))
    shrink = settings.shrink
    root = _fit_level(x, y, (0.0, 0.0), shrink)
    out["*"] = {"log_shift": root[0], "slope": root[1], "ref": ref, "rows": len(y)}
    fitted = root[0] + root[1] * x
    pipes = np.array(["|".join(r.split("|")[:2]) for r in reg], dtype=object)
    for pipe in np.unique(pipes):
        mask = pipes == pipe
        level = _fit_level(x[mask], y[mask], root, shrink)
        out[str(pipe)] = {"log_shift": level[0], "slope": level[1], "ref": ref, "rows": int(mask.sum())}
        for name in np.unique(reg[mask]):
            inner = reg == name
            leaf = _fit_level(x[inner], y[inner], level, shrink)
            out[str(name)] = {"log_shift": leaf[0], "slope": leaf[1], "ref": ref, "rows": int(inner.sum())}
            fitted[inner] = leaf[0] + leaf[1] * x[inner]
    residual = y - fitted
    fams = np.concatenate(families)
    by_family = {}
    for family in np.unique(fams):
        mask = fams == family
        z = np.vstack([f for f, fam in zip(feats, families, strict=False) if fam[0] == family])
        ridge = _fit_ridge(z, residual[mask]) if settings.ridge else None
        if ridge is not None:
            by_family[str(family)] = ridge
            residual[mask] = residual[mask] - ridge_correction(ridge, z)
    out["_ridge"] = by_family
    local: dict[str, dict[str, list]] = {}
    for name in np.unique(reg):
        mask = reg == name
        local[str(name)] = {
            "coords": np.round(np.vstack([c for k, c in coords if k == name]), 4).tolist(),
            "residual": np.round(residual[mask], 5).tolist(),
        }
    out["_local"] = local if settings.local_scale > 0 else {}
    out["_settings"] = settings.as_dict()
    return out


def local_residual(calibration: dict[str, Any], key: str, query: np.ndarray) -> np.ndarray:
    """The calibration rows' leftover log-efficiency error near each question (0 where none is near):
    inverse-distance mean over the nearest rows of the regime, fading with the distance to the nearest."""
    entry = (calibration.get("_local") or {}).get(key)
    n = len(query)
    if not entry or not entry["residual"] or query.shape[1] == 0:
        return np.zeros(n)
    points = np.asarray(entry["coords"], dtype="float64")
    resid = np.asarray(entry["residual"], dtype="float64")
    if points.shape[1] != query.shape[1]:
        return np.zeros(n)
    dist = np.sqrt(((query[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    k = min(LOCAL_NEIGHBOURS, len(resid))
    nearest = (
        np.argpartition(dist, k - 1, axis=1)[:, :k]
        if len(resid) > k
        else np.tile(np.arange(len(resid)), (n, 1))
    )
    d = np.take_along_axis(dist, nearest, axis=1)
    w = 1.0 / (d + 0.25) ** 2
    mean = (w * resid[nearest]).sum(axis=1) / w.sum(axis=1)
    scale = float((calibration.get("_settings") or {}).get("local_scale", LOCAL_SCALE))
    return mean * np.exp(-d.min(axis=1) / scale) if scale > 0 else np.zeros(n)


def shift_for(calibration: dict[str, Any], key: str) -> dict[str, float] | None:
    """The most specific level of ``calibration`` for regime ``key`` (regime, family|pipe, GPU-wide)."""
    for candidate in (key, "|".join(key.split("|")[:3]), "|".join(key.split("|")[:2]), "*"):
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


ENGINE_GEMM_FAMILIES: tuple[str, ...] = ("gemm", "linear", "bmm")


def engine_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of a profiled feature table the op engine answers (tensor-dtype GEMMs and attention), as the
    calibration reads them: family, dtype, the shape's dimensions, latency_us. Empty when there are none."""
    from components.features.dims import parse_dims

    needed = {"family", "dtype", "duration_us", "shape_json"}
    import pandas as pd  # here, not at the top: answering a question imports this module, not pandas

    if table.empty or not needed <= set(table.columns):
        return pd.DataFrame()
    family = table["family"].astype(str)
    dtype = table["dtype"].astype(str)
    keep = (family.isin(ENGINE_GEMM_FAMILIES) & ~dtype.isin(["fp32", "fp64"])) | (family == "attention")
    rows = table[keep]
    if rows.empty:
        return pd.DataFrame()
    params = rows["params_json"] if "params_json" in rows else pd.Series("{}", index=rows.index)
    dims = parse_dims(rows["shape_json"], params)
    out = dims.assign(
        family=np.where(family[keep].isin(ENGINE_GEMM_FAMILIES), "gemm", family[keep]),
        dtype=dtype[keep].to_numpy(),
        latency_us=pd.to_numeric(rows["duration_us"], errors="coerce").to_numpy(),
    )
    out = out.drop(columns=[c for c in out.columns if out[c].isna().all()])
    if "B" in out:  # a batch of one is no batch (one product, one answer)
        out["B"] = out["B"].where(out["B"] != 1)
        if out["B"].isna().all():
            out = out.drop(columns="B")
    return out[np.isfinite(out["latency_us"]) & (out["latency_us"] > 0)].reset_index(drop=True)


def calibrate_engine(engine: Any, table: pd.DataFrame, spec: Any, home: Path) -> tuple[Path | None, int]:
    """Fit and store the op engine's calibration of ``spec`` from a profiled table's engine rows
    (``kernelcast calibrate``); (path, rows used), (None, 0) when the table has none."""
    rows = engine_rows(table)
    if rows.empty:
        return None, 0
    return save_calibration(home, spec.id, fit_calibration(engine, rows, spec)), len(rows)
