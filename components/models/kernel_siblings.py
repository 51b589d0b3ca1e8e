"""The tabular model's transfer tier: a kernel a GPU of the asked GPU's generation measured, carried over by
physics.

The tabular model learns one efficiency surface over shape and device features; a GPU it never saw gets that
surface's guess, whatever a sibling measured. Many held-out rows are kernels another GPU of the same
generation ran (NeuSight's A100-PCIe-80GB linear/bmm/elementwise/norm/softmax kernels are A100-PCIe-40GB's;
the H800's GEMMs are the H100's): for those the sibling's measured time, times the ratio of the two GPUs'
runtime bases (the model's own normaliser: roofline time + launch floor), keeps the kernel's quirks (tile
choice, wave quantisation, L2 residency) that the surface smooths away -- the issue's sibling-physics rule at
kernel level, as the op engine's transfer tier does for its families (``opmodel/transfer.py``: a relative of
the generation answers alone by plain physics, no correction, when nothing shows otherwise).

A row is carried only when its GPU has no measured row of its family in training (a GPU the model saw keeps
the model's answer) and a GPU of its generation (same vendor and architecture, ``tier_choice.near``) measured
its kernel within ``MAX_DISTANCE``; the nearest such GPU by spec distance answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SIBLINGS_FILE = "kernel_siblings.parquet"
# the farthest sibling carried (``opmodel.transfer.spec_distance``): on the training side of the gate's
# unseen-gpu folds (their held-out GPUs excluded), same-generation pairs within 1.1-1.3 carry their shared
# kernels at 19-21% (H100 <-> H200), pairs at 2.2-2.5 at 23-47% (A40 <-> A100, L20 <-> RTX 6000 Ada), at
# 4.7-4.9 (H20 <-> H100/H200) 31-49%, at 10 (P4 <-> P100) 49-133%: past 2 the learned surface does better
MAX_DISTANCE = 2.0
KEYS = ("kernel_id", "device_id", "family")


@dataclass
class KernelSiblings:
    """Per (kernel, GPU): the median measured time and the median runtime base of its training rows."""

    table: pd.DataFrame  # kernel_id, device_id, family, duration_us, base_us

    @classmethod
    def fit(cls, train: pd.DataFrame, base_us: np.ndarray) -> KernelSiblings | None:
        """From the training rows and their runtime bases (None without kernel ids or GPUs)."""
        if not set(KEYS) <= set(train.columns):
            return None
        frame = pd.DataFrame({k: train[k].astype(str).to_numpy() for k in KEYS})
        frame["duration_us"] = pd.to_numeric(train["duration_us"], errors="coerce").to_numpy(dtype="float64")
        frame["base_us"] = np.asarray(base_us, dtype="float64")
        ok = (frame["duration_us"] > 0) & (frame["base_us"] > 0)
        table = frame[ok].groupby(list(KEYS), sort=True).median().reset_index()
        return cls(table) if len(table) else None

    def carry(self, features: pd.DataFrame, base_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per asked row: the carried time (NaN where no sibling answers) and the sibling GPU ("" where
        none)."""
        from components.devices.catalog import load_catalog
        from components.opmodel.tier_choice import near
        from components.opmodel.transfer import spec_distance

        n = len(features)
        out, source = np.full(n, np.nan), np.full(n, "", dtype=object)
        if not set(KEYS) <= set(features.columns) or self.table.empty:
            return out, source
        catalog = load_catalog()
        asked = pd.DataFrame({k: features[k].astype(str).to_numpy() for k in KEYS})
        asked["base_x"], asked["row"] = np.asarray(base_us, dtype="float64"), np.arange(n)
        seen = set(zip(self.table["device_id"], self.table["family"], strict=True))
        for device in sorted(set(asked["device_id"])):
            spec = catalog.get(device) if device in catalog else None
            if spec is None:
                continue
            rows = asked[
                (asked["device_id"] == device) & ~asked["family"].map(lambda f, d=device: (d, f) in seen)
            ]
            kin = {
                d: spec_distance(spec, catalog.get(d), "fp16")
                for d in set(self.table["device_id"])
                if d != device and d in catalog and near(spec, catalog.get(d))
            }
            kin = {d: v for d, v in kin.items() if v <= MAX_DISTANCE}
            if rows.empty or not kin:
                continue
            mine = self.table[self.table["device_id"].isin(kin)]
            mine = mine.assign(distance=mine["device_id"].map(kin)).sort_values(["kernel_id", "distance"])
            nearest = mine.drop_duplicates(["kernel_id", "family"]).rename(columns={"device_id": "sibling"})
            both = rows.merge(nearest, on=["kernel_id", "family"])
            both = both[both["base_x"] > 0]
            out[both["row"]] = both["duration_us"] * both["base_x"] / both["base_us"]
            source[both["row"]] = both["sibling"].to_numpy()
        return out, source

    def save(self, directory: Path) -> None:
        from components.common.atomic import atomic_write_bytes

        atomic_write_bytes(Path(directory) / SIBLINGS_FILE, self.table.to_parquet(index=False))

    @classmethod
    def load(cls, directory: Path) -> KernelSiblings | None:
        path = Path(directory) / SIBLINGS_FILE
        return cls(pd.read_parquet(path)) if path.is_file() else None


def apply(
    siblings: Any, features: Any, runtime: np.ndarray, base_us: np.ndarray, floor_us: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``runtime`` with the rows a sibling answers replaced by its carried time (never below the roofline
    time: ``base - floor``), and per row whether it was."""
    if siblings is None or not isinstance(features, pd.DataFrame):
        return runtime, np.zeros(len(runtime), bool)
    carried, _ = siblings.carry(features, base_us)
    hit = np.isfinite(carried)
    out = np.where(hit, np.maximum(carried, base_us - floor_us), runtime)
    return out, hit
