"""Deterministic sampling by hash: the same rows on every run, machine and row order.

Every split, cap and subsample in the project is drawn here. A key's rank is the SHA-1 of
``f"{salt}{sep}{key}"``; different salts give independent draws. The salts (and, for two
historical callers, the separator and width) are part of each caller's figures: changing one
changes which rows are selected.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

from components.common.lazy import lazy_module

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

SEP = "\x1f"


def hash_hex(value: object, salt: str, sep: str = SEP) -> str:
    """Hex SHA-1 of ``salt + sep + str(value)``: an exact, total rank order (no float ties)."""
    return hashlib.sha1(f"{salt}{sep}{value}".encode()).hexdigest()


def _unit(value: object, salt: str, sep: str, bits: int, closed: bool) -> float:
    digest = hashlib.sha1(f"{salt}{sep}{value}".encode()).digest()
    top = int.from_bytes(digest[: bits // 8], "big")
    return top / ((2**bits - 1) if closed else 2**bits)


def unit_hash(
    values: Iterable[object], salt: str, *, sep: str = SEP, bits: int = 64, closed: bool = False
) -> np.ndarray:
    """A value in [0, 1) per key (``closed``: [0, 1], dividing by 2**bits - 1), from the first
    ``bits`` bits of the key's hash. Each distinct key is hashed once."""
    if bits % 8 or not 8 <= bits <= 64:
        raise ValueError(f"bits must be a multiple of 8 in 8..64, got {bits}")
    keys = list(values)
    cache: dict[object, float] = {}
    out = np.empty(len(keys), dtype="float64")
    for i, key in enumerate(keys):
        value = cache.get(key)
        if value is None:
            value = cache[key] = _unit(key, salt, sep, bits, closed)
        out[i] = value
    return out


def unit_hash_series(values: pd.Series, salt: str, **kwargs: object) -> pd.Series:
    """``unit_hash`` of ``values`` as strings, on ``values``' index."""
    return pd.Series(unit_hash(values.astype(str), salt, **kwargs), index=values.index, dtype="float64")  # type: ignore[arg-type]


def hash_rank(values: pd.Series, salt: str, sep: str = SEP) -> pd.Series:
    """Hex-digest rank of each value (as a string), on ``values``' index: sort by it to order rows."""
    keys = values.astype(str)
    uniques = {key: hash_hex(key, salt, sep) for key in pd.unique(keys)}
    return keys.map(uniques)


def subsample(
    frame: pd.DataFrame, max_rows: int | None, salt: str, key: str = "measurement_id"
) -> pd.DataFrame:
    """At most ``max_rows`` rows of ``frame``, the lowest ``unit_hash`` of ``key``, in frame order."""
    if max_rows is None or len(frame) <= max_rows:
        return frame
    rank = unit_hash(frame[key].astype(str), salt)
    keep = np.argsort(rank, kind="stable")[:max_rows]
    return frame.iloc[np.sort(keep)]


def capped_index(index: pd.Index, keys: pd.Series, max_rows: int | None, salt: str) -> pd.Index:
    """At most ``max_rows`` labels of ``index`` (``keys``: the key per label), lowest hash first,
    returned sorted."""
    if max_rows is None or len(index) <= max_rows:
        return index
    rank = hash_rank(keys, salt)
    return pd.Index(rank.sort_values(kind="stable").index[:max_rows]).sort_values()


def balanced_sample(
    frame: pd.DataFrame, per_class: int, column: str, salt: str, key: str = "kernel_id", sep: str = SEP
) -> pd.DataFrame:
    """The first ``per_class`` rows of each ``column`` class in hash order of ``key`` (all rows of
    a smaller class), in frame order."""
    order = hash_rank(frame[key], salt, sep)
    ranked = frame.assign(_order=order).sort_values("_order")
    return ranked.groupby(column, group_keys=False).head(per_class).drop(columns="_order").sort_index()


__all__ = [
    "SEP",
    "balanced_sample",
    "capped_index",
    "hash_hex",
    "hash_rank",
    "subsample",
    "unit_hash",
    "unit_hash_series",
]
