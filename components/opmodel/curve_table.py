"""The measured curves of the op families without a measured-tier layout (MoE), as the transfer tier reads a
relative's own answer from them: sites (every key but the curve axis) matched exactly, the curve axis (MoE:
the tokens T) interpolated in log efficiency against log size and held past an end for ``HOLD_OCTAVES``.

Where no site of the relative matches (a model's experts, hidden or intermediate size it never ran in that
dtype: L40S's int4_wo Llama-4 layers, E = 16 and 128 with top-1, are in neither H100's nor H200's int4_wo
tables), ``nearest=True`` reads the nearest site of the same routing distribution instead -- nearest in
octaves of experts, top-k, hidden and intermediate size, TP and EP -- at the same routed tokens per expert
(``T * topk / E``), its efficiency against the roofline held (as ``reach`` holds a GEMM's past its sites):
the question's own roofline on the relative over that efficiency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.physics import roofline as physics

pd = lazy_module("pandas")

CURVE_FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    # families without a measured-tier layout: (site keys matched exactly, curve axis interpolated in log)
    "moe": (("E", "topk", "H", "I", "tp", "ep", "distribution"), "T"),
}
MOE_DEFAULT_DISTRIBUTION = "balanced"
HOLD_OCTAVES = 1.0  # a curve's boundary efficiency held this far past its end
LABELS = ("distribution",)  # site keys that are names, not sizes


def shape_keys(family: str) -> tuple[str, ...]:
    required, optional = physics.SHAPE_KEYS[family]
    return (*required, *optional)


class CurveTable:
    """Measured rows of a family without a measured-tier layout (MoE): sites matched exactly, the curve axis
    interpolated in log efficiency against log size, held past an end for ``HOLD_OCTAVES``."""

    def __init__(self, family: str, frame: pd.DataFrame, spec: Any, dtype: str) -> None:
        keys, axis = CURVE_FAMILIES[family]
        self.family, self.keys, self.axis = family, keys, axis
        frame = frame[(frame[axis] >= 1)].sort_values([*keys, axis])
        shape = {k: frame[k].to_numpy(dtype="float64") for k in shape_keys(family) if k in frame}
        roof = physics.roofline(family, dtype, shape, spec)
        self.log_util = np.log(
            np.clip(roof.time_us / frame["latency_us"].to_numpy(dtype="float64"), 1e-6, 1.0)
        )
        self.log_c = np.log2(frame[axis].to_numpy(dtype="float64"))
        self.latency = frame["latency_us"].to_numpy(dtype="float64")
        site = _site_labels({k: frame[k].to_numpy() for k in keys})
        # each site's row positions, ascending (one grouping pass: a scan per site was quadratic)
        grouped = pd.Series(np.arange(len(site))).groupby(site, sort=False).indices
        self.sites: dict[str, np.ndarray] = {str(name): np.sort(idx) for name, idx in grouped.items()}
        # per site (sorted by name): its label keys' names and its size keys' octaves (``nearest``)
        self.site_names = np.array(sorted(self.sites), dtype=object)
        first = [self.sites[name][0] for name in self.site_names]
        self.sizes = [k for k in keys if k not in LABELS]
        self.site_octaves = np.column_stack(
            [np.log2(frame[k].to_numpy(dtype="float64")[first]) for k in self.sizes]
        )
        tags = [frame[k].to_numpy() for k in keys if k in LABELS]  # one column read, not a row read per site
        self.site_tags = ["|".join(str(tag[i]) for tag in tags) for i in first]

    def resolve(
        self, shape: dict[str, Any], roof_time_us: np.ndarray, nearest: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: the relative's time (NaN: none), exact hits, and answers read from the nearest site
        (``nearest``: where no site matches)."""
        n = len(roof_time_us)
        out, exact, near = np.full(n, np.nan), np.zeros(n, bool), np.zeros(n, bool)
        defaults = {"tp": 1.0, "ep": 1.0, "distribution": MOE_DEFAULT_DISTRIBUTION}
        columns = {
            k: np.broadcast_to(np.asarray(shape.get(k, defaults.get(k))), (n,))
            for k in self.keys
            if k in shape or k in defaults
        }
        if len(columns) < len(self.keys):
            return out, exact, near
        q_site = _site_labels(columns)
        q_c = np.log2(np.maximum(np.broadcast_to(np.asarray(shape[self.axis], dtype="float64"), (n,)), 1e-9))
        for name in pd.unique(q_site):
            rows = np.flatnonzero(q_site == name)
            idx, shift = self.sites.get(str(name)), 0.0
            borrowed = idx is None
            if borrowed and nearest:
                idx, shift = self._nearest({k: v[rows[0]] for k, v in columns.items()})
                near[rows] = idx is not None
            if idx is None:
                continue
            c, u = self.log_c[idx], self.log_util[idx]
            q = q_c[rows] + shift
            inside = (q >= c[0] - HOLD_OCTAVES) & (q <= c[-1] + HOLD_OCTAVES)
            util = np.exp(np.interp(q, c, u))
            out[rows] = np.where(inside, roof_time_us[rows] / util, np.nan)
            near[rows] &= inside
            if borrowed:  # another site's rows: no exact hit
                continue
            pos = np.clip(np.searchsorted(c, q_c[rows]), 0, len(c) - 1)
            hit = np.abs(c[pos] - q_c[rows]) < 1e-9
            out[rows[hit]] = self.latency[idx][pos[hit]]
            exact[rows[hit]] = True
        return out, exact, near

    def _nearest(self, asked: dict[str, Any]) -> tuple[np.ndarray | None, float]:
        """The rows of the site nearest the asked one (same labels; fewest summed octaves over the size
        keys, the first by name on a tie) and the curve-axis shift (octaves) that puts the question at the
        same routed tokens per expert there (``T * topk / E``)."""
        tag = "|".join(str(asked[k]) for k in self.keys if k in LABELS)
        same = np.flatnonzero(np.array([t == tag for t in self.site_tags], dtype=bool))
        if not len(same):
            return None, 0.0
        q = np.log2(np.array([float(asked[k]) for k in self.sizes]))
        distance = np.abs(self.site_octaves[same] - q).sum(axis=1)
        best = same[int(np.argmin(distance))]
        per = {k: self.site_octaves[best][i] - q[i] for i, k in enumerate(self.sizes)}
        shift = per.get("E", 0.0) - per.get("topk", 0.0) if self.family == "moe" else 0.0
        return self.sites[str(self.site_names[best])], float(shift)


def _site_labels(columns: dict[str, np.ndarray]) -> np.ndarray:
    """One text key per row of the site columns (sizes as floats: 64 and 64.0 are one size). The distinct
    rows are found first and only they are turned into text (a table holds ~60k rows, a few hundred
    sites); a question's few rows are turned into text directly (``_row_labels``: the same keys)."""
    n = len(next(iter(columns.values()), ()))
    direct = _row_labels(columns) if 0 < n <= DIRECT_ROWS else None
    if direct is not None:
        return direct
    frame = pd.DataFrame(
        {
            k: np.asarray(v).astype(str) if k in ("distribution",) else np.asarray(v, dtype="float64")
            for k, v in columns.items()
        }
    )
    codes, uniques = pd.MultiIndex.from_frame(frame).factorize()
    parts = [
        np.asarray(uniques.get_level_values(i)).astype(str)
        if k in ("distribution",)
        else np.asarray(uniques.get_level_values(i), dtype="float64").astype(str)
        for i, k in enumerate(columns)
    ]
    labels = parts[0].astype(object)
    for part in parts[1:]:
        labels = labels + "|" + part.astype(object)
    return labels[codes] if len(codes) else np.zeros(0, dtype=object)


DIRECT_ROWS = 4096  # at most this many rows: labelled row by row (factorizing them cost ~50x more)


def _row_labels(columns: dict[str, np.ndarray]) -> np.ndarray | None:
    """``_site_labels``' keys made row by row, without finding the distinct rows first (a lattice's or a
    group's few rows: pandas' factorizing of a handful of rows cost more than the rest of the question);
    None where a size is NaN or -0.0, which factorizing maps to another row's key."""
    parts = []
    for k, v in columns.items():
        if k in ("distribution",):
            parts.append(np.asarray(v).astype(str).astype(object))
            continue
        x = np.asarray(v, dtype="float64")
        if np.isnan(x).any() or (np.signbit(x) & (x == 0)).any():
            return None
        parts.append(x.astype(str).astype(object))
    labels = parts[0]
    for part in parts[1:]:
        labels = labels + "|" + part
    return labels
