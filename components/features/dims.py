"""Canonical op dimensions and the spellings a shape_json / params_json may give them, parsed to numbers.

A measurement row carries its shape as JSON text (``shape_json`` from the kernel, ``params_json`` from the
launch); the analytical features read canonical dims (``DIMS``) from them, column per dim, NaN where absent.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from components.common.lazy import lazy_module

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

# Canonical dimension -> accepted spellings (lower-case) in shape_json / params_json.
DIM_ALIASES: dict[str, tuple[str, ...]] = {
    "B": ("b", "batch", "batch_size", "bs"),
    "M": ("m",),
    "N": ("n", "numel", "elements", "n_elements"),
    "K": ("k",),
    "H": ("h", "hidden", "hidden_size", "cols"),
    "E": ("e", "experts", "num_experts"),
    "topk": ("topk", "top_k"),
    "heads": ("heads", "num_heads", "nh"),
    "seq": ("seq", "seq_len", "s", "sq"),
    "seq_kv": ("seq_kv", "skv", "kv_len", "kv"),  # "KV": the question schema's context length (S = 1 decode)
    "head_dim": ("head_dim", "d", "hd"),
    "cin": ("input_channel", "in_channels", "c_in", "cin", "c"),
    "cout": ("output_channel", "out_channels", "c_out", "cout"),
    "ksize": ("kernel_szie", "kernel_size", "ksize", "r"),
    "insize": ("input_size", "image_size", "hw", "in_size"),
    "stride": ("stride",),
    "pad": ("padding", "pad"),
    "tile_m": ("block_size_m", "tile_m", "bm"),
    "tile_n": ("block_size_n", "tile_n", "bn"),
    "tile_k": ("block_size_k", "tile_k", "bk"),
    "num_warps": ("num_warps",),
    "num_stages": ("num_stages",),
    "smem_kb": ("smem_size_kb", "smem_kb"),
    "bsx": ("block_size_x",),
    "bsy": ("block_size_y",),
    "tsx": ("tile_size_x",),
    "tsy": ("tile_size_y",),
    "filter_w": ("filter_width",),
    "filter_h": ("filter_height",),
    "image_w": ("image_width", "width", "problem_size_x"),
    "image_h": ("image_height", "height", "problem_size_y"),
    "samples": ("nr_samples", "samples"),
    "dms": ("nr_dms", "dms"),
    "channels": ("nr_channels", "channels"),
    "size_bytes": ("size", "size_bytes", "bytes"),
    "HKV": ("hkv", "kv_heads", "num_kv_heads"),  # attention: KV heads (grouped-query), sliding window, causal
    "W": ("w", "window", "sliding_window"),
    "causal": ("causal", "is_causal"),
}
# Every canonical name is a spelling of itself (as in ``components.physics.base.dims_of``): the profiler's
# conv cases say ``insize``, NeuSight's ``Input_Size``.
_ALIAS_TO_DIM: dict[str, str] = {dim.lower(): dim for dim in DIM_ALIASES} | {
    alias: dim for dim, aliases in DIM_ALIASES.items() for alias in aliases
}
DIMS: tuple[str, ...] = tuple(DIM_ALIASES)
_TILE_IN_NAME = re.compile(r"_(\d+)x(\d+)_")


def json_object(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _dims_table(texts: list[Any]) -> np.ndarray:
    """Canonical dims (len(texts) x len(DIMS)) of JSON objects; unknown keys and non-numbers ignored."""
    table = np.full((len(texts), len(DIMS)), np.nan)
    records = [json_object(t) for t in texts]
    if not any(records):
        return table
    raw = pd.DataFrame.from_records(records)
    position = {dim: i for i, dim in enumerate(DIMS)}
    for column in raw.columns:
        low = str(column).lower()
        if low == "problem_size":  # Kernel Tuner: [x, y(, z)] -> image (conv) or samples/DMs (dedispersion)
            sizes = raw[column].map(
                lambda v: list(v)[:2] if isinstance(v, list | tuple) else [math.nan, math.nan]
            )
            pair = np.array(
                [[float(x) for x in ([*list(v), math.nan, math.nan])[:2]] for v in sizes], dtype="float64"
            )
            for dim, j in (("image_w", 0), ("image_h", 1), ("samples", 0), ("dms", 1)):
                slot = table[:, position[dim]]
                table[:, position[dim]] = np.where(np.isfinite(slot), slot, pair[:, j])
            continue
        dim = _ALIAS_TO_DIM.get(low)
        if dim is None:
            continue
        values = raw[column]
        if values.map(lambda v: isinstance(v, bool)).any():
            values = values.where(~values.map(lambda v: isinstance(v, bool)))
        numbers = pd.to_numeric(values, errors="coerce").to_numpy("float64")
        slot = table[:, position[dim]]
        table[:, position[dim]] = np.where(np.isfinite(slot), slot, numbers)  # first spelling wins
    return table


def _dims_of_series(texts: pd.Series) -> np.ndarray:
    """Dims per row, parsing each distinct JSON text once (many measurements share one)."""
    codes, uniques = pd.factorize(texts.astype(object).fillna(""))
    table = _dims_table(list(uniques))
    return table[codes] if len(codes) else np.empty((0, len(DIMS)))


def parse_dims(shape_json: pd.Series, params_json: pd.Series) -> pd.DataFrame:
    """Canonical numeric dims per row from the kernel's shape_json and the measurement's params_json.

    A dim in params_json (what was launched) overrides the same dim in shape_json.
    """
    shape = _dims_of_series(shape_json)
    params = _dims_of_series(params_json)
    merged = np.where(np.isfinite(params), params, shape)
    return pd.DataFrame(merged, columns=list(DIMS), index=shape_json.index)


def tile_from_names(names: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Output tile from cuBLAS kernel names such as ``ampere_sgemm_32x128_tn`` (NaN when absent)."""
    extracted = names.astype("string").str.extract(_TILE_IN_NAME)
    return (
        pd.to_numeric(extracted[0], errors="coerce").to_numpy("float64"),
        pd.to_numeric(extracted[1], errors="coerce").to_numpy("float64"),
    )
