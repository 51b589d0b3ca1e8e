"""The measured tier of the linear-attention ops: AIConfigurator's Gated DeltaNet and Mamba2 kernel tables,
read in place.

``systems/data/<gpu>/linear_attention/<framework>/<version>/gdn_perf.parquet`` times each kernel of a GDN
layer on one GPU (its per-GPU key/value heads, i.e. after TP): a prefill (``context``) runs the causal
conv1d and the chunked gated delta rule, a decode step (``generation``) the conv update and the recurrent
rule. A serving step's GDN op is their sum. We take, per GPU and framework, the newest version whose table
holds both kernels of both phases (older ones time the conv alone), and interpolate log-log: decode in the
batch, a prefill chunk of one sequence in its tokens (B sequences' chunks: B times one, the varlen kernel
runs them in one launch, so this is an upper estimate). Outside the measured range, or for heads the
table lacks, the row is NaN and the roofline answers it. An NVIDIA GPU without a table borrows the nearest
measured one's (``ops.REFERENCE_GPUS``), scaled by the two GPUs' speed-of-light ratio (transfer tier).

``mamba2_perf.parquet`` (TensorRT-LLM) is read the same way, keyed by the Mamba2 block's heads, head dim,
groups, state size and conv width; it times the causal conv1d kernels alone (``causal_conv1d_fn`` for a
prefill, ``causal_conv1d_update`` for a decode step), so it answers the ``mamba2`` op's ``conv`` part and
the SSD scan stays at its roofline (``ops.table_op_time``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

PHASES = {"context": "prefill", "generation": "decode"}
# family -> (table name, its key columns and the op dimensions they hold, kernels a phase needs: GDN's
# rule and conv -- older GDN tables time the conv alone --; Mamba2's conv, the one kernel measured)
TABLES: dict[str, tuple[str, tuple[tuple[str, str], ...], int]] = {
    "gdn": (
        "gdn",
        (
            ("num_k_heads", "HK"),
            ("num_v_heads", "HV"),
            ("head_k_dim", "DK"),
            ("head_v_dim", "DV"),
            ("d_conv", "K"),
        ),
        2,
    ),
    "mamba2": (
        "mamba2",
        (("nheads", "H"), ("head_dim", "P"), ("n_groups", "G"), ("d_state", "N"), ("d_conv", "K")),
        1,
    ),
}
# Mamba2's conv1d runs over its channels (H P + 2 G N) whatever the heads: its rows keyed by them
CONV_KEYS = (("conv_channels", "CH"), ("d_conv", "K"))
KEYS = [column for column, _ in TABLES["gdn"][1]]


def _complete(frame: pd.DataFrame, kernels_per_phase: int) -> bool:
    """Both phases with their kernels (``TABLES``)."""
    kernels = frame.groupby("phase")["kernel_source"].nunique()
    return all(kernels.get(p, 0) >= kernels_per_phase for p in PHASES)


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.replace("rc", ".").split("."))


@lru_cache(maxsize=16)
def gdn_table(
    datasets_dir: str, device_id: str, framework: str | None, family: str = "gdn"
) -> tuple[pd.DataFrame, str] | None:
    """(per-op times in microseconds by phase, batch, tokens and heads; "framework version") of the newest
    complete table of ``device_id`` -- ``framework``'s own where it has one, else any framework's."""
    from components.ingest.aiconfigurator import table_files

    table_name, keys, kernels = TABLES[family]
    columns = [column for column, _ in keys]
    files = [
        f
        for f in table_files(Path(datasets_dir) / "aiconfigurator", "linear_attention", table_name)
        if f.device_id == device_id
    ]
    own = [f for f in files if f.framework == framework]
    for f in sorted(own or files, key=lambda f: (f.framework != framework, _version_key(f.version)))[::-1]:
        frame = pd.read_parquet(f.path)
        if not _complete(frame, kernels):
            continue
        summed = (
            frame.groupby(["phase", "batch_size", "seq_len", *columns])["latency"]
            .sum()
            .mul(1e3)
            .reset_index()
        )
        return summed, f"{f.framework} {f.version}"
    return None


def _interp_log(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Log-log interpolation inside [xs.min(), xs.max()], NaN outside."""
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    out = np.exp(np.interp(np.log(x), np.log(xs), np.log(ys)))
    return np.where((x >= xs[0]) & (x <= xs[-1]), out, np.nan)


def measured_gdn_us(table: pd.DataFrame, shape: Mapping[str, Any], family: str = "gdn") -> np.ndarray:
    """Measured time (microseconds) of each row of a ``gdn`` (or ``mamba2``) shape (physics' dimensions),
    NaN where the table does not cover it."""
    keys = CONV_KEYS if family == "conv" else TABLES[family][1]
    dims = {
        k: np.atleast_1d(np.asarray(shape[k] if k != "K" else shape.get("K", 4.0), dtype="float64"))
        for k in ("B", "S", *(dim for _, dim in keys))
    }
    n = max(len(v) for v in dims.values())
    d = {k: np.broadcast_to(v, (n,)) for k, v in dims.items()}
    out = np.full(n, np.nan)
    for key, group in table.groupby(["phase", *(column for column, _ in keys)]):
        phase, values = key[0], key[1:]
        heads = np.logical_and.reduce([d[dim] == v for (_, dim), v in zip(keys, values, strict=True)])
        if phase == "generation":
            rows = heads & (d["S"] == 1)
            one = group[group.seq_len == 1]
            if rows.any() and len(one) > 1:
                out[rows] = _interp_log(d["B"][rows], one.batch_size.to_numpy(float), one.latency.to_numpy())
        else:
            rows = heads & (d["S"] > 1)
            one = group[group.batch_size == 1]
            if rows.any() and len(one) > 1:
                per_seq = _interp_log(d["S"][rows], one.seq_len.to_numpy(float), one.latency.to_numpy())
                out[rows] = d["B"][rows] * per_seq
    return out


def measured_conv_us(table: pd.DataFrame, shape: Mapping[str, Any]) -> np.ndarray:
    """Measured time (microseconds) of a ``mamba2`` shape's causal conv1d: at each measured channel count
    (any model's rows: a TP share of one model is another's whole), log-log in the batch or the chunk's
    tokens, then log-log across the channel counts; NaN outside them."""
    frame = table.assign(conv_channels=table.nheads * table.head_dim + 2.0 * table.n_groups * table.d_state)
    keys = ["phase", "batch_size", "seq_len", "conv_channels", "d_conv"]
    frame = frame.groupby(keys)["latency"].median().reset_index()
    dims = {k: np.atleast_1d(np.asarray(shape[k], dtype="float64")) for k in ("H", "P", "G", "N")}
    channels = dims["H"] * dims["P"] + 2.0 * dims["G"] * dims["N"]
    counts = np.sort(frame["conv_channels"].unique().astype(float))
    at = np.array([measured_gdn_us(frame, {**shape, "CH": c}, "conv") for c in counts]).reshape(
        len(counts), -1
    )
    channels = np.broadcast_to(channels, (at.shape[1],))
    out = np.full(at.shape[1], np.nan)
    for i in range(at.shape[1]):
        hit = np.isfinite(at[:, i])
        if hit.sum() == 1:
            out[i] = at[hit, i][0] if counts[hit][0] == channels[i] else np.nan
        elif hit.any():
            out[i] = _interp_log(channels[i : i + 1], counts[hit], at[hit, i])[0]
    return out


def gdn_measured(
    spec: Any, framework: str | None, shape: Mapping[str, Any], datasets_dir: Path, family: str = "gdn"
) -> tuple[np.ndarray, str] | None:
    """(times with NaN where unmeasured, "framework version") for ``spec``, or None without a table."""
    found = gdn_table(str(datasets_dir), str(spec.id), framework, family)
    if found is None:
        return None
    table, source = found
    if family == "mamba2":
        return measured_conv_us(table, shape), source
    return measured_gdn_us(table, shape, family), source
