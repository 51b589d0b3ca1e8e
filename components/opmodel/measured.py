"""The measured tier: a GPU's own measured kernels, interpolated in efficiency space.

The way upstream (AIConfigurator's ``perf_interp``, docs/design/perf_interp_design.md) resolves its tables:
measured kernels are *sites*, each owning a *curve* along one axis -- GEMM: the (N, K) shape owns an M sweep;
attention: the (H, HKV, D, window, batch) configuration owns a sequence sweep (S = KV prefill, KV decode). The
interpolated quantity is the efficiency ``util = roofline time / measured time`` (smooth and bounded), and
``runtime = roofline(question) / util``:

1. exact hit (the site and the curve point were measured) -> the measured median, verbatim; 2. the question's
  site was measured -> its own curve, linear in log(curve axis); 3. an unmeasured site -> bracketed along each
  site axis on the measured grid (the nearest covering sites below and above it that share its other site
  coordinates, linear in log2 of that axis; the axes' estimates weighted by 1 / bracket width and by how well
  the two brackets agree), or, where no axis brackets it, an inverse-distance blend (in log2 of the site axes)
  of the nearest covering sites; only sites within ``gate`` octaves; 4. past a curve's end by at most
  ``hold`` octaves -> the boundary efficiency held; farther, or no site near -> no answer here (NaN): the
  engine falls through to the calibrated or spec tier.

Everything is array work over (questions x candidate sites): candidate sites are found by searches on the
sorted site grid, once per distinct question site (the nearest within the gate and the two nearest along each
site axis's line; where equally distant sites tie for a last place, the former whole-category search answers,
so its ``np.argpartition`` decides as before), and curve lookups are one ``np.searchsorted`` over all sites'
keys. The layouts are chosen on an inner split of each GPU's training sites by
``benchmarks/measured_tier_selection.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from components.physics import roofline as physics


@dataclass(frozen=True)
class Layout:
    """How one family's measured rows form sites and curves."""

    categorical: tuple[str, ...]  # must match exactly (beyond device/dtype)
    site_axes: tuple[str, ...]  # blended across in log2 space
    curve_axis: str  # the sweep each site owns
    neighbours: int  # sites blended for an unmeasured site
    power: float  # inverse-distance power
    gate: float = 2.0  # octaves: farther sites do not transfer
    hold: float = 1.0  # octaves past a curve's end where its boundary efficiency is held
    blend: str = "idw"  # "axes": bracket along each site axis on the measured grid first, IDW where none
    axis_power: float = 1.0  # weight of an axis estimate: 1 / bracket width ** axis_power
    one_sided: float = 0.0  # > 0: an axis bracketed on one side only holds its nearest site, at this weight
    idw_share: float = 0.0  # "axes": share of the inverse-distance blend mixed into a bracketed answer
    smooth: float = 0.0  # > 0: an axis's weight also / (smooth + |log-util step across its bracket|)
    space: str = "util"  # what "axes" interpolates between sites: log util or log latency


LAYOUTS: dict[str, Layout] = {
    # chosen on an inner split of each GPU's training sites (benchmarks/measured_tier_selection.py): bracket
    # along N and along K on the measured grid (1 / width weights, more to the axis whose brackets agree), IDW
    # only where no axis brackets
    "gemm": Layout(
        ("block_aligned",), ("N", "K"), "M", neighbours=4, power=2.0, gate=3.0, blend="axes", smooth=0.01
    ),
    # attention: batch, query heads and KV heads are site axes, each bracketed at the others' values
    # (inner split: 10.2% vs 24.6% for the nearest-batch blend)
    "attention": Layout(
        ("phase", "D", "W"),
        ("B", "H", "HKV"),
        "curve",
        neighbours=2,
        power=1.0,
        gate=3.0,
        blend="axes",
        smooth=0.01,
    ),
}
KEY_STRIDE = 64.0  # > log2 of any curve value + hold: keys of different sites never interleave


@dataclass
class Resolved:
    """Per question: the measured-tier runtime (NaN where it has no answer) and its support."""

    duration_us: np.ndarray
    exact: np.ndarray  # bool: a measured kernel, returned verbatim
    neighbours: np.ndarray  # int: measured sites the answer rests on (0 = no answer)
    distance: np.ndarray  # octaves to the nearest site used (0 = its own site)
    spread: np.ndarray  # relative spread (max-min)/median of the exact hit's repeats, NaN elsewhere


def attention_phase(s: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """prefill (S == KV), decode (S == 1) or chunk (anything else: no measured layout)."""
    return np.where(s == 1, "decode", np.where(s == kv, "prefill", "chunk")).astype(object)


BLOCK_SCALED = {"fp8_block": 128}  # dtype -> scale block edge: N or K off the block grid runs another kernel


def _with_curve(family: str, frame: pd.DataFrame, dtype: str = "") -> pd.DataFrame:
    if family == "gemm":
        # block-scaled GEMMs: a shape off the scale-block grid falls back to a kernel tens of times slower
        # (fp8_block on H100: N = 64 -> 90 us, N = 128 -> 4.4 us at M = 64), so the two never share efficiency
        block = BLOCK_SCALED.get(dtype)
        aligned = (
            ((frame["N"].to_numpy() % block == 0) & (frame["K"].to_numpy() % block == 0))
            if block
            else np.ones(len(frame), bool)
        )
        frame = frame.assign(block_aligned=aligned.astype("int64"))
    if family == "attention":
        frame = frame.assign(curve=np.where(frame["phase"].to_numpy() == "decode", frame["KV"], frame["S"]))
        frame = frame.assign(W=frame["W"] if "W" in frame else 0)
    return frame


def _empty(n: int) -> Resolved:
    return Resolved(
        np.full(n, np.nan), np.zeros(n, bool), np.zeros(n, "int64"), np.full(n, np.nan), np.full(n, np.nan)
    )


def _question_columns(family: str, shape: dict[str, np.ndarray], n: int, dtype: str) -> dict[str, np.ndarray]:
    """The question columns ``_with_curve`` adds to a frame, as plain arrays (no DataFrame per call)."""
    columns = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in shape.items()}
    if family == "gemm":
        block = BLOCK_SCALED.get(dtype)
        aligned = ((columns["N"] % block == 0) & (columns["K"] % block == 0)) if block else np.ones(n, bool)
        columns["block_aligned"] = aligned.astype("int64")
    if family == "attention":
        columns["phase"] = attention_phase(columns["S"], columns["KV"])
        columns["curve"] = np.where(columns["phase"] == "decode", columns["KV"], columns["S"])
        if "W" not in columns:
            columns["W"] = np.zeros(n, "int64")
    return columns


LINE_SLACK = 1e-6  # octaves: searches reach this far past a radius; the exact distance then decides
SITE_KEY_STRIDE = 4096.0  # > the span of log2 of any site coordinate (+ gate): categories never interleave


class SiteTable:
    """The measured kernels of one (family, device, dtype[, kv_dtype]) as sites + curves."""

    def __init__(
        self,
        family: str,
        frame: pd.DataFrame,
        spec: Any,
        dtype: str,
        kv_dtype: str | None,
        layout: Layout | None = None,
    ) -> None:
        layout = layout or LAYOUTS[family]
        self.family, self.layout, self.spec, self.dtype, self.kv_dtype = family, layout, spec, dtype, kv_dtype
        frame = _with_curve(family, frame, dtype)
        dims = [*layout.site_axes, layout.curve_axis]
        positive = np.all(frame[dims].to_numpy(dtype="float64") >= 1, axis=1)
        if family == "attention":
            positive &= frame["phase"].isin(["prefill", "decode"]).to_numpy()
            positive &= (
                (frame["phase"] == "prefill") & (frame["S"] == frame["KV"]) | (frame["phase"] == "decode")
            ).to_numpy()
        frame = frame[positive]
        roof = physics.roofline(family, dtype, _shape_of(family, frame), spec, kv_dtype)
        latency = frame["latency_us"].to_numpy(dtype="float64")
        util = np.clip(roof.time_us / latency, 1e-6, 1.0)
        cats = _categories(frame, layout.categorical)
        site_cols = [cats.rename("_cat")] + [frame[a] for a in layout.site_axes]
        sites = pd.concat(site_cols, axis=1).drop_duplicates().sort_values(["_cat", *layout.site_axes])
        sites = sites.reset_index(drop=True)
        self.cat_codes = {c: i for i, c in enumerate(pd.unique(sites["_cat"]))}
        site_cat = sites["_cat"].map(self.cat_codes).to_numpy()
        self.site_coords = np.log2(sites[list(layout.site_axes)].to_numpy(dtype="float64"))
        # sites are sorted by (category, site axes): a *line* is a run of sites sharing the category and all
        # site coordinates but the last; sorted keys find the lines near a question and the sites near it on
        # each line (``_gated_candidates``)
        prefix = np.column_stack([site_cat, self.site_coords[:, :-1]])
        new_line = np.ones(len(prefix), bool)
        new_line[1:] = (prefix[1:] != prefix[:-1]).any(axis=1)
        line_of_site = np.cumsum(new_line) - 1
        self.line_start = np.flatnonzero(new_line)
        self.line_prefix = self.site_coords[self.line_start, :-1]
        # lines are sorted by (category, prefix coordinates): at depth j the lines sharing the category and
        # the first j prefix coordinates are a run (a group), sorted by prefix coordinate j within it
        line_ident = np.column_stack([site_cat[self.line_start], self.line_prefix])
        self.line_group: list[np.ndarray] = []  # depth j -> group id of each line
        self.group_first_line: list[np.ndarray] = []  # depth j -> first line of each group
        for depth in range(self.line_prefix.shape[1] + 1):
            starts = np.ones(len(line_ident), bool)
            starts[1:] = (line_ident[1:, : depth + 1] != line_ident[:-1, : depth + 1]).any(axis=1)
            self.line_group.append(np.cumsum(starts) - 1)
            self.group_first_line.append(np.flatnonzero(starts))
        self.depth_key = [
            self.line_group[j] * SITE_KEY_STRIDE + self.line_prefix[:, j]
            for j in range(self.line_prefix.shape[1])
        ]
        self.site_line_key = line_of_site * SITE_KEY_STRIDE + self.site_coords[:, -1]
        self.site_cat = site_cat.astype("int64")
        self._axis_lines: dict[int, tuple] = {}  # built on first use (_line_index)
        site_index = (
            pd.Series(np.arange(len(sites)), index=pd.MultiIndex.from_frame(sites))
            .reindex(pd.MultiIndex.from_frame(pd.concat(site_cols, axis=1)))
            .to_numpy()
        )
        logc = np.log2(frame[layout.curve_axis].to_numpy(dtype="float64"))
        order = np.lexsort((logc, site_index))
        self.keys = site_index[order] * KEY_STRIDE + logc[order]
        self.log_util = np.log(util[order])
        self.log_roof = np.log(roof.time_us[order])
        self.latency = latency[order]
        spread = (frame["latency_max_us"] - frame["latency_min_us"]).to_numpy(dtype="float64") / latency
        self.spread = spread[order]
        n_sites = len(sites)
        self.curve_lo = np.full(n_sites, np.inf)
        self.curve_hi = np.full(n_sites, -np.inf)
        np.minimum.at(self.curve_lo, site_index, logc)
        np.maximum.at(self.curve_hi, site_index, logc)
        # candidates of each categorical group, padded with -1
        counts = np.bincount(site_cat, minlength=len(self.cat_codes))
        width = int(counts.max()) if len(counts) else 0
        self.cat_sites = np.full((len(self.cat_codes), max(width, 1)), -1, dtype="int64")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        within = np.arange(n_sites) - starts[site_cat]
        self.cat_sites[site_cat, within] = np.arange(n_sites)
        self.n_rows = len(frame)

    def resolve(self, shape: dict[str, np.ndarray], roof_time_us: np.ndarray) -> Resolved:
        """The measured tier's answer per question (see the module docstring). Candidate sites are found
        per distinct question site by searches on the sorted site grid (the lines near it, then the run of
        each line near it), never against every site of its category: the same sites, in the same order, as
        the former algorithm (``_reference_resolve``) keeps, so the same answers."""
        layout = self.layout
        n = len(roof_time_us)
        out = _empty(n)
        if n == 0 or not len(self.keys):
            return out
        columns = _question_columns(self.family, shape, n, self.dtype)
        q_cat = self._category_codes(columns, n)
        rows = np.flatnonzero(np.isfinite(q_cat))
        if not len(rows):
            return out
        if self.family == "gemm" and "B" in columns:
            # batched products: no measured layout
            rows = rows[np.asarray(columns["B"], dtype="float64")[rows] == 1]
            if not len(rows):  # every question batched (the former code failed on the empty site set)
                return out
        q_coords = np.log2(
            np.column_stack([np.asarray(columns[a], dtype="float64")[rows] for a in layout.site_axes])
        )
        q_logc = np.log2(np.asarray(columns[layout.curve_axis], dtype="float64")[rows])
        site_key = np.column_stack([q_cat[rows], q_coords])
        distinct, inverse = _unique_rows(site_key)
        threshold = NEAREST_KEPT + 4 * len(layout.site_axes)
        every = np.arange(len(distinct))
        # the first ball of the nearest-site search: more sites in it than the threshold already settles it
        first = self._ball(distinct, every, NEAREST_RADII[0]) if NEAREST_RADII[0] < layout.gate else None
        many = first is not None and int(np.bincount(first[0], minlength=len(distinct)).max()) > threshold
        if many or max(int(self._within_counts(distinct, threshold).max()), 1) > threshold:
            # many sites within the gate: only the nearest and the line brackets can matter (_nearby_sites)
            cand, valid, dist, tied = self._kept_sites(distinct, first)
            out, tied_rows = self._answer(
                out,
                rows,
                q_coords,
                q_logc,
                roof_time_us,
                distinct,
                inverse,
                cand,
                valid,
                dist,
                selected=True,
                tied_sites=tied,
            )
            return self._former_where_tied(out, shape, roof_time_us, tied_rows, True)
        cand, valid, dist = self._gated_candidates(distinct)
        out, tied_rows = self._answer(
            out, rows, q_coords, q_logc, roof_time_us, distinct, inverse, cand, valid, dist
        )
        return self._former_where_tied(out, shape, roof_time_us, tied_rows, False)

    def _former_where_tied(
        self,
        out: Resolved,
        shape: dict[str, np.ndarray],
        roof_time_us: np.ndarray,
        tied: np.ndarray,
        kept: bool,
    ) -> Resolved:
        """The questions where equally distant sites compete for the last place of a selection (the
        NEAREST_KEPT nearest, the ``neighbours`` blended): answered by the former algorithm, whose
        ``np.argpartition`` decides which -- the same answers as before, not only the same rule."""
        if not len(tied):
            return out
        n = len(roof_time_us)
        sub = {k: np.broadcast_to(np.asarray(v), (n,))[tied] for k, v in shape.items()}
        former = self._reference_resolve(sub, roof_time_us[tied], kept=kept)
        for field in ("duration_us", "exact", "neighbours", "distance", "spread"):
            getattr(out, field)[tied] = getattr(former, field)
        return out

    def _category_codes(self, columns: dict[str, np.ndarray], n: int) -> np.ndarray:
        """Per question: the code of its categorical group (float, NaN where no site has it), as
        ``_categories`` + ``cat_codes`` give it, computed once per distinct combination."""
        names = self.layout.categorical
        if not names:
            code = self.cat_codes.get("")
            return np.full(n, np.nan if code is None else float(code))
        parts = []
        for c in names:
            values = np.asarray(columns[c])
            if c == "phase":
                parts.append(values.astype(str))
                continue
            if values.dtype.kind == "f" and not np.isfinite(values).all():
                # the text path's own failure (no integer for NaN/inf), not a silent wrong group
                frame = pd.DataFrame({k: np.asarray(columns[k]) for k in names})
                return _categories(frame, names).map(self.cat_codes).to_numpy(dtype="float64")
            parts.append(values.astype("int64"))
        # text keys once per distinct combination (phase by its code among the phases asked)
        texts: list[np.ndarray | None] = [None] * len(parts)
        for i, part in enumerate(parts):
            if part.dtype.kind != "i":
                texts[i], parts[i] = np.unique(part, return_inverse=True)
        combos, inverse = _unique_rows(np.column_stack(parts).astype("int64"))
        keys = [
            "|".join(str(v) if texts[i] is None else str(texts[i][v]) for i, v in enumerate(combo))
            for combo in combos.tolist()
        ]
        codes = np.array([self.cat_codes.get(key, np.nan) for key in keys], dtype="float64")
        return codes[inverse]

    def _gated_candidates(self, distinct: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U, W) candidate site indices (-1 pads), their validity and distance for each distinct question
        site (category code, log2 site coordinates): every site within the gate, in site order."""
        return _scatter(*self._ball(distinct, np.arange(len(distinct)), self.layout.gate), len(distinct))

    def _line_pairs(
        self, distinct: np.ndarray, which: np.ndarray, radius: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(question, line, half-width) of the lines that pass within ``radius`` (+ slack) of the distinct
        question sites ``which``: half-width = how far along the last axis a site of the line can lie. Found
        depth by depth: per group, the run of its lines within reach on the next prefix coordinate."""
        q = distinct[:, 1:]
        reach = radius + LINE_SLACK
        pair_q, group = which, distinct[which, 0].astype("int64")  # depth 0: the category's lines
        squares = np.zeros(len(which))
        for depth, key in enumerate(self.depth_key):
            centre = group * SITE_KEY_STRIDE + q[pair_q, depth]
            lo = np.searchsorted(key, centre - reach, side="left")
            hi = np.searchsorted(key, centre + reach, side="right")
            below = self.line_group[depth + 1]
            first = below[np.minimum(lo, len(below) - 1)]
            count = np.where(hi > lo, below[np.maximum(hi - 1, 0)] - first + 1, 0)
            index, group = _runs(np.arange(len(pair_q)), first, count)
            pair_q = pair_q[index]
            line = self.group_first_line[depth + 1][group]
            squares = squares[index] + (self.line_prefix[line, depth] - q[pair_q, depth]) ** 2
            near = squares <= reach**2
            pair_q, group, squares = pair_q[near], group[near], squares[near]
        return pair_q, group, np.sqrt(np.maximum(radius**2 - squares, 0.0))

    def _exact_within(
        self, distinct: np.ndarray, site_q: np.ndarray, site: np.ndarray, radius: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Distances (the formula every path uses) and whether each is within ``radius`` and the gate."""
        offset = self.site_coords[site] - distinct[site_q, 1:]
        dist = np.sqrt((offset**2).sum(axis=1))
        return dist, (dist <= radius) & (dist <= self.layout.gate)

    def _ball(
        self, distinct: np.ndarray, which: np.ndarray, radius: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat (question, site, distance) of the sites within ``radius`` of the question sites ``which``."""
        pair_q, pair_line, half = self._line_pairs(distinct, which, radius)
        centre = pair_line * SITE_KEY_STRIDE + distinct[pair_q, -1]
        lo = np.searchsorted(self.site_line_key, centre - half - LINE_SLACK, side="left")
        hi = np.searchsorted(self.site_line_key, centre + half + LINE_SLACK, side="right")
        site_q, site = _runs(pair_q, lo, hi - lo)
        dist, inside = self._exact_within(distinct, site_q, site, radius)
        return site_q[inside], site[inside], dist[inside]

    def _within_counts(self, distinct: np.ndarray, threshold: int | None = None) -> np.ndarray:
        """Per distinct question site: how many sites lie within the gate. On each line the sites within are
        one run along the last axis: the run's interior by search, only its ends by the exact distance.
        ``threshold``: only whether a count exceeds it matters -- a site whose runs hold no more sites than
        that gets their size (an upper bound, also not above the threshold) instead of its exact count."""
        gate = self.layout.gate
        pair_q, pair_line, half = self._line_pairs(distinct, np.arange(len(distinct)), gate)
        centre = pair_line * SITE_KEY_STRIDE + distinct[pair_q, -1]
        lo = np.searchsorted(self.site_line_key, centre - half - LINE_SLACK, side="left")
        hi = np.searchsorted(self.site_line_key, centre + half + LINE_SLACK, side="right")
        if threshold is not None:
            upper = np.bincount(pair_q, weights=hi - lo, minlength=len(distinct)).astype("int64")
            unsure = upper > threshold
            if not unsure.any():
                return upper
            keep = unsure[pair_q]
            pair_q, half, centre, lo, hi = pair_q[keep], half[keep], centre[keep], lo[keep], hi[keep]
            return np.where(unsure, self._run_counts(distinct, pair_q, half, centre, lo, hi), upper)
        return self._run_counts(distinct, pair_q, half, centre, lo, hi)

    def _run_counts(
        self,
        distinct: np.ndarray,
        pair_q: np.ndarray,
        half: np.ndarray,
        centre: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
    ) -> np.ndarray:
        """Exact within-gate counts from each (question, line) pair's run [lo, hi) of candidate sites."""
        gate = self.layout.gate
        inner = np.maximum(half - LINE_SLACK, 0.0)
        lo_in = np.clip(np.searchsorted(self.site_line_key, centre - inner, side="left"), lo, hi)
        hi_in = np.clip(np.searchsorted(self.site_line_key, centre + inner, side="right"), lo_in, hi)
        hi_in = np.where(half > LINE_SLACK, hi_in, lo_in)  # no sure interior: every site checked
        counts = np.bincount(pair_q, weights=hi_in - lo_in, minlength=len(distinct))
        edge_q, edge = _runs(
            np.concatenate([pair_q, pair_q]),
            np.concatenate([lo, hi_in]),
            np.concatenate([lo_in - lo, hi - hi_in]),
        )
        _, inside = self._exact_within(distinct, edge_q, edge, gate)
        counts += np.bincount(edge_q[inside], minlength=len(distinct))
        return counts.astype("int64")

    def _line_index(self, axis: int) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Sites sorted along ``axis`` within lines of equal category and other site coordinates: (line of a
        rounded (category, other coordinates) key, sorted site ids, sorted keys, line starts, line stops)."""
        if axis not in self._axis_lines:
            coords = self.site_coords
            others = [b for b in range(coords.shape[1]) if b != axis]
            ident = np.column_stack([self.site_cat, _rounded(coords[:, others])])
            order = np.lexsort((coords[:, axis], *[ident[:, j] for j in reversed(range(ident.shape[1]))]))
            ident = ident[order]
            new_line = np.ones(len(order), bool)
            new_line[1:] = (ident[1:] != ident[:-1]).any(axis=1)
            line = np.cumsum(new_line) - 1
            starts = np.flatnonzero(new_line)
            stops = np.append(starts[1:], len(order))
            lookup = {tuple(row): i for i, row in enumerate(ident[starts].tolist())}
            keys = line * SITE_KEY_STRIDE + coords[order, axis]
            self._axis_lines[axis] = (lookup, order, keys, starts, stops)
        return self._axis_lines[axis]

    def _line_picks(self, distinct: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat (question, site): the two nearest sites on each side of each question site along ``axis`` on
        the line through it (the same other coordinates), within the gate (``_nearby_sites``'s brackets)."""
        lookup, order, key, starts, stops = self._line_index(axis)
        others = [b for b in range(distinct.shape[1] - 1) if b != axis]
        ident = np.column_stack([distinct[:, 0].astype("int64"), _rounded(distinct[:, 1:][:, others])])
        line = np.array([lookup.get(tuple(row), -1) for row in ident.tolist()], dtype="int64")
        which = np.flatnonzero(line >= 0)
        line = line[which]
        centre = line * SITE_KEY_STRIDE + distinct[which, 1 + axis]
        below = np.searchsorted(key, centre, side="left")
        above = np.searchsorted(key, centre, side="right")
        position = np.concatenate([below - 1, below - 2, above, above + 1])
        owner = np.tile(which, 4)
        ok = (position >= np.tile(starts[line], 4)) & (position < np.tile(stops[line], 4))
        site_q, site = owner[ok], order[position[ok]]
        _, inside = self._exact_within(distinct, site_q, site, self.layout.gate)
        return site_q[inside], site[inside]

    def _kept_sites(
        self, distinct: np.ndarray, first: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
        """(U, W) candidates as ``_nearby_sites`` keeps them from the whole category, in site order: the
        NEAREST_KEPT nearest within the gate (ties to the lower site) and the line brackets of every axis.
        The nearest are searched within NEAREST_RADII first, within the whole gate only where those hold too
        few; ``first``: the ball of the first radius around every question site, when already found. Also
        returns which question sites had equally distant sites competing for the last of those places, at
        which distance, and whether one of them lies on a line through the question site."""
        n_distinct, n_sites = len(distinct), len(self.site_coords)
        gate = self.layout.gate
        picked_q, picked = [], []
        todo = np.arange(n_distinct)
        tied = np.zeros(n_distinct, bool)
        tie_distance = np.full(n_distinct, np.nan)
        tie_on_line = np.zeros(n_distinct, bool)
        for radius in [r for r in NEAREST_RADII if r < gate] + [gate]:
            if first is not None and radius == NEAREST_RADII[0]:  # already searched for every question
                site_q, site, dist = first
            else:
                site_q, site, dist = self._ball(distinct, todo, radius)
            cand, valid, dists = _scatter(np.searchsorted(todo, site_q), site, dist, len(todo))
            done = (valid.sum(axis=1) >= NEAREST_KEPT) | (radius >= gate)
            # the k nearest of those within the radius are the k nearest within the gate: all sites at
            # the k-th distance lie inside it, so ties still go to the lower site (the columns' order)
            ranked = np.where(valid[done], dists[done], np.inf)
            near = _k_smallest(ranked, NEAREST_KEPT)
            is_tied = _tied_at(ranked, NEAREST_KEPT)
            if is_tied.any():
                owners = todo[done][is_tied]
                tied[owners] = True
                kth = np.partition(ranked[is_tied], NEAREST_KEPT - 1, axis=1)[:, NEAREST_KEPT - 1]
                tie_distance[owners] = kth
                # a tied site on a line through the question could be an axis bracket: counts as deciding
                members = ranked[is_tied] == kth[:, None]
                offset = self.site_coords[np.maximum(cand[done][is_tied], 0)] - distinct[owners, None, 1:]
                on_line = (np.abs(offset) < 1e-9).sum(axis=2) == offset.shape[2] - 1
                tie_on_line[owners] = (members & on_line).any(axis=1)
            chosen = np.take_along_axis(cand[done], near, axis=1)
            owner = np.broadcast_to(todo[done][:, None], chosen.shape)
            picked_q.append(owner[chosen >= 0])
            picked.append(chosen[chosen >= 0])
            todo = todo[~done]
            if not len(todo):
                break
        for axis in range(distinct.shape[1] - 1):
            line_q, line_site = self._line_picks(distinct, axis)
            picked_q.append(line_q)
            picked.append(line_site)
        flat = np.unique(np.concatenate(picked_q) * n_sites + np.concatenate(picked))
        site_q, site = flat // n_sites, flat % n_sites
        dist, _ = self._exact_within(distinct, site_q, site, gate)
        return (*_scatter(site_q, site, dist, n_distinct), (tied, tie_distance, tie_on_line))

    def _reference_resolve(
        self, shape: dict[str, np.ndarray], roof_time_us: np.ndarray, kept: bool | None = None
    ) -> Resolved:
        """The former algorithm (pandas question frame, every site of the category a candidate, selections by
        ``np.argpartition``): ``resolve`` checks against it (tests/unit/test_measured_fast_resolve.py) and
        answers its tied questions by it. ``kept``: force the many-sites path (True) or the other (False), as
        the whole batch chose it."""
        layout = self.layout
        n = len(roof_time_us)
        out = _empty(n)
        if n == 0 or not len(self.keys):
            return out
        frame = pd.DataFrame({k: np.broadcast_to(np.asarray(v), (n,)) for k, v in shape.items()})
        if self.family == "attention":
            frame["phase"] = attention_phase(frame["S"].to_numpy(), frame["KV"].to_numpy())
        frame = _with_curve(self.family, frame, self.dtype)
        cats = _categories(frame, layout.categorical)
        q_cat = cats.map(self.cat_codes).to_numpy(dtype="float64")
        known = np.isfinite(q_cat)
        rows = np.flatnonzero(known)
        if not len(rows):
            return out
        if self.family == "gemm" and "B" in frame:
            rows = rows[frame["B"].to_numpy(dtype="float64")[rows] == 1]
            if not len(rows):
                return out
        q_coords = np.log2(frame.loc[rows, list(layout.site_axes)].to_numpy(dtype="float64"))
        q_logc = np.log2(frame.loc[rows, layout.curve_axis].to_numpy(dtype="float64"))
        site_key = np.column_stack([q_cat[rows], q_coords])
        distinct, inverse = np.unique(site_key, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        cand = self.cat_sites[distinct[:, 0].astype("int64")]  # (U, C)
        valid = cand >= 0
        offset = self.site_coords[np.where(valid, cand, 0)] - distinct[:, None, 1:]
        dist = np.sqrt((offset**2).sum(axis=2))
        return self._answer(
            out,
            rows,
            q_coords,
            q_logc,
            roof_time_us,
            distinct,
            inverse,
            cand,
            valid,
            dist,
            former=True,
            kept=kept,
        )[0]

    def _answer(
        self,
        out: Resolved,
        rows: np.ndarray,
        q_coords: np.ndarray,
        q_logc: np.ndarray,
        roof_time_us: np.ndarray,
        distinct: np.ndarray,
        inverse: np.ndarray,
        cand: np.ndarray,
        valid: np.ndarray,
        dist: np.ndarray,
        selected: bool = False,
        former: bool = False,
        kept: bool | None = None,
        tied_sites: tuple | None = None,
    ) -> tuple[Resolved, np.ndarray]:
        """Curve lookups and blends of the questions ``rows`` given each distinct site's candidates
        (``selected``: already the sites ``_nearby_sites`` would keep; ``former``: selections as the former
        algorithm made them, ``kept``: its path forced). Returns the answers and the questions whose blend
        had equally distant sites competing for its last place where that place decides the answer
        (``tied_sites``: distinct sites whose kept nearest sites had such a tie)."""
        layout = self.layout
        smallest = _argpartition_smallest if former else _k_smallest
        within = valid & (dist <= layout.gate)
        width = max(int(within.sum(axis=1).max()), 1)
        many = width > NEAREST_KEPT + 4 * len(layout.site_axes) if kept is None else kept
        if selected:
            pass
        elif many:
            keep = _nearby_sites(
                self.site_coords[np.where(valid, cand, 0)], distinct[:, 1:], dist, within, smallest
            )
            pad = keep < 0
            keep = np.maximum(keep, 0)
            within = np.take_along_axis(within, keep, axis=1) & ~pad
            cand = np.take_along_axis(cand, keep, axis=1)
            dist = np.take_along_axis(dist, keep, axis=1)
        elif width < cand.shape[1]:
            keep = smallest(np.where(within, dist, np.inf), width)
            within = np.take_along_axis(within, keep, axis=1)
            cand = np.take_along_axis(cand, keep, axis=1)
            dist = np.take_along_axis(dist, keep, axis=1)
        valid, cand, dist = within[inverse], cand[inverse], dist[inverse]  # (Q, W)
        safe = np.where(valid, cand, 0)
        lo, hi = self.curve_lo[safe], self.curve_hi[safe]
        covered = valid & (q_logc[:, None] >= lo - layout.hold) & (q_logc[:, None] <= hi + layout.hold)
        clipped = np.clip(q_logc[:, None], lo, hi)
        key = safe * KEY_STRIDE + clipped
        right = np.clip(np.searchsorted(self.keys, key, side="right"), 1, len(self.keys))
        left = right - 1
        nxt = np.minimum(right, len(self.keys) - 1)
        same = (self.keys[nxt] // KEY_STRIDE) == (self.keys[left] // KEY_STRIDE)
        nxt = np.where(same & (self.keys[nxt] > self.keys[left]), nxt, left)
        x0, x1 = self.keys[left] - safe * KEY_STRIDE, self.keys[nxt] - safe * KEY_STRIDE
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.where(x1 > x0, (clipped - x0) / (x1 - x0), 0.0)
        # geometric: log efficiency is linear in log size both where a pipe binds (util flat) and where the
        # launch binds (util proportional to size)
        log_util = self.log_util[left] + np.clip(t, 0.0, 1.0) * (self.log_util[nxt] - self.log_util[left])
        own = covered & (dist < 1e-9)
        has_own = own.any(axis=1)
        # blend: own site alone where measured; else the nearest covering sites within the gate
        eligible = covered & (dist <= layout.gate)
        d = np.where(own, 0.0, np.where(eligible, dist, np.inf))
        blended, weight, nd = _idw(d, log_util, own, has_own, layout, smallest)
        tied = _tied_at(d, layout.neighbours) & ~has_own  # the own site alone where measured: no tie counts
        if layout.blend == "axes":
            value = log_util
            if layout.space == "latency":  # log latency of each site at the question's curve point
                step = self.log_roof[nxt] - self.log_roof[left]
                log_roof = self.log_roof[left] + np.clip(t, 0.0, 1.0) * step
                value = log_roof - log_util
            axes, found = _axis_brackets(self.site_coords[safe], q_coords, value, eligible, layout)
            if layout.space == "latency":
                axes = np.log(roof_time_us[rows]) - axes
            take = found & ~has_own
            idw = np.where(np.isfinite(blended), blended, axes)
            mixed = (1.0 - layout.idw_share) * axes + layout.idw_share * idw
            blended = np.where(take, mixed, blended)
            if layout.idw_share == 0:  # the blend's own value only where no axis brackets
                tied &= ~take
        total = weight.sum(axis=1)
        ok = total > 0
        duration = np.where(ok, roof_time_us[rows] / np.clip(np.exp(blended), 1e-6, 1.0), np.nan)
        # exact hits: own site, the curve point itself measured
        own_site = np.where(own, safe, -1).max(axis=1)
        exact_key = own_site * KEY_STRIDE + q_logc
        pos = np.clip(np.searchsorted(self.keys, exact_key), 0, len(self.keys) - 1)
        exact = has_own & (np.abs(self.keys[pos] - exact_key) < 1e-9)
        duration = np.where(exact, self.latency[pos], duration)
        out.duration_us[rows] = duration
        out.exact[rows] = exact
        out.neighbours[rows] = np.where(ok, (weight > 0).sum(axis=1), 0)
        nearest_used = np.where(weight > 0, nd, np.inf).min(axis=1)
        out.distance[rows] = np.where(ok, np.where(has_own, 0.0, nearest_used), np.nan)
        out.spread[rows] = np.where(exact, self.spread[pos], np.nan)
        if tied_sites is not None:
            # a tie for the last kept nearest site decides only if a tied site could be blended (fewer
            # eligible sites nearer than it than the blend takes) or bracket an axis (on a line through it)
            tie_site, tie_distance, tie_on_line = tied_sites
            with np.errstate(invalid="ignore"):
                nearer = (eligible & (dist < tie_distance[inverse][:, None])).sum(axis=1)
            deciding = tie_on_line[inverse] | (nearer < layout.neighbours)
            tied |= tie_site[inverse] & ~has_own & deciding
        return out, rows[tied]


NEAREST_RADII = (0.75, 1.5)  # octaves: the nearest sites are searched within these first (_kept_sites)
NEAREST_KEPT = 8  # sites kept per question beside the two nearest on each side of each site axis's line


def _nearby_sites(
    coords: np.ndarray, q: np.ndarray, dist: np.ndarray, within: np.ndarray, smallest: Any = None
) -> np.ndarray:
    """Column indices (U, W) of the candidates that can matter to a question's site: its NEAREST_KEPT nearest
    within the gate (the inverse-distance fallback) and, per site axis, the two nearest on each side along
    the line through it (the brackets, with a spare where one does not cover the curve point); -1 pads
    repeats. coords: (U, C, A), q: (U, A), dist/within: (U, C)."""
    picks = []
    k = min(NEAREST_KEPT, dist.shape[1])
    picks.append((smallest or _k_smallest)(np.where(within, dist, np.inf), k))
    for a in range(q.shape[1]):
        line = within.copy()
        for b in range(q.shape[1]):
            if b != a:
                line &= np.abs(coords[:, :, b] - q[:, None, b]) < 1e-9
        delta = coords[:, :, a] - q[:, None, a]
        for side in (delta < 0, delta > 0):
            gap = np.where(line & side, np.abs(delta), np.inf)
            two = min(2, gap.shape[1])
            chosen = np.argpartition(gap, two - 1, axis=1)[:, :two]
            ok = np.isfinite(np.take_along_axis(gap, chosen, axis=1))
            picks.append(np.where(ok, chosen, -1))
    keep = np.sort(np.concatenate(picks, axis=1), axis=1)
    repeat = np.zeros_like(keep, dtype=bool)
    repeat[:, 1:] = keep[:, 1:] == keep[:, :-1]
    return np.where(repeat, -1, keep)


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows (lexicographic order) and each row's index among them: ``np.unique(axis=0)`` by one
    lexsort instead of sorting the rows as bytes."""
    if not len(a):
        return a[:0], np.zeros(0, dtype="int64")
    order = np.lexsort(a.T[::-1])
    ordered = a[order]
    new = np.ones(len(a), bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(a), dtype="int64")
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _scatter(
    site_q: np.ndarray, site: np.ndarray, dist: np.ndarray, n_distinct: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat (question, site, distance), questions ascending, as padded (U, W) candidates, validity and
    distance."""
    per_q = np.bincount(site_q, minlength=n_distinct)
    position = np.arange(len(site)) - np.repeat(np.cumsum(per_q) - per_q, per_q)
    width = max(int(per_q.max()) if n_distinct else 0, 1)
    cand = np.full((n_distinct, width), -1, dtype="int64")
    dists = np.full((n_distinct, width), np.inf)
    cand[site_q, position] = site
    dists[site_q, position] = dist
    return cand, cand >= 0, dists


def _rounded(coords: np.ndarray) -> np.ndarray:
    """log2 coordinates as integers (2**-20 octave): equal sizes are one key even an ulp apart."""
    return np.round(coords * 2.0**20).astype("int64")


def _runs(owner: np.ndarray, start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flattened runs ``start[i] .. start[i] + count[i] - 1``, each tagged with ``owner[i]``, in order."""
    count = np.maximum(count, 0)
    total = int(count.sum())
    first = np.cumsum(count) - count
    values = np.arange(total) - np.repeat(first, count) + np.repeat(start, count)
    return np.repeat(owner, count), values


def _argpartition_smallest(x: np.ndarray, k: int) -> np.ndarray:
    """The former selection: which of equally distant sites wins is ``np.argpartition``'s."""
    return np.argpartition(x, k - 1, axis=1)[:, :k]


def _tied_at(x: np.ndarray, k: int) -> np.ndarray:
    """Rows whose k-th and (k+1)-th smallest values are one finite value: a selection of k breaks a tie."""
    if x.shape[1] <= k:
        return np.zeros(len(x), bool)
    part = np.partition(x, [k - 1, k], axis=1)
    return np.isfinite(part[:, k]) & (part[:, k - 1] == part[:, k])


def _k_smallest(x: np.ndarray, k: int) -> np.ndarray:
    """Column indices (rows, k), ascending, of each row's k smallest values; ties go to the leftmost column
    (the lower site). Rows where a tie decides are answered again by the former algorithm
    (``SiteTable._former_where_tied``), so this rule never reaches an answer."""
    k = min(k, x.shape[1])
    kth = np.partition(x, k - 1, axis=1)[:, k - 1 : k]
    below = x < kth
    tied = x == kth
    take = below | (tied & (np.cumsum(tied, axis=1) <= k - below.sum(axis=1, keepdims=True)))
    return np.nonzero(take)[1].reshape(len(x), k)


def _idw(
    d: np.ndarray,
    log_util: np.ndarray,
    own: np.ndarray,
    has_own: np.ndarray,
    layout: Layout,
    smallest: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse-distance blend of the ``layout.neighbours`` nearest eligible sites (distance ``d``, inf where
    not eligible); the own site alone where it was measured. Returns (blend, weights, their distances)."""
    k = min(layout.neighbours, d.shape[1])
    nearest = (
        (smallest or _k_smallest)(d, k) if d.shape[1] > k else np.tile(np.arange(d.shape[1]), (len(d), 1))
    )
    nd = np.take_along_axis(d, nearest, axis=1)
    nu = np.take_along_axis(log_util, nearest, axis=1)
    with np.errstate(divide="ignore"):
        weight = np.where(np.isfinite(nd), 1.0 / np.maximum(nd, 1e-6) ** layout.power, 0.0)
    own_pick = np.take_along_axis(own, nearest, axis=1)
    weight = np.where(has_own[:, None], own_pick.astype(float), weight)
    with np.errstate(invalid="ignore", divide="ignore"):
        blended = (weight * nu).sum(axis=1) / weight.sum(axis=1)
    return blended, weight, nd


def _axis_brackets(
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


def _categories(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.Series:
    """One text key per row of the categorical columns (numbers as integers: 64 and 64.0 are one count)."""
    if not columns:
        return pd.Series("", index=frame.index)
    parts = [frame[c].astype("int64").astype(str) if c != "phase" else frame[c].astype(str) for c in columns]
    return parts[0].str.cat(parts[1:], sep="|") if len(parts) > 1 else parts[0]


def _shape_of(family: str, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    keys = physics.SHAPE_KEYS[family]
    return {k: frame[k].to_numpy(dtype="float64") for k in (*keys[0], *keys[1]) if k in frame}


IDENTITY_FIELDS: frozenset[str] = frozenset({"id", "name", "aliases", "source", "notes"})


def physics_key(spec: Any) -> str:
    """Everything of a spec but its names and provenance: specs with one key are one GPU to the physics."""
    import json

    return json.dumps(spec.model_dump(exclude=set(IDENTITY_FIELDS)), sort_keys=True, default=str)


class MeasuredTier:
    """The measured tables of every GPU in a store, resolved lazily per (family, device, dtype, kv_dtype)."""

    def __init__(self, store: dict[str, pd.DataFrame], specs: dict[str, Any]) -> None:
        self.specs = specs  # device_id -> DeviceSpec of the GPU the rows were measured on
        self.groups: dict[tuple, pd.DataFrame] = {}
        for family, frame in store.items():
            if family not in LAYOUTS:
                continue
            keys = ["device_id", "dtype"] + (["kv_dtype"] if family == "attention" else [])
            for key, part in frame.groupby(keys, sort=True, observed=True):
                key = key if isinstance(key, tuple) else (key,)
                full = (family, *key) if family == "attention" else (family, *key, None)
                self.groups[full] = part
        self._tables: dict[tuple, SiteTable | None] = {}
        # a GPU is its physics, not its name: a spec identical to a measured GPU's gets that GPU's answers
        self.by_physics = {physics_key(spec): device for device, spec in specs.items()}

    def devices(self) -> set[str]:
        return {key[1] for key in self.groups}

    def without(self, device: str) -> MeasuredTier:
        """This tier as if ``device`` had never been measured (its rows and spec gone); the other GPUs' site
        tables are shared, not rebuilt (leave-one-GPU-out benches)."""
        out = MeasuredTier({}, {d: s for d, s in self.specs.items() if d != device})
        out.groups = {k: v for k, v in self.groups.items() if k[1] != device}
        out._tables = self._tables  # keyed by device: the held-out GPU's tables are never asked for
        return out

    def table(self, family: str, device_id: str, dtype: str, kv_dtype: str | None) -> SiteTable | None:
        key = (family, device_id, dtype, (kv_dtype or dtype) if family == "attention" else None)
        if key not in self._tables:
            part = self.groups.get(key)
            spec = self.specs.get(device_id)
            self._tables[key] = (
                None if part is None or spec is None else SiteTable(family, part, spec, dtype, key[3])
            )
        return self._tables[key]

    def resolve(
        self,
        family: str,
        dtype: str,
        shape: dict[str, np.ndarray],
        spec: Any,
        roof_time_us: np.ndarray,
        kv_dtype: str | None = None,
    ) -> Resolved | None:
        """None where this GPU has no measured rows of (family, dtype[, kv_dtype]). The GPU is found by its
        physics (``physics_key``): a spec with the same id but other peaks is not the GPU measured, a renamed
        copy of it is."""
        device = self.by_physics.get(physics_key(spec))
        if device is None:
            return None
        table = self.table(family, device, dtype, kv_dtype)
        return None if table is None else table.resolve(shape, roof_time_us)
