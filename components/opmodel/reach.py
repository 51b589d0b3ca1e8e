"""Past a relative's reach: the transfer tier's answer where the relative's measured tier has none.

A relative's measured tier answers near its own kernels only (sites within its gate, a curve held one octave
past its ends: ``measured.py``). Past that, the transfer tier would fall to the spec tier, and the monotone
envelope (``envelope.py``), whose lattice spans 1 .. 2^17 per GEMM axis, then mixes the two tiers: a spec
answer at a tiny or huge lattice point lifts or lowers every transfer answer beside it (H200 int8 GEMMs from
A100 and L40S: 21.8% raw, 62.6% enveloped). Here the question is instead projected into the relative's
measured extent (per categorical group: every site axis and the curve clamped to the span its sites cover),
answered there, and carried back to the asked size by physics with the efficiency held against the base time
(roofline + the regime's latency floor): ``t(s) = t(c) * base(s) / base(c)``. The held answer is continuous
with the clamped point's, non-decreasing along every clamped axis (only ``base(s)`` moves), never below the
latency floor's share, and scales with the GPU's peaks like any carried answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.physics import roofline as physics


def extents(table: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per category code of a ``measured.SiteTable``: (low, high) log2 of each site axis then of the curve,
    over the sites of that category."""
    out = {}
    for code in np.unique(table.site_cat):
        mask = table.site_cat == code
        low = np.append(table.site_coords[mask].min(axis=0), table.curve_lo[mask].min())
        high = np.append(table.site_coords[mask].max(axis=0), table.curve_hi[mask].max())
        out[int(code)] = (low, high)
    return out


def project(table: Any, shape: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """``shape`` with every site axis and the curve clamped into the table's measured extent of the row's
    category (rows of a category the table never measured keep their sizes: the table has no answer)."""
    from components.opmodel.measured import _question_columns

    columns = _question_columns(table.family, shape, n, table.dtype)
    codes = table._category_codes(columns, n)
    axes = [*table.layout.site_axes, table.layout.curve_axis]
    logs = np.log2(np.column_stack([np.asarray(columns[a], dtype="float64") for a in axes]))
    for code, (low, high) in extents(table).items():
        rows = codes == code
        logs[rows] = np.clip(logs[rows], low, high)
    sizes = 2.0**logs
    out = {k: np.array(np.broadcast_to(np.asarray(v), (n,))) for k, v in shape.items()}
    for i, axis in enumerate(table.layout.site_axes):
        out[axis] = np.where(np.isfinite(codes), sizes[:, i], out[axis])
    curve = np.where(np.isfinite(codes), sizes[:, -1], np.nan)
    if table.family == "gemm":
        out["M"] = np.where(np.isfinite(curve), curve, out["M"])
    elif table.family == "attention":  # the curve is S (= KV) in prefill, KV in decode
        decode = columns["phase"] == "decode"
        out["KV"] = np.where(np.isfinite(curve), curve, out["KV"])
        out["S"] = np.where(np.isfinite(curve) & ~decode, curve, out["S"])
    return out


def held_answer(
    table: Any,
    shape: dict[str, np.ndarray],
    roof_time_us: np.ndarray,
    floor_us: float,
) -> np.ndarray:
    """The relative's runtime at ``shape`` (rows past its reach) from its answer at the shape projected into
    its measured extent, efficiency against ``roofline + floor_us`` held (NaN where even the projection has
    no answer: a category it never measured). ``roof_time_us``: the roofline of ``shape`` on the relative."""
    n = len(roof_time_us)
    if table is None or n == 0:
        return np.full(n, np.nan)
    inside = project(table, shape, n)
    required, optional = physics.SHAPE_KEYS[table.family]
    numeric = {k: v for k, v in inside.items() if k in (*required, *optional)}
    roof_c = physics.roofline(table.family, table.dtype, numeric, table.spec, table.kv_dtype).time_us
    at_c = table.resolve(inside, roof_c).duration_us
    return at_c * (roof_time_us + floor_us) / (roof_c + floor_us)


def windowless(table: Any, shape: dict[str, np.ndarray], n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Attention rows with a sliding window (W > 0) whose (phase, D, W) group the table never measured, and
    ``shape`` restated without the window: W = 0, a decode's KV cut to the window (``min(KV, W)``: the keys
    the windowed kernel reads), a prefill's S and KV kept. A decode within its window is the full kernel at
    the same KV (H100 and H200 measured both: median APE 0.01-0.15 at W = 128, 1024, 8192), one past it the
    full kernel at KV = W times the roofline ratio (0.09-0.25; at the full KV: 0.31-0.48). The caller
    answers the restated rows and carries them back by the roofline ratio (the window's fewer pairs)."""
    from components.opmodel.measured import _question_columns

    rows = np.zeros(n, bool)
    if table.family != "attention" or "W" not in shape:
        return rows, shape
    columns = _question_columns(table.family, shape, n, table.dtype)
    window = np.asarray(columns["W"], dtype="float64")
    rows = (window > 0) & ~np.isfinite(table._category_codes(columns, n))
    decode = columns["phase"] == "decode"
    kv = np.asarray(columns["KV"], dtype="float64")
    out = {k: np.array(np.broadcast_to(np.asarray(v), (n,))) for k, v in shape.items()}
    out["KV"] = np.where(rows & decode, np.minimum(kv, np.where(window > 0, window, kv)), out["KV"])
    out["W"] = np.where(rows, 0, out["W"])
    return rows, out
