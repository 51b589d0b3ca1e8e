"""Roofline predictor: no training; runtime = max(compute at peak, ideal DRAM bytes / bandwidth).

It reads the analytical ``f_*`` columns of the feature table. ``mode="classic"`` uses the plain
roofline time (efficiency 1.0); ``mode="pipes"`` uses the pipe-aware bound (busiest-SM compute,
L2 tile re-reads). With ``use_measured_counters`` a row without an op formula (whole programs)
falls back to the ``m_*`` roofline built from its measured FLOP/byte counters -- keep it off for
the roofline-class-from-source task. A whole program left without a time gets the static SASS roofline
estimate from its source (``components.models.cuda_runtime``) or the reason there is none (``pred_note``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from components.common.lazy import lazy_module

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

PREDICTOR_FILE = "predictor.json"
MODES: tuple[str, ...] = ("classic", "pipes")


def _col(features: pd.DataFrame, name: str) -> pd.Series:
    if name not in features.columns:
        return pd.Series(np.nan, index=features.index, dtype="float64")
    return pd.to_numeric(features[name], errors="coerce").astype("float64")


@dataclass
class RooflinePredictor:
    mode: str = "classic"
    use_measured_counters: bool = True
    family: str = field(default="roofline", init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"roofline mode must be one of {MODES}, not {self.mode!r}")

    @property
    def targets(self) -> tuple[str, ...]:
        return ("duration_us", "achieved_gbps", "gflops", "arith_intensity", "roofline_class")

    @property
    def trained_on(self) -> frozenset[str]:
        return frozenset()

    def fit(self, features: pd.DataFrame) -> RooflinePredictor:
        return self  # nothing to learn

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        time_col = "f_roofline_time_us" if self.mode == "classic" else "f_pipes_time_us"
        time_us = _col(features, time_col)
        flops, dram = _col(features, "f_flops"), _col(features, "f_dram_bytes_min")
        bound = (
            features["f_bound"].astype("string")
            if "f_bound" in features.columns
            else pd.Series(pd.NA, index=features.index, dtype="string")
        )
        if self.use_measured_counters:
            fallback = time_us.isna()
            time_us = time_us.where(~fallback, _col(features, "m_roofline_time_us"))
            flops = flops.where(~fallback, _col(features, "m_flops"))
            dram = dram.where(~fallback, _col(features, "m_dram_bytes"))
            if "m_bound" in features.columns:
                bound = bound.where(~fallback, features["m_bound"].astype("string"))
        notes = pd.Series(pd.NA, index=features.index, dtype="string")
        if time_us.isna().any():
            # Whole programs (no op formula): the static SASS roofline estimate, the tabular family's own,
            # or the stated reason there is none -- from source, so the bolet task keeps its counters unread.
            from components.models.cuda_runtime import program_runtime

            runtime = program_runtime(features[time_us.isna()])
            time_us.loc[runtime.index] = runtime["pred_duration_us"].to_numpy(dtype="float64")
            notes.loc[runtime.index] = runtime["pred_note"].to_numpy()
        seconds = time_us * 1e-6
        out = pd.DataFrame(index=features.index)
        out["pred_duration_us"] = time_us  # efficiency 1.0: the kernel runs at its roofline
        out["pred_achieved_gbps"] = dram / seconds / 1e9
        out["pred_gflops"] = flops / seconds / 1e9
        out["pred_arith_intensity"] = flops / dram
        out["pred_roofline_class"] = bound
        if notes.notna().any():
            out["pred_note"] = notes
        return out

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        spec = {"family": self.family, "mode": self.mode, "use_measured_counters": self.use_measured_counters}
        (directory / PREDICTOR_FILE).write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, directory: Path) -> RooflinePredictor:
        spec = json.loads((Path(directory) / PREDICTOR_FILE).read_text())
        if spec.get("family") != "roofline":
            raise ValueError(
                f"{directory}: predictor.json is for family {spec.get('family')!r}, not 'roofline'"
            )
        return cls(
            mode=spec.get("mode", "classic"),
            use_measured_counters=bool(spec.get("use_measured_counters", True)),
        )
