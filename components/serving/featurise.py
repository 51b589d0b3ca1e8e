"""The feature table of op questions, built with vectorised numpy for all questions x devices at once.

Why not ``components.features.build.build_feature_table``: it parses each question's shape from
JSON text and looks FLOPs up per distinct kernel in Python -- right for ingested data, ~100x too
slow for a server answering thousands of questions per request or the >= 1M predictions/s the
batch path aims at. Here a question is already numbers (a dims matrix in
``components.features.dims.DIMS`` order), so the same formulas run as array operations.

The formulas and their assembly are the analytical model's own: ``family_demand``
(``components.features.demand``), ``compose_features`` and its ``Composed`` (masking, bound, notes;
``components.features.analytical``), what the feature build calls too, here over arrays; only the shape
parsing differs (numbers in, not JSON).
``tests/unit/test_serving_questions.py`` checks this table against ``build_feature_table``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.features import analytical as an
from components.features.arrays import is_categorical
from components.features.demand import family_demand
from components.features.device_numbers import DEVICE_COLUMNS, device_table
from components.features.dims import DIMS

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

QUERY_SOURCE = "query"


_DEVICE_CACHE: dict[tuple[Any, ...], tuple[dict[str, np.ndarray], pd.DataFrame]] = {}
_KEEP: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # the specs behind each id key (their ids stay unique)


def _device_arrays(specs: Sequence[Any]) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Per distinct spec: the analytical device numbers and the ``dev_*`` feature vector (cached per
    spec set: a server asks about the same few GPUs again and again)."""
    # Keyed by the specs' identities first (hashing ~100 pydantic specs per call costs ~0.1 ms: a bulk
    # caller asks in chunks with the same list); the cached entry keeps the specs alive, so ids stay theirs.
    by_id = ("id", *map(id, specs))
    hit = _DEVICE_CACHE.get(by_id)
    if hit is not None:
        return hit
    try:
        key: tuple[Any, ...] | None = tuple(specs)
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _DEVICE_CACHE:
        result = _DEVICE_CACHE[key]
    else:
        result = _device_arrays_uncached(specs)
    if len(_DEVICE_CACHE) > 256:
        _DEVICE_CACHE.clear()
        _KEEP.clear()
    _KEEP[by_id] = tuple(specs)
    _DEVICE_CACHE[by_id] = result
    if key is not None:
        _DEVICE_CACHE[key] = result
    return result


def _device_arrays_uncached(specs: Sequence[Any]) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    from components.devices import Catalog
    from components.features.build import device_features

    catalog = Catalog(list(specs))
    ids = [s.id for s in specs]
    table = device_table(ids, catalog).reindex(ids)
    # The feature build's own dev_* columns (one definition), by position in ``specs``.
    dev = device_features(pd.Series(ids), catalog).reset_index(drop=True)
    return {c: table[c].to_numpy("float64") for c in DEVICE_COLUMNS}, dev


def table_of(columns: dict[str, Any]) -> pd.DataFrame:
    """``op_feature_columns``' arrays as the feature-table DataFrame (``f_*``, ``m_*``, ``dev_*``, keys;
    labels as categoricals), one row per question."""
    n = len(columns["family"])
    data = {k: v for k, v in columns.items() if not k.startswith("_")}
    data["f_bound"] = pd.Categorical.from_codes(columns["_bound_code"], categories=an.BOUND_LABELS[:2])
    data["m_bound"] = pd.Categorical.from_codes(np.full(n, -1), categories=an.BOUND_LABELS[:2])
    data["feature_note"] = pd.Series(columns["_feature_note"], dtype="string")
    return pd.DataFrame(data)


def op_feature_columns(
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    dims: np.ndarray,
    device_index: np.ndarray,
    specs: Sequence[Any],
) -> dict[str, Any]:
    """The feature table's columns as numpy arrays (no DataFrame): what the fast model path reads.

    ``_bound_code``: f_bound as codes into ``analytical.BOUND_LABELS``; ``_feature_note``: the feature
    build's ``feature_note`` (None where the row has features).
    """
    n = len(family)
    # Labels: object arrays of str, or pd.Categorical (a bulk caller's few distinct labels as codes: every
    # comparison below is then on small integers, ~30x cheaper than on Python strings).
    family, op, dtype = (a if is_categorical(a) else np.asarray(a, dtype=object) for a in (family, op, dtype))
    device_index = np.asarray(device_index, dtype="int64")
    dims = np.asarray(dims, dtype="float64")
    dims_frame = {name: dims[:, j] for j, name in enumerate(DIMS)}  # columns as views: no DataFrame
    no_tile = (np.full(n, np.nan), np.full(n, np.nan))
    dem = family_demand(family, op, dtype, dims_frame, no_tile)
    per_device, dev_features = _device_arrays(specs)
    dv = {c: v[device_index] for c, v in per_device.items()}
    # The analytical model's own composition (one definition, components.features.analytical; FLOPs by the
    # registry's definition, components/physics), for rows without a measured launch or counters.
    composed = an.compose_features(family, dtype, dem, dv)
    columns: dict[str, Any] = {
        "device_id": np.array([s.id for s in specs], dtype=object)[device_index],
        "source": np.full(n, QUERY_SOURCE, dtype=object),
        "family": family,
        "op": op,
        "dtype": dtype,
    }
    # The feature build's own assembly (masking, bound, notes: ``Composed``), labels kept as codes.
    columns.update(composed.masked())
    columns["_bound_code"] = composed.bound_code()
    for name in an.M_COLUMNS[:-1]:
        columns[name] = np.full(n, np.nan)
    dev = dev_features.to_numpy("float64")[device_index]
    for j, name in enumerate(dev_features.columns):
        columns[name] = dev[:, j]
    columns["_feature_note"] = composed.notes(family, op)
    return columns
