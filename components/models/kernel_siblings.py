"""The tabular model's transfer tier: a kernel another GPU measured, carried over by physics, for the op
families where the training side shows it beats the learned surface.

The tabular model learns one efficiency surface over shape and device features; a GPU it never saw gets that
surface's guess, whatever another GPU measured of the same kernel. Many held-out rows are kernels other GPUs
ran with the same harness (NeuSight's A100-PCIe-80GB linear/bmm/elementwise/norm/softmax kernels are
A100-PCIe-40GB's; its FP32 convs are the P4/P100/T4/V100 ones; the H800's GEMMs are the H100's). For those a
sibling's measured time times the ratio of the two GPUs' runtime bases (the model's own normaliser: roofline
time + launch floor) keeps the kernel's quirks (tile choice, wave quantisation, L2 residency) that the
surface smooths away -- the issue's sibling-physics rule at kernel level.

Whether it does is measured per op family and **standing** (``near``: a sibling of the asked GPU's
generation, same vendor and architecture; ``far``: only other generations measured the kernel), on the
training side only: the GPUs the fit's calibration slice holds out whole
(``TabularPredictor._calibration_mask``) are answered by the auxiliary surface fitted without them and by
their siblings among the other training GPUs; a (family, standing) carries only where the siblings' mean
per-GPU error is below the surface's on the same rows. Why per family: the rule that carries NeuSight's FP32
convs across generations at 15-25% carried AIConfigurator's attention rows between H100 and H200 at over
100% (branch aiter11: one switch for every family made four held-out GPUs worse).

A row is carried only when its GPU has no training row of its family (a GPU the model saw keeps the model's
answer); the nearest sibling (spec distance for the row's dtype) that measured the kernel answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SIBLINGS_FILE = "kernel_siblings.parquet"
CHOICE_FILE = "kernel_siblings.json"
KEYS = ("kernel_id", "device_id", "family")
STANDINGS = ("near", "far")
MIN_EVIDENCE_ROWS = 10  # a held-out GPU's (family, standing) with fewer carried rows is no evidence


@dataclass
class KernelSiblings:
    """Per (kernel, GPU): the median measured time and runtime base of its training rows; the (family,
    standing) pairs the training side chose to carry, and the evidence behind the choice."""

    table: pd.DataFrame  # kernel_id, device_id, family, duration_us, base_us
    chosen: dict[str, list[str]] = field(default_factory=dict)  # family -> standings carried
    evidence: dict[str, Any] = field(default_factory=dict)  # "family/standing" -> per-GPU MAPEs

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

    def carry(
        self, features: pd.DataFrame, base_us: np.ndarray, standing: str, only_unseen: bool = True
    ) -> np.ndarray:
        """Per asked row: the time carried from the nearest sibling of ``standing`` that measured its kernel
        (NaN where none does, or where the GPU has training rows of the family and ``only_unseen``)."""
        from components.devices.catalog import load_catalog
        from components.opmodel.tier_choice import near
        from components.opmodel.transfer import spec_distance

        n = len(features)
        out = np.full(n, np.nan)
        if not set(KEYS) <= set(features.columns) or self.table.empty:
            return out
        catalog = load_catalog()
        asked = pd.DataFrame({k: features[k].astype(str).to_numpy() for k in KEYS})
        has_dtype = "dtype" in features.columns
        asked["dtype"] = features["dtype"].astype(str).to_numpy() if has_dtype else np.full(n, "fp16")
        asked["base_x"], asked["row"] = np.asarray(base_us, dtype="float64"), np.arange(n)
        seen = set(zip(self.table["device_id"], self.table["family"], strict=True))
        measured = set(self.table["device_id"])
        for (device, kind), rows in asked.groupby(["device_id", "dtype"], sort=True):
            spec = catalog.get(device) if device in catalog else None
            if only_unseen:
                rows = rows[~rows["family"].map(lambda f, d=device: (d, f) in seen)]
            if spec is None or rows.empty:
                continue
            kin = {
                d: _distance(spec_distance, spec, catalog.get(d), kind)
                for d in measured
                if d != device and d in catalog and near(spec, catalog.get(d)) == (standing == "near")
            }
            if not kin:
                continue
            mine = self.table[self.table["device_id"].isin(kin)]
            mine = mine.assign(distance=mine["device_id"].map(kin)).sort_values(["kernel_id", "distance"])
            nearest = mine.drop_duplicates(["kernel_id", "family"]).rename(columns={"device_id": "sibling"})
            both = rows.merge(nearest, on=["kernel_id", "family"])
            both = both[both["base_x"] > 0]
            out[both["row"].to_numpy()] = (both["duration_us"] * both["base_x"] / both["base_us"]).to_numpy()
        return out

    def answer(self, features: pd.DataFrame, base_us: np.ndarray) -> np.ndarray:
        """Per asked row: the carried time of its family's chosen standing (near first), NaN where none."""
        out = np.full(len(features), np.nan)
        if not self.chosen or "family" not in features.columns:
            return out
        family = features["family"].astype(str).to_numpy()
        for standing in STANDINGS:
            wanted = np.array([standing in self.chosen.get(f, ()) for f in family], dtype=bool)
            todo = wanted & ~np.isfinite(out)
            if todo.any():
                part = self.carry(features.iloc[np.flatnonzero(todo)], np.asarray(base_us)[todo], standing)
                out[np.flatnonzero(todo)] = part
        return out

    def save(self, directory: Path) -> None:
        from components.common.atomic import atomic_write_bytes, atomic_write_text

        atomic_write_bytes(Path(directory) / SIBLINGS_FILE, self.table.to_parquet(index=False))
        choice = {"chosen": self.chosen, "evidence": self.evidence}
        atomic_write_text(Path(directory) / CHOICE_FILE, json.dumps(choice, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, directory: Path) -> KernelSiblings | None:
        path, choice = Path(directory) / SIBLINGS_FILE, Path(directory) / CHOICE_FILE
        if not path.is_file() or not choice.is_file():
            return None
        saved = json.loads(choice.read_text())
        return cls(pd.read_parquet(path), dict(saved.get("chosen", {})), dict(saved.get("evidence", {})))


def _distance(spec_distance: Any, x: Any, y: Any, dtype: str) -> float:
    """Spec distance for the row's dtype; the fp16 pipe's where the catalog has no pipe for it."""
    from components.physics.errors import PhysicsError

    try:
        return float(spec_distance(x, y, dtype))
    except PhysicsError:
        return float(spec_distance(x, y, "fp16"))


def held_devices(train: pd.DataFrame, in_cal: np.ndarray) -> list[str]:
    """The GPUs the calibration slice holds out whole (every training row of theirs in it)."""
    if "device_id" not in train.columns or not np.any(in_cal):
        return []
    device = train["device_id"].astype(str)
    share = pd.Series(np.asarray(in_cal, dtype=float), index=train.index).groupby(device.to_numpy()).mean()
    return sorted(share.index[share >= 1.0])


def choose(
    siblings: KernelSiblings,
    scope: pd.DataFrame,
    scope_base: np.ndarray,
    cal: pd.DataFrame,
    cal_base: np.ndarray,
    surface: np.ndarray,
    held: list[str],
) -> KernelSiblings:
    """``siblings`` with the (family, standing) pairs to carry, chosen on the held-out GPUs' rows ``cal``
    (answered by the auxiliary ``surface`` fitted without them, and by their siblings among the training
    rows of the other GPUs, ``scope`` minus ``held``): a far pair carries where, over the held-out GPUs
    that have evidence of it, the siblings' mean per-GPU MAPE is below the surface's on the same rows; a
    near pair carries unless that evidence shows it worse (as the op engine's transfer tier lets a relative
    of the generation answer alone where no training GPU shows the near standing: no held-out GPU has a
    sibling of its generation in NeuSight's families once A100-80GB is held out)."""
    keep = ~scope["device_id"].astype(str).isin(held).to_numpy()
    inner = KernelSiblings.fit(scope.loc[keep], np.asarray(scope_base)[keep])
    mine = cal["device_id"].astype(str).isin(held).to_numpy()
    true = pd.to_numeric(cal["duration_us"], errors="coerce").to_numpy(dtype="float64")
    evidence: dict[str, Any] = {}
    families = sorted(set(siblings.table["family"]))
    chosen: dict[str, list[str]] = {f: ["near"] for f in families}  # by default, and where evidence agrees
    if inner is None or not mine.any():
        return KernelSiblings(siblings.table, chosen, evidence)
    rows = cal.loc[mine].reset_index(drop=True)
    base, answer, true = np.asarray(cal_base)[mine], np.asarray(surface)[mine], true[mine]
    for standing in STANDINGS:
        carried = inner.carry(rows, base, standing, only_unseen=False)
        ok = np.isfinite(carried) & np.isfinite(answer) & (true > 0)
        frame = pd.DataFrame(
            {
                "device": rows["device_id"].astype(str).to_numpy()[ok],
                "family": rows["family"].astype(str).to_numpy()[ok],
                "sibling": np.abs(carried[ok] / true[ok] - 1),
                "surface": np.abs(answer[ok] / true[ok] - 1),
            }
        )
        per = frame.groupby(["family", "device"]).agg(
            n=("sibling", "size"), sibling=("sibling", "mean"), surface=("surface", "mean")
        )
        per = per[per["n"] >= MIN_EVIDENCE_ROWS].reset_index()
        for family, group in per.groupby("family", sort=True):
            evidence[f"{family}/{standing}"] = {
                str(r.device): [int(r.n), round(float(r.sibling), 4), round(float(r.surface), 4)]
                for r in group.itertuples()
            }
            better = group["sibling"].mean() < group["surface"].mean()
            if standing == "near" and not better:
                chosen[str(family)].remove("near")
            elif standing == "far" and better:
                chosen.setdefault(str(family), []).append("far")
    return KernelSiblings(siblings.table, {f: c for f, c in chosen.items() if c}, evidence)


def fit_for_tabular(
    predictor: Any, scope: pd.DataFrame, train: pd.DataFrame, in_cal: np.ndarray, auxiliary: Any
) -> KernelSiblings | None:
    """The tabular transfer model's siblings: every in-scope training row's kernel (not the subsample: a
    kernel is carried as measured), with the (family, standing) pairs chosen on the calibration slice's
    held-out GPUs against ``auxiliary`` (the surface fitted without them). None: nothing to carry."""
    from components.models.tabular_fit import predict_raw

    scope_base = predictor._runtime_base(scope)
    siblings = KernelSiblings.fit(scope, scope_base)
    held = held_devices(train, in_cal)
    if siblings is None or auxiliary is None or not held:
        return None
    cal = train.loc[np.asarray(in_cal, dtype=bool)]
    surface = predictor._runtime_from_raw(cal, predict_raw(auxiliary, predictor.design_matrix(cal), False))
    return choose(siblings, scope, scope_base, cal, predictor._runtime_base(cal), surface, held)


def apply(
    siblings: Any, features: Any, runtime: np.ndarray, base_us: np.ndarray, floor_us: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``runtime`` with the rows a chosen sibling answers replaced by its carried time (never below the
    roofline time: ``base - floor``), and per row whether it was."""
    if siblings is None or not isinstance(features, pd.DataFrame):
        return runtime, np.zeros(len(runtime), bool)
    carried = siblings.answer(features, base_us)
    hit = np.isfinite(carried)
    out = np.where(hit, np.maximum(carried, base_us - floor_us), runtime)
    return out, hit
