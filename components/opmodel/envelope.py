"""A runtime non-decreasing in every size: the op engine's answers under a monotone envelope.

Measured kernels are not monotone themselves (H200 fp8 N = K = 8192: M = 64 30.8 us, M = 128 27.2 us: another
kernel won the tuning), and neither are interpolations between them or a learned efficiency. The envelope:
on a fixed lattice of sizes (powers of two per size axis, the other dimensions of the question held), the raw
answers ``f`` are evaluated once and turned into their running maximum along every axis, ``C`` (a lattice
function non-decreasing in each axis); a question's answer is ``max(f(s), C(floor(s)))``, ``floor(s)`` the
lattice point at or below it. Between lattice points this is exact wherever ``f`` is monotone inside a lattice
cell; on the lattice (every power-of-two shape) it is monotone by construction. The lattice of a (GPU, dtype,
held dimensions) is computed once and cached: a few thousand answers of the engine, array work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# family -> the size axes the envelope makes monotone (attention: the KV length; S follows it in prefill)
AXES: dict[str, tuple[str, ...]] = {"gemm": ("B", "M", "N", "K"), "attention": ("B", "KV"), "moe": ("T",)}
HELD: dict[str, tuple[str, ...]] = {
    "gemm": (),
    "attention": ("H", "HKV", "D", "W", "_decode"),
    "moe": ("E", "topk", "H", "I", "tp", "ep"),
}
MAX_LOG2 = 24  # sizes up to 16M on the lattice; larger ones get no envelope along that axis
CACHE_LIMIT = 512


def lattice_index(values: np.ndarray) -> np.ndarray:
    """Index of the lattice point (a power of two) at or below each size (0 for sizes below 1)."""
    return np.clip(np.floor(np.log2(np.maximum(values, 1.0)) + 1e-9), 0, MAX_LOG2).astype("int64")


def running_max(values: np.ndarray) -> np.ndarray:
    """Running maximum along every axis of a lattice array (NaN treated as no constraint)."""
    out = np.where(np.isfinite(values), values, -np.inf)
    for axis in range(out.ndim):
        out = np.maximum.accumulate(out, axis=axis)
    return out


class Envelope:
    """Cached lattices per (key, held dimensions); ``apply`` lifts answers onto the envelope."""

    def __init__(self) -> None:
        self.cache: dict[tuple, tuple[np.ndarray, tuple[int, ...]]] = {}

    def apply(
        self,
        family: str,
        shape: dict[str, np.ndarray],
        duration: np.ndarray,
        key: tuple,
        answer: Callable[[dict[str, np.ndarray]], np.ndarray],
    ) -> np.ndarray:
        """``duration`` (the raw answers of ``shape``'s rows) lifted to ``max(f, C(floor(s)))``; ``answer``
        gives raw answers of any shapes of the same (family, dtype, GPU)."""
        if family not in AXES:
            return duration
        n = len(duration)
        axes = [a for a in AXES[family] if a in shape]
        columns = {k: np.broadcast_to(np.asarray(v, dtype="float64"), (n,)) for k, v in shape.items()}
        eligible = np.ones(n, bool)
        if family == "attention":
            decode = columns["S"] == 1
            eligible = decode | (columns["S"] == columns["KV"])
            columns["_decode"] = decode.astype("float64")
        held_names = [h for h in HELD[family] if h in columns]
        held = np.column_stack([columns[h] for h in held_names]) if held_names else np.zeros((n, 0))
        index = np.column_stack([lattice_index(columns[a]) for a in axes])
        out = duration.copy()
        for group in np.unique(held[eligible], axis=0) if eligible.any() else []:
            rows = np.flatnonzero(eligible & np.all(held == group, axis=1))
            top = tuple(int(i) for i in index[rows].max(axis=0))
            lattice = self._lattice(family, axes, held_names, group, top, key, answer)
            got = lattice[tuple(index[rows, j] for j in range(len(axes)))]
            out[rows] = np.fmax(duration[rows], np.where(np.isfinite(got), got, np.nan))
        return out

    def _lattice(
        self,
        family: str,
        axes: list[str],
        held_names: list[str],
        group: np.ndarray,
        top: tuple[int, ...],
        key: tuple,
        answer: Callable[[dict[str, np.ndarray]], np.ndarray],
    ) -> np.ndarray:
        cache_key = (key, family, tuple(axes), tuple(held_names), tuple(group.tolist()))
        cached = self.cache.get(cache_key)
        if cached is not None and all(c >= t for c, t in zip(cached[1], top, strict=True)):
            return cached[0]
        if cached is not None:  # grow to cover both
            top = tuple(max(c, t) for c, t in zip(cached[1], top, strict=True))
        grids = np.meshgrid(*[2.0 ** np.arange(t + 1) for t in top], indexing="ij")
        shape: dict[str, Any] = {a: g.ravel() for a, g in zip(axes, grids, strict=True)}
        for name, value in zip(held_names, group, strict=True):
            if name != "_decode":
                shape[name] = np.full(grids[0].size, value)
        if family == "attention":
            shape["S"] = np.ones(grids[0].size) if group[held_names.index("_decode")] else shape["KV"]
        raw = np.asarray(answer(shape), dtype="float64").reshape(grids[0].shape)
        lattice = running_max(raw)
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.pop(next(iter(self.cache)))
        self.cache[cache_key] = (lattice, top)
        return lattice
