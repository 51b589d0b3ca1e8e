"""How the measured tier blends a question's candidate sites (``components.opmodel.measured``): an
inverse-distance blend of the nearest, and brackets along each site axis on the measured grid."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from components.opmodel.measured import Layout


def _k_smallest(x: np.ndarray, k: int) -> np.ndarray:
    """Column indices (rows, k), ascending, of each row's k smallest values; ties go to the leftmost column
    (the lower site: candidates are in site order)."""
    k = min(k, x.shape[1])
    kth = np.partition(x, k - 1, axis=1)[:, k - 1 : k]
    below = x < kth
    tied = x == kth
    take = below | (tied & (np.cumsum(tied, axis=1) <= k - below.sum(axis=1, keepdims=True)))
    return np.nonzero(take)[1].reshape(len(x), k)


def idw(
    d: np.ndarray,
    log_util: np.ndarray,
    own: np.ndarray,
    has_own: np.ndarray,
    layout: Layout,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse-distance blend of the ``layout.neighbours`` nearest eligible sites (distance ``d``, inf where
    not eligible); the own site alone where it was measured. Returns (blend, weights, their distances)."""
    k = min(layout.neighbours, d.shape[1])
    nearest = _k_smallest(d, k) if d.shape[1] > k else np.tile(np.arange(d.shape[1]), (len(d), 1))
    nd = np.take_along_axis(d, nearest, axis=1)
    nu = np.take_along_axis(log_util, nearest, axis=1)
    with np.errstate(divide="ignore"):
        weight = np.where(np.isfinite(nd), 1.0 / np.maximum(nd, 1e-6) ** layout.power, 0.0)
    own_pick = np.take_along_axis(own, nearest, axis=1)
    weight = np.where(has_own[:, None], own_pick.astype(float), weight)
    with np.errstate(invalid="ignore", divide="ignore"):
        blended = (weight * nu).sum(axis=1) / weight.sum(axis=1)
    return blended, weight, nd


def axis_brackets(
    coords: np.ndarray, q: np.ndarray, value: np.ndarray, eligible: np.ndarray, layout: Layout
) -> tuple[np.ndarray, np.ndarray]:
    """Per site axis, along the measured grid: the nearest eligible sites below and above the question that
    share its other coordinates, ``value`` linear in log2 of that axis between them; the axes' estimates
    averaged, each weighted by 1 / its bracket width in octaves (a tight bracket knows more). One-sided
    axes (the question past the grid's edge on it) hold the nearest site's value at a lower weight.
    coords: (Q, C, A) candidate sites, q: (Q, A), value/eligible: (Q, C). Returns (estimate, found)."""
    n_axes = q.shape[1]
    total = np.zeros(len(q))
    acc = np.zeros(len(q))
    for a in range(n_axes):
        others = [b for b in range(n_axes) if b != a]
        line = eligible.copy()
        for b in others:
            line &= np.abs(coords[:, :, b] - q[:, None, b]) < 1e-9
        delta = coords[:, :, a] - q[:, None, a]
        below = np.where(line & (delta < 0), delta, -np.inf)
        above = np.where(line & (delta > 0), delta, np.inf)
        lo, hi = below.argmax(axis=1), above.argmin(axis=1)
        d_lo = -np.take_along_axis(below, lo[:, None], axis=1)[:, 0]
        d_hi = np.take_along_axis(above, hi[:, None], axis=1)[:, 0]
        v_lo = np.take_along_axis(value, lo[:, None], axis=1)[:, 0]
        v_hi = np.take_along_axis(value, hi[:, None], axis=1)[:, 0]
        both = np.isfinite(d_lo) & np.isfinite(d_hi)
        with np.errstate(invalid="ignore", divide="ignore"):
            inside = v_lo + d_lo / (d_lo + d_hi) * (v_hi - v_lo)
        width = np.where(both, d_lo + d_hi, np.inf)
        if layout.one_sided > 0:
            nearest = np.where(d_lo <= d_hi, v_lo, v_hi)
            near_d = np.minimum(d_lo, d_hi)
            est = np.where(both, inside, nearest)
            width = np.where(both, width, near_d / layout.one_sided)
        else:
            est = inside
        w = np.where(np.isfinite(width), 1.0 / np.maximum(width, 1e-6) ** layout.axis_power, 0.0)
        if layout.smooth > 0:  # trust the axis whose two brackets agree: less curvature between them
            w = w / (layout.smooth + np.abs(np.where(both, v_hi - v_lo, 0.0)))
        acc += np.where(w > 0, w * est, 0.0)
        total += w
    found = total > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(found, acc / total, np.nan), found
