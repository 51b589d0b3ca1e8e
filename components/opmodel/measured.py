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

Everything is array work over (questions x candidate sites): the sites within the gate of each distinct
question site come from one search (``site_search.SiteIndex``); where a batch holds a question site with many
of them, only those that can matter are kept (the NEAREST_KEPT nearest and the two nearest on each side
along each site axis's line). Equally distant sites rank by site order (sites sorted by category, then
coordinates): the lower site is kept and blended first. Curve lookups are one ``np.searchsorted`` over all
sites' keys. The layouts are chosen on an inner split of each GPU's training sites by
``benchmarks/measured_tier_selection.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from components.opmodel import site_blend
from components.opmodel.site_search import SiteIndex
from components.physics import roofline as physics

if TYPE_CHECKING:  # pandas loads where tables are built: a saved table answers without it (store_cache)
    import pandas as pd


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
    """prefill (S == KV), decode (S == 1) or chunk (no measured layout); S = KV = 1 is prefill, as measured
    (context tables), for tables and questions alike (filed as decode, an exact hit found no site: NaN)."""
    return np.where(s == kv, "prefill", np.where(s == 1, "decode", "chunk")).astype(object)


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
        phase = attention_phase(frame["S"].to_numpy(), frame["KV"].to_numpy())
        frame = frame.assign(phase=phase, curve=np.where(phase == "decode", frame["KV"], frame["S"]))
        frame = frame.assign(W=frame.get("W", 0))
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


NEAREST_KEPT = 8  # sites kept per question beside the two nearest on each side of each site axis's line
NEAREST_SPARE = 8  # the tree's nearest beyond NEAREST_KEPT: room for ties at the last kept place
SEARCH_SLACK = 1e-6  # octaves: the tree search reaches past the gate; the exact distance then decides
SITE_KEY_STRIDE = 4096.0  # > the span of log2 of any site coordinate + gate: categories never meet in a tree


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
        import pandas as pd

        layout = layout or LAYOUTS[family]
        self.family, self.layout, self.spec, self.dtype, self.kv_dtype = family, layout, spec, dtype, kv_dtype
        frame = _with_curve(family, frame, dtype)
        dims = [*layout.site_axes, layout.curve_axis]
        positive = np.all(frame[dims].to_numpy(dtype="float64") >= 1, axis=1)
        if family == "attention":
            positive &= frame["phase"].to_numpy() != "chunk"  # the phase is attention_phase's
        frame = frame[positive]
        roof = physics.roofline(family, dtype, _shape_of(family, frame), spec, kv_dtype)
        latency = frame["latency_us"].to_numpy(dtype="float64")
        util = np.clip(roof.time_us / latency, 1e-6, 1.0)
        cats = _categories(frame, layout.categorical)
        site_cols = [cats.rename("_cat")] + [frame[a] for a in layout.site_axes]
        sites = pd.concat(site_cols, axis=1).drop_duplicates().sort_values(["_cat", *layout.site_axes])
        sites = sites.reset_index(drop=True)
        self.cat_codes = {c: i for i, c in enumerate(pd.unique(sites["_cat"]))}
        site_cat = sites["_cat"].map(self.cat_codes).to_numpy().astype("int64")
        self.site_coords = np.log2(sites[list(layout.site_axes)].to_numpy(dtype="float64"))
        # one tree over every category: the category, spread far apart, is one more coordinate
        self.tree = SiteIndex(np.column_stack([site_cat * SITE_KEY_STRIDE, self.site_coords]))
        self.site_cat = site_cat
        self._axis_lines: dict[int, tuple] = {}  # sites along each axis's lines, built on first use
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
        self.n_rows = len(frame)

    def resolve(self, shape: dict[str, np.ndarray], roof_time_us: np.ndarray) -> Resolved:
        """The measured tier's answer per question (see the module docstring)."""
        layout = self.layout
        n = len(roof_time_us)
        out = _empty(n)
        if n == 0 or not len(self.keys):
            return out
        columns = _question_columns(self.family, shape, n, self.dtype)
        q_cat = self._category_codes(columns, n)
        rows = np.flatnonzero(np.isfinite(q_cat))
        if self.family == "gemm" and "B" in columns:  # batched products: no measured layout
            rows = rows[np.asarray(columns["B"], dtype="float64")[rows] == 1]
        if not len(rows):
            return out
        q_coords = np.log2(
            np.column_stack([np.asarray(columns[a], dtype="float64")[rows] for a in layout.site_axes])
        )
        q_logc = np.log2(np.asarray(columns[layout.curve_axis], dtype="float64")[rows])
        distinct, inverse = _unique_rows(np.column_stack([q_cat[rows], q_coords]))
        cand, valid, dist = _scatter(*self.candidates(distinct), len(distinct))
        return self._answer(out, rows, q_coords, q_logc, roof_time_us, inverse, cand, valid, dist)

    def candidates(self, distinct: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat (question, site, distance), ordered by question then site: the candidate sites of each
        distinct question site (category code, log2 site coordinates). Every site within the gate; where a
        question site has more than NEAREST_KEPT + 4 per axis of them, only those that can matter: the
        NEAREST_KEPT nearest and, per site axis, the two nearest on each side along the line through it (the
        brackets, with a spare). Per question site, not per batch: no answer depends on what else was asked
        (the envelope's lattice: MI325X bf16 M = 64, N = K = 8192 was 119 us there, 139 us alone)."""
        n_sites, gate = len(self.site_coords), self.layout.gate
        points = np.column_stack([distinct[:, 0] * SITE_KEY_STRIDE, distinct[:, 1:]])
        threshold = NEAREST_KEPT + 4 * (distinct.shape[1] - 1)
        # counts within the gate bounded by the tree; exact only where the bounds straddle the threshold
        many = self.tree.count_within(points, gate - SEARCH_SLACK) > threshold
        maybe = self.tree.count_within(points, gate + SEARCH_SLACK) > threshold
        unsure = np.flatnonzero(maybe & ~many)
        if len(unsure):
            counts = np.bincount(self.within_gate(distinct[unsure])[0], minlength=len(unsure))
            many[unsure] = counts > threshold
        if not many.any():
            return self.within_gate(distinct)
        few, lots = np.flatnonzero(~many), np.flatnonzero(many)
        picks = [self._nearest(distinct[lots], points[lots])]
        picks += [self._line_picks(distinct[lots], axis) for axis in range(distinct.shape[1] - 1)]
        flat = np.unique(np.concatenate([q * n_sites + site for q, site in picks]))
        site_q, site = lots[flat // n_sites], flat % n_sites
        few_q, few_site, few_dist = self.within_gate(distinct[few])  # empty where every site has many
        dist = np.concatenate([_distance(self.site_coords[site], distinct[site_q, 1:]), few_dist])
        site_q, site = np.concatenate([site_q, few[few_q]]), np.concatenate([site, few_site])
        order = np.lexsort((site, site_q))
        return site_q[order], site[order], dist[order]

    def within_gate(self, distinct: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat (question, site, distance), ordered by question then site, of every site within the gate."""
        points = np.column_stack([distinct[:, 0] * SITE_KEY_STRIDE, distinct[:, 1:]])
        q, j = self.tree.pairs_within(points, self.layout.gate + SEARCH_SLACK)
        flat = np.sort(q * len(self.site_coords) + j)
        site_q, site = flat // len(self.site_coords), flat % len(self.site_coords)
        dist = _distance(self.site_coords[site], distinct[site_q, 1:])
        inside = dist <= self.layout.gate
        return site_q[inside], site[inside], dist[inside]

    def _nearest(self, distinct: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat (question, site): the NEAREST_KEPT nearest sites within the gate, equally distant ones by site
        order. The tree's k nearest (and a spare) settle it unless a tie or rounding could reach past them;
        those question sites are ranked over their whole ball."""
        n_sites, gate = len(self.site_coords), self.layout.gate
        k = min(NEAREST_KEPT + NEAREST_SPARE, n_sites)
        found = self.tree.nearest(points, k, gate + SEARCH_SLACK)
        safe = np.minimum(found, n_sites - 1)
        dist = np.where(found < n_sites, _distance(self.site_coords[safe], distinct[:, None, 1:]), np.inf)
        dist = np.where(dist <= gate, dist, np.inf)
        ranked = np.lexsort((safe, dist), axis=1)[:, :NEAREST_KEPT]
        last = np.take_along_axis(dist, ranked[:, -1:], axis=1)[:, 0]
        settled = (found == n_sites).any(axis=1) | ~np.isfinite(last) | (dist.max(axis=1) > last + 1e-9)
        settled |= k == n_sites
        chosen = np.take_along_axis(found, ranked, axis=1)
        owner = np.broadcast_to(np.arange(len(points))[:, None], chosen.shape)
        keep = settled[:, None] & np.isfinite(np.take_along_axis(dist, ranked, axis=1))
        site_q, site = owner[keep], chosen[keep]
        redo = np.flatnonzero(~settled)
        if len(redo):
            ball_q, ball, ball_d = self.within_gate(distinct[redo])
            first = _first_of_each(ball_q, ball_d, ball, np.ones(len(ball), bool), NEAREST_KEPT)
            site_q, site = np.concatenate([site_q, redo[ball_q[first]]]), np.concatenate([site, ball[first]])
        return site_q, site

    def _line_picks(self, distinct: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat (question, site): the two nearest sites on each side of each question site along ``axis`` on
        the line through it (the same category and other coordinates), within the gate."""
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
        inside = _distance(self.site_coords[site], distinct[site_q, 1:]) <= self.layout.gate
        return site_q[inside], site[inside]

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
            starts = np.flatnonzero(new_line)
            lookup = {tuple(row): i for i, row in enumerate(ident[starts].tolist())}
            keys = (np.cumsum(new_line) - 1) * SITE_KEY_STRIDE + coords[order, axis]
            self._axis_lines[axis] = (lookup, order, keys, starts, np.append(starts[1:], len(order)))
        return self._axis_lines[axis]

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
                import pandas as pd

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

    def _answer(
        self,
        out: Resolved,
        rows: np.ndarray,
        q_coords: np.ndarray,
        q_logc: np.ndarray,
        roof_time_us: np.ndarray,
        inverse: np.ndarray,
        cand: np.ndarray,
        valid: np.ndarray,
        dist: np.ndarray,
    ) -> Resolved:
        """Curve lookups and blends of the questions ``rows`` given each distinct question site's candidate
        sites (U, W), in site order, -1 pads; ``inverse``: each question's distinct site."""
        layout = self.layout
        valid, cand, dist = valid[inverse], cand[inverse], dist[inverse]  # (Q, W)
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
        blended, weight, nd = site_blend.idw(d, log_util, own, has_own, layout)
        if layout.blend == "axes":
            value = log_util
            if layout.space == "latency":  # log latency of each site at the question's curve point
                step = self.log_roof[nxt] - self.log_roof[left]
                log_roof = self.log_roof[left] + np.clip(t, 0.0, 1.0) * step
                value = log_roof - log_util
            axes, found = site_blend.axis_brackets(self.site_coords[safe], q_coords, value, eligible, layout)
            if layout.space == "latency":
                axes = np.log(roof_time_us[rows]) - axes
            take = found & ~has_own
            idw = np.where(np.isfinite(blended), blended, axes)
            mixed = (1.0 - layout.idw_share) * axes + layout.idw_share * idw
            blended = np.where(take, mixed, blended)
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
        return out


def _distance(sites: np.ndarray, question: np.ndarray) -> np.ndarray:
    """Euclidean distance in log2 site coordinates, one formula for every path (not the tree's arithmetic):
    a site on the gate is in or out alike."""
    return np.sqrt(((sites - question) ** 2).sum(axis=-1))


def _rounded(coords: np.ndarray) -> np.ndarray:
    """log2 coordinates as integers (2**-20 octave): equal sizes are one key even an ulp apart."""
    return np.round(coords * 2.0**20).astype("int64")


def _first_of_each(
    group: np.ndarray, key: np.ndarray, site: np.ndarray, mask: np.ndarray, k: int
) -> np.ndarray:
    """Which of the ``mask``-ed pairs are among the first k of their group, ranked by key, then site."""
    index = np.flatnonzero(mask)
    order = index[np.lexsort((site[index], key[index], group[index]))]
    ordered = group[order]
    new = np.ones(len(order), bool)
    new[1:] = ordered[1:] != ordered[:-1]
    position = np.arange(len(order))
    rank = position - np.maximum.accumulate(np.where(new, position, 0))
    out = np.zeros(len(mask), bool)
    out[order[rank < k]] = True
    return out


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


def _categories(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.Series:
    """One text key per row of the categorical columns (numbers as integers: 64 and 64.0 are one count)."""
    if not columns:
        import pandas as pd

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


def measured_groups(family: str, frame: pd.DataFrame) -> Iterator[tuple[tuple, pd.DataFrame]]:
    """``family``'s rows per (family, device, dtype, kv dtype | None): the measured tier's groups."""
    keys = ["device_id", "dtype"] + (["kv_dtype"] if family == "attention" else [])
    for key, part in frame.groupby(keys, sort=True, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        yield ((family, *key) if family == "attention" else (family, *key, None)), part


class MeasuredTier:
    """The measured tables of every GPU in a store, resolved lazily per (family, device, dtype, kv_dtype)."""

    def __init__(self, store: dict[str, pd.DataFrame], specs: dict[str, Any]) -> None:
        self.specs = specs  # device_id -> DeviceSpec of the GPU the rows were measured on
        # (family, device, dtype, kv dtype | None) -> rows; a store_cache.GroupFrames reads each on first use
        self.groups: Mapping[tuple, pd.DataFrame] = {
            key: part
            for family, frame in store.items()
            if family in LAYOUTS
            for key, part in measured_groups(family, frame)
        }
        self._tables: dict[tuple, SiteTable | None] = {}
        # a GPU is its physics, not its name: a spec identical to a measured GPU's gets that GPU's answers
        self.by_physics = {physics_key(spec): device for device, spec in specs.items()}

    @classmethod
    def from_groups(cls, groups: Mapping[tuple, pd.DataFrame], specs: dict[str, Any]) -> MeasuredTier:
        """A tier over groups already split (``store_cache.GroupFrames``: each read on first use)."""
        out = cls({}, specs)
        out.groups = groups
        return out

    def devices(self) -> set[str]:
        return {key[1] for key in self.groups}

    def without(self, device: str) -> MeasuredTier:
        """This tier as if ``device`` had never been measured (its rows and spec gone); the other GPUs' site
        tables are shared, not rebuilt (leave-one-GPU-out benches)."""
        out = MeasuredTier({}, {d: s for d, s in self.specs.items() if d != device})
        keep = [k for k in self.groups if k[1] != device]
        subset = getattr(self.groups, "subset", None)  # a lazy split: restrict it without reading it
        out.groups = subset(keep) if subset else {k: self.groups[k] for k in keep}
        out._tables = self._tables  # keyed by device: the held-out GPU's tables are never asked for
        out.framework, out.own_keys = self.framework, self.own_keys
        return out

    # the serving framework whose own tables answer first, and the groups it measured (framework_tables)
    framework: str | None = None
    own_keys: frozenset = frozenset()

    def table(self, family: str, device_id: str, dtype: str, kv_dtype: str | None) -> SiteTable | None:
        key = (family, device_id, dtype, (kv_dtype or dtype) if family == "attention" else None)
        if key not in self._tables:
            spec = self.specs.get(device_id)
            if key not in self.groups or spec is None:
                self._tables[key] = None
                return None

            def build() -> SiteTable:
                return SiteTable(family, self.groups[key], spec, dtype, key[3])

            saved = getattr(self.groups, "table", None)  # a split store keeps its built tables on disk
            table = saved(key, f"{physics_key(spec)}|{LAYOUTS[family]!r}", build) if saved else build()
            table.spec = spec  # the catalog's spec object itself (the saved one has the same physics)
            self._tables[key] = table
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
