"""The measured tier of the DSA op: AIConfigurator's DeepSeek Sparse Attention module tables, read in place.

``systems/data/<gpu>/sparse_attention/<framework>/<version>/dsa_{context,generation}_module_perf.parquet``
time one layer's whole attention module (projections, indexer, top-k, sparse MLA: ``physics.dsa``) on one
GPU after TP (``num_heads`` per GPU), per model, GEMM dtype (``gemm_type``) and KV dtype: a prefill chunk
of ``isl`` tokens of one sequence after a cached ``step`` (prefix) tokens, and a decode step of
``batch_size`` sequences at context ``step``. A row answers a deployment whose model has the same module
(hidden size, LoRA ranks, head dims, indexer, top-k: the table's model read from its bundled config).

Per GPU and framework we take the newest version with both phases for the model; the framework's own
where it has one, else any framework's. Where the table holds several kernels for one KV dtype (SGLang
0.5.14: a dense MHA prefill while the context fits in the top-k, the sparse kernel beyond), the dense one
answers contexts up to the top-k, the sparse one the rest. Interpolation is log-log, first along the
table's context (prefix or decode context), then across its other axis (chunk tokens or batch); outside
the measured range the row is NaN and the roofline answers it. An NVIDIA GPU without a table borrows the
nearest measured one's, scaled by the speed-of-light ratio (``ops.table_op_time``: transfer tier).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.deployments.gdn_tables import _interp_log, _version_key
from components.physics.dsa import SIGNATURE  # a module's shape (heads aside)

PHASES = {"context": "dsa_context_module", "generation": "dsa_generation_module"}
# a deployment's GEMM / KV dtype -> the tables' spelling (fp8 per-tensor projections run as 1-byte GEMMs too)
GEMM_TYPES = {"fp8_block": "fp8_block", "fp8": "fp8_block", "bf16": "bfloat16"}
KV_TYPES = {"fp8": "fp8", "bf16": "bfloat16"}


def module_signature(model: Any) -> tuple[float, ...]:
    """A model's DSA module dimensions in ``SIGNATURE`` order (``config.ModelShape``)."""
    dims = model.dsa_dims(1)
    return tuple(float(dims[k]) for k in SIGNATURE)


@lru_cache(maxsize=64)
def _table_model_signature(datasets_dir: str, name: str) -> tuple[float, ...] | None:
    """The module signature of a table's ``model`` column, from its bundled config (None: not bundled)."""
    from components.deployments.config import DeploymentError, model_shape

    try:
        shape = model_shape(name, Path(datasets_dir))
    except DeploymentError:
        return None
    return module_signature(shape) if shape.is_dsa else None


@lru_cache(maxsize=32)
def dsa_tables(
    datasets_dir: str, device_id: str, framework: str | None
) -> list[tuple[str, str, pd.DataFrame]]:
    """(framework, version, rows of both phases) per version of ``device_id`` with both tables, best first
    (``framework``'s own, newest)."""
    from components.ingest.aiconfigurator import table_files

    root = Path(datasets_dir) / "aiconfigurator"
    found: dict[tuple[str, str], dict[str, Path]] = {}
    for phase, table in PHASES.items():
        for f in table_files(root, "sparse_attention", table):
            if f.device_id == device_id:
                found.setdefault((f.framework, f.version), {})[phase] = f.path
    ranked = sorted(
        (key for key, paths in found.items() if len(paths) == len(PHASES)),
        key=lambda key: (key[0] == framework, _version_key(key[1])),
        reverse=True,
    )
    out = []
    for fw, version in ranked:
        frames = []
        for phase, path in found[(fw, version)].items():
            frame = pd.read_parquet(path)
            frame = frame[frame["op_name"] == PHASES[phase]]  # not the skip-indexer variant (GLM-5.2)
            frames.append(frame.assign(phase=phase))
        rows = pd.concat(frames, ignore_index=True)
        rows["signature"] = [_table_model_signature(datasets_dir, str(m)) for m in rows["model"]]
        out.append((fw, version, rows[rows["signature"].notna()]))
    return out


Curves = list[tuple[float, np.ndarray, np.ndarray]]


def _curves(rows: pd.DataFrame, outer: str, inner: str) -> Curves:
    """Per measured ``outer`` value: its ``inner`` values (a context length, shifted by one so a zero
    prefix has a logarithm) and the median latency at each."""
    out = []
    for value, group in rows.groupby(outer):
        ys = group.groupby(inner)["latency"].median()
        out.append((float(value), ys.index.to_numpy(float) + 1.0, ys.to_numpy(float)))
    return out


def _along(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    """One curve at ``x`` (log-log; a single point answers only itself), NaN outside its range."""
    if len(xs) == 1:
        return float(ys[0]) if xs[0] == x else np.nan
    return float(_interp_log(np.array([x]), xs, ys)[0])


def _interp_curves(curves: Curves, x_out: float, x_in: float) -> float:
    """Log-log interpolation in ``inner`` within each curve, then across ``outer``; NaN outside. A curve
    whose contexts stop short of ``x_in`` (large decode batches stop at 4k; a prefill chunk of 2k tokens is
    measured after a prefix only) is carried on by the growth the nearest curve that reaches ``x_in`` shows
    from that curve's edge on."""
    x = x_in + 1.0
    points = []
    for value, xs, ys in curves:
        y = _along(xs, ys, x)
        edge = float(xs[-1]) if x > xs[-1] else float(xs[0])
        if not np.isfinite(y):
            reach = [c for c in curves if c[1][0] <= min(x, edge) and c[1][-1] >= max(x, edge)]
            if reach:
                _, rx, ry = min(reach, key=lambda c: abs(np.log(c[0] / value)))
                y = float(ys[xs == edge][0]) * _along(rx, ry, x) / _along(rx, ry, edge)
        if np.isfinite(y):
            points.append((value, y))
    if not points:
        return np.nan
    px, py = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    return _along(px, py, x_out)


def _kernel_rows(rows: pd.DataFrame, kv_len: float, topk: float) -> pd.DataFrame:
    """The rows of the kernel the engine runs at this context: a dense kernel while the context fits in
    the top-k (where the table has one), else the sparse one."""
    kernels = list(rows["kernel_source"].unique())
    dense = [k for k in kernels if "dense" in str(k)]
    sparse = [k for k in kernels if k not in dense]
    pick = dense if (dense and kv_len <= topk) or not sparse else sparse
    return rows[rows["kernel_source"].isin(pick)]


def _projection_curve(context: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, microseconds) of the module's projections in a prefill: at each token count (batch x
    chunk, no cached prefix) the fastest measured module -- the one whose attention is smallest."""
    fresh = context[context["step"] == 0]
    env = fresh.assign(tokens=fresh["batch_size"] * fresh["isl"]).groupby("tokens")["latency"].min()
    return env.index.to_numpy(float), env.to_numpy(float)


def _module_us(groups: dict, memo: dict, key: tuple, b: float, s: float, ctx: float, topk: float) -> float:
    """One row's whole-module time (milliseconds): a decode batch at its context, or b chunks of s tokens
    after ctx - s cached ones (b times one)."""
    dense = ctx <= topk
    if (*key, dense) not in memo:
        group = _kernel_rows(groups[key], ctx, topk)
        if key[2] == "generation":
            memo[(*key, dense)] = _curves(group, "batch_size", "step")
        else:  # one sequence's chunk after a cached prefix
            memo[(*key, dense)] = _curves(group[group["batch_size"] == 1], "isl", "step")
    if key[2] == "generation":
        return _interp_curves(memo[(*key, dense)], b, ctx)
    return b * _interp_curves(memo[(*key, dense)], s, ctx - s)


def _projection_us(groups: dict, memo: dict, key: tuple, b: float, s: float) -> float:
    """The module's per-token part (milliseconds): a decode batch at the shortest context, or a prefill's
    b x s tokens on the projection curve."""
    if key[2] == "generation":
        return _module_us(groups, memo, key, b, 1.0, 1.0, np.inf)
    if ("proj", *key) not in memo:
        memo[("proj", *key)] = _projection_curve(groups[key])
    xs, ys = memo[("proj", *key)]
    return _along(xs, ys, b * s) if len(xs) else np.nan


def measured_dsa_us(rows: pd.DataFrame, shape: Mapping[str, Any], dtype: str, kv_dtype: str) -> np.ndarray:
    """Measured time (microseconds) of each row of a ``dsa`` shape, NaN where the tables do not cover it.
    Its ``op`` part: ``proj`` the per-token part (``_projection_us``), ``attn`` the whole module less it
    (never below 0: ``time_ops`` lifts it to its speed of light), default the whole module."""
    part = str(shape.get("op") or "both")
    names = ("B", "S", "KV", "H", *SIGNATURE)
    dims = {k: np.atleast_1d(np.asarray(shape[k], dtype="float64")) for k in names}
    n = max(len(v) for v in dims.values())
    d = {k: np.broadcast_to(v, (n,)) for k, v in dims.items()}
    out = np.full(n, np.nan)
    gemm, kv = GEMM_TYPES.get(dtype), KV_TYPES.get(kv_dtype)
    if gemm is None or kv is None:
        return out
    rows = rows[(rows["gemm_type"] == gemm) & (rows["kv_cache_dtype"] == kv)]
    groups = {(sig, float(h), ph): g for (sig, h, ph), g in rows.groupby(["signature", "num_heads", "phase"])}
    memo: dict[tuple, Any] = {}
    for i in range(n):
        signature = tuple(float(d[k][i]) for k in SIGNATURE)
        b, s, ctx = float(d["B"][i]), float(d["S"][i]), float(max(d["KV"][i], d["S"][i]))
        key = (signature, float(d["H"][i]), "generation" if s == 1 else "context")
        if key not in groups:
            continue
        if part == "proj":  # all the step's tokens at once
            out[i] = _projection_us(groups, memo, key, b, s)
            continue
        whole = _module_us(groups, memo, key, b, s, ctx, float(d["TOPK"][i]))
        if part == "attn":  # a decode batch's module less its projections; each chunk's less its own
            own = (
                _projection_us(groups, memo, key, b, s)
                if s == 1
                else b * _projection_us(groups, memo, key, 1, s)
            )
            whole = max(whole - own, 0.0)
        out[i] = whole
    return out * 1e3


def dsa_measured(
    spec: Any, framework: str | None, shape: Mapping[str, Any], datasets_dir: Path, dtype: str, kv: str
) -> tuple[np.ndarray, str] | None:
    """(times with NaN where unmeasured, "framework version") from ``spec``'s own tables, or None without
    one: the first version (best first) that answers any row answers them all."""
    tables = dsa_tables(str(datasets_dir), str(spec.id), framework)
    for fw, version, rows in tables:
        times = measured_dsa_us(rows, shape, dtype, kv)
        if np.isfinite(times).any():
            return times, f"{fw} {version}"
    return None
