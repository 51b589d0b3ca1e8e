"""A runtime non-decreasing in every size: the op engine's answers under a monotone envelope.

Measured kernels are not monotone themselves (H200 fp8 N = K = 8192: M = 64 30.8 us, M = 128 27.2 us: another
kernel won the tuning), and neither are interpolations between them or a learned efficiency. The envelope: on
a fixed lattice of sizes (powers of two per size axis over a fixed range, the other dimensions of the question
held), the raw answers ``f`` are evaluated once; ``U`` is their running maximum from below along every axis
and ``L`` their running minimum from above (both lattice functions non-decreasing in each axis). A question's
answer is ``sqrt(max(f(s), U(floor(s))) * min(f(s), L(ceil(s))))``: the geometric mean of a non-decreasing
upper and lower envelope, so non-decreasing itself, equal to ``f`` wherever ``f`` is already monotone, and
halfway (in log) between lifting a dip and lowering the bump before it -- closer to the measured truth, which
has the same dips, than either alone. On the lattice (every power-of-two shape inside the range) this is
monotone by construction; between lattice points wherever ``f`` is monotone inside the cell. The lattice of a
(GPU, dtype, held dimensions) is computed once and cached: a few thousand answers of the engine, array work;
an engine loaded from a folder also saves it to disk, so a later process reads it (``lattice_cache.py``).
Block-scaled GEMMs (fp8_block) keep their lattice on the scale-block grid (N, K >= 128): a shape off the grid
runs another, far slower kernel, and is left as answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from components.opmodel.measured import attention_phase

if TYPE_CHECKING:
    from components.opmodel.lattice_cache import LatticeFiles

# family -> the size axes the envelope makes monotone (attention: the KV length; S follows it in prefill)
AXES: dict[str, tuple[str, ...]] = {"gemm": ("B", "M", "N", "K"), "attention": ("B", "KV"), "moe": ("T",)}
# log2 of the lattice's first and last size per axis (fixed: the envelope of a question never depends on
# which other questions were asked before it)
RANGE: dict[str, tuple[int, int]] = {
    "B": (0, 10),
    "M": (0, 17),
    "N": (0, 17),
    "K": (0, 17),
    "KV": (0, 20),
    "T": (0, 17),
}
BLOCK_START = 7  # fp8_block: N and K from 128 (the scale block)
HELD: dict[str, tuple[str, ...]] = {
    "gemm": (),
    "attention": ("H", "HKV", "D", "W", "_decode"),
    "moe": ("E", "topk", "H", "I", "tp", "ep"),
}
CACHE_LIMIT = 512


def lattice_index(values: np.ndarray, low: int, high: int, up: bool = False) -> np.ndarray:
    """Position on the lattice ``2**low .. 2**high`` of the point at or below (``up``: at or above) each size,
    clipped to the lattice."""
    log = np.log2(np.maximum(values, 1.0))
    step = np.ceil(log - 1e-9) if up else np.floor(log + 1e-9)
    return (np.clip(step, low, high) - low).astype("int64")


def running_max(values: np.ndarray) -> np.ndarray:
    """Running maximum from below along every axis of a lattice array (NaN: no constraint)."""
    out = np.where(np.isfinite(values), values, -np.inf)
    for axis in range(out.ndim):
        out = np.maximum.accumulate(out, axis=axis)
    return out


def running_min(values: np.ndarray) -> np.ndarray:
    """Running minimum from above along every axis of a lattice array (NaN: no constraint)."""
    out = np.where(np.isfinite(values), values, np.inf)
    for axis in range(out.ndim):
        flipped = np.flip(out, axis=axis)
        out = np.flip(np.minimum.accumulate(flipped, axis=axis), axis=axis)
    return out


class Envelope:
    """Cached lattices per (key, held dimensions); ``apply`` lifts answers onto the envelope. ``files``: where
    lattices are saved across processes (None: in memory only)."""

    def __init__(self, files: LatticeFiles | None = None) -> None:
        self.cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.files = files

    def apply(
        self,
        family: str,
        shape: dict[str, np.ndarray],
        duration: np.ndarray,
        key: tuple,
        answer: Callable[[dict[str, np.ndarray]], np.ndarray],
        block: bool = False,
    ) -> np.ndarray:
        """``duration`` (the raw answers ``f`` of ``shape``'s rows) under the envelope (module docstring);
        ``answer`` gives raw answers of any shapes of the same (family, dtype, GPU); ``block``: a block-scaled
        GEMM (its lattice on the scale-block grid, shapes off it left as answered)."""
        if family not in AXES:
            return duration
        n = len(duration)
        columns = {k: np.broadcast_to(np.asarray(v, dtype="float64"), (n,)) for k, v in shape.items()}
        axes = [a for a in AXES[family] if a in columns and not (a == "B" and family == "gemm")]
        if family == "gemm" and "B" in columns:
            columns["_B"] = columns["B"]  # batched products: one lattice per batch count
        eligible = np.ones(n, bool)
        if family == "attention":  # the phase as the measured tier files it (S = KV = 1 is prefill)
            phase = attention_phase(columns["S"], columns["KV"])
            eligible = phase != "chunk"
            columns["_decode"] = (phase == "decode").astype("float64")
        ranges = {a: RANGE[a] for a in axes}
        if block:
            for a in ("N", "K"):
                ranges[a] = (BLOCK_START, RANGE[a][1])
                eligible &= (columns[a] % 2**BLOCK_START == 0) & (columns[a] >= 2**BLOCK_START)
        held_names = [h for h in (*HELD[family], "_B") if h in columns]
        held = np.column_stack([columns[h] for h in held_names]) if held_names else np.zeros((n, 0))
        below = tuple(np.column_stack([lattice_index(columns[a], *ranges[a]) for a in axes]).T)
        above = tuple(np.column_stack([lattice_index(columns[a], *ranges[a], up=True) for a in axes]).T)
        out = duration.copy()
        groups = list(np.unique(held[eligible], axis=0)) if eligible.any() else []
        lattices = self._lattices(family, axes, ranges, held_names, groups, key, answer)
        for group, (upper, lower) in zip(groups, lattices, strict=True):
            rows = np.flatnonzero(eligible & np.all(held == group, axis=1))
            hi = np.fmax(duration[rows], _finite(upper[tuple(i[rows] for i in below)]))
            lo = np.fmin(duration[rows], _finite(lower[tuple(i[rows] for i in above)]))
            out[rows] = np.sqrt(hi * lo)
        return out

    def _lattices(
        self,
        family: str,
        axes: list[str],
        ranges: dict[str, tuple[int, int]],
        held_names: list[str],
        groups: list[np.ndarray],
        key: tuple,
        answer: Callable[[dict[str, np.ndarray]], np.ndarray],
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """(running max from below, running min from above) of the raw answers on each group's lattice. The
        lattices in neither the memory nor the files are answered in one ``answer`` call over all their
        points (a 70B model's attention: 8 lattices of 231 points per GPU, each call's fixed cost paid once;
        the engine answers each row on its own, so the lattices are those answered one by one, to the bit)."""
        cache_keys = [
            (key, family, tuple(axes), tuple(ranges.items()), tuple(held_names), tuple(g.tolist()))
            for g in groups
        ]
        found = [self._cached(cache_key) for cache_key in cache_keys]
        missing = [i for i, lattice in enumerate(found) if lattice is None]
        if missing:
            shapes = [lattice_points(family, axes, ranges, held_names, groups[i]) for i in missing]
            columns = {name: np.concatenate([shape[name] for shape in shapes]) for name in shapes[0]}
            raw_all = np.asarray(answer(columns), dtype="float64")
            grid = tuple(ranges[a][1] - ranges[a][0] + 1 for a in axes)
            for i, raw in zip(missing, np.split(raw_all, len(missing)), strict=True):
                found[i] = self._finish(family, axes, held_names, groups[i], raw.reshape(grid), cache_keys[i])
        return [lattice for lattice in found if lattice is not None]

    def _cached(self, cache_key: tuple) -> tuple[np.ndarray, np.ndarray] | None:
        """A lattice kept in memory, or saved by an earlier process (None: to be answered)."""
        cached = self.cache.get(cache_key)
        if cached is None and self.files is not None:
            cached = self.files.read(cache_key)
            if cached is not None:
                self._remember(cache_key, cached)
        return cached

    def _finish(
        self,
        family: str,
        axes: list[str],
        held_names: list[str],
        group: np.ndarray,
        raw: np.ndarray,
        cache_key: tuple,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A group's lattice of raw answers made monotone, kept in memory and saved."""
        if family == "attention" and group[held_names.index("_decode")]:
            # the lattice's KV = 1 (S = 1) is the one-token prefill kernel, not a decode: it bounds no decode
            # (its 16 us on H100 lifted every decode of the group: H100 bf16 decode 9.7 -> 19.9%)
            first = [slice(None)] * raw.ndim
            first[axes.index("KV")] = 0
            raw[tuple(first)] = np.nan
        lattices = (running_max(raw), running_min(raw))
        if self.files is not None:
            self.files.write(cache_key, *lattices)
        self._remember(cache_key, lattices)
        return lattices

    def _remember(self, cache_key: tuple, lattices: tuple[np.ndarray, np.ndarray]) -> None:
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.pop(next(iter(self.cache)))
        self.cache[cache_key] = lattices


def _finite(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), values, np.nan)


def lattice_points(
    family: str, axes: list[str], ranges: dict[str, tuple[int, int]], held_names: list[str], group: np.ndarray
) -> dict[str, np.ndarray]:
    """The lattice points of one group (every power of two of each axis, the held dimensions fixed) as the
    engine's question columns, in ``np.meshgrid(..., indexing="ij")`` order."""
    grids = np.meshgrid(*[2.0 ** np.arange(ranges[a][0], ranges[a][1] + 1) for a in axes], indexing="ij")
    shape: dict[str, np.ndarray] = {a: g.ravel() for a, g in zip(axes, grids, strict=True)}
    for name, value in zip(held_names, group, strict=True):
        if name not in ("_decode", "_B"):
            shape[name] = np.full(grids[0].size, value)
        elif name == "_B":
            shape["B"] = np.full(grids[0].size, value)
    if family == "attention":
        shape["S"] = np.ones(grids[0].size) if group[held_names.index("_decode")] else shape["KV"]
    return shape
