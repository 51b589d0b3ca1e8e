"""NVIDIA AIConfigurator's measured kernel tables, read from upstream's layout into one frame per op family.

Upstream keeps
``aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/<table>_perf.parquet``
(latency in ms) and each GPU's spec sheet as ``systems/<gpu>.yaml``. The readers here normalise the tables
the op engine and the canonical adapter need -- GEMM, context/generation attention, MoE, all-reduce -- to
the shape names of kernelcast's question schema (``components/physics/roofline.py``), in microseconds,
keeping framework, version and kernel source as provenance. The same shape measured under several
versions or kernels is kept as repeats (``medians`` folds them into one row with the spread); nothing
is averaged away silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SYSTEMS_DIR = "aic-core/src/aiconfigurator_core/systems"
# upstream dtype spellings -> kernelcast's (components/physics/roofline.GEMM_DTYPES);
# others are dropped, counted
DTYPE_NAMES: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "bf16": "bf16",
    "fp8": "fp8",
    "fp8_static": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "sq": "int8",
    "int8": "int8",
    "int8_wo": "int8_wo",
    "int4_wo": "int4_wo",
    "float32": "fp32",
    "fp32": "fp32",
}
# the MoE tables' spellings beside those: gpt-oss's MXFP4 experts as the engines run them on GPUs without an
# fp4 pipe (4-bit weights, 16-bit math: int4_wo's physics), the only table that measured gpt-oss's site
MOE_DTYPE_NAMES: dict[str, str] = {**DTYPE_NAMES, "w4a16_mxfp4": "int4_wo"}
ELEMENT_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "int8": 1.0}
PROVENANCE: tuple[str, ...] = ("framework", "version", "kernel_source")
# Where each row came from (kept when present, for the canonical adapter's measurements): the upstream path of
# its file, its 0-based row there, the CUDA device name the table recorded (the GPU folder where it has none).
ROW_PROVENANCE: tuple[str, ...] = ("gpu_folder", "upstream_file", "upstream_row", "device_name_raw")


@dataclass(frozen=True)
class TableFile:
    gpu_folder: str
    device_id: (
        str | None
    )  # None: a GPU folder the catalog does not name (its spec sheet is in systems/<gpu>.yaml)
    op: str
    framework: str
    version: str
    table: str
    path: Path


def systems_dir(root: Path) -> Path:
    """``root`` is the repository root (``<datasets>/aiconfigurator``) or already its ``systems`` folder."""
    root = Path(root)
    return root if (root / "data").is_dir() and not (root / SYSTEMS_DIR).is_dir() else root / SYSTEMS_DIR


def table_files(root: Path, op: str, table: str) -> list[TableFile]:
    """Every ``<table>_perf.parquet`` of ``op`` under the tree, sorted (deterministic order)."""
    from components.devices.aiconfigurator_sheet import aiconfigurator_device_id

    data = systems_dir(root) / "data"
    files = []
    for path in sorted(data.glob(f"*/{op}/*/*/{table}_perf.parquet")):
        gpu, _, framework, version = path.relative_to(data).parts[:4]
        files.append(TableFile(gpu, aiconfigurator_device_id(gpu), op, framework, version, table, path))
    return files


def _read(files: Iterable[TableFile], columns: tuple[str, ...]) -> pd.DataFrame:
    import pyarrow.parquet as pq

    frames = []
    for f in files:
        names = set(pq.read_schema(f.path).names)
        frame = pq.read_table(f.path, columns=[c for c in (*columns, "device") if c in names]).to_pandas()
        upstream = f"{SYSTEMS_DIR}/data/{f.gpu_folder}/{f.op}/{f.framework}/{f.version}/{f.path.name}"
        frame["upstream_file"] = pd.Categorical([upstream] * len(frame))
        frame["upstream_row"] = np.arange(len(frame), dtype="int64")
        device = (
            frame.pop("device").astype(str)
            if "device" in frame
            else pd.Series(f.gpu_folder, index=frame.index)
        )
        frame["device_name_raw"] = device.astype("category")
        frame["gpu_folder"] = f.gpu_folder
        frame["device_id"] = f.device_id if f.device_id is not None else f.gpu_folder
        # Older tables carry no framework/version columns: the folder names are the provenance.
        frame["framework"] = frame["framework"].astype(str) if "framework" in frame else f.framework
        frame["version"] = frame["version"].astype(str) if "version" in frame else f.version
        if "kernel_source" not in frame:
            frame["kernel_source"] = f.framework
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["gpu_folder", "device_id", *columns])
    return pd.concat(frames, ignore_index=True)


def _dtypes(raw: pd.Series, names: dict[str, str] = DTYPE_NAMES) -> tuple[pd.Series, int]:
    mapped = raw.astype(str).str.lower().map(names)
    return mapped, int(mapped.isna().sum())


def _finish(frame: pd.DataFrame, keep: list[str], dropped: int, latency: str = "latency") -> pd.DataFrame:
    frame = frame.assign(latency_us=pd.to_numeric(frame[latency], errors="coerce") * 1000.0)
    bad = ~np.isfinite(frame["latency_us"]) | (frame["latency_us"] <= 0)
    rows = [c for c in ROW_PROVENANCE if c in frame.columns]
    out = frame.loc[~bad, ["device_id", *keep, "latency_us", *PROVENANCE, *rows]].reset_index(drop=True)
    out.attrs["dropped"] = dropped + int(bad.sum())
    return out


def read_gemm(root: Path) -> pd.DataFrame:
    """device_id, dtype, M, N, K, latency_us, framework, version, kernel_source."""
    raw = _read(
        table_files(root, "gemm", "gemm"),
        ("framework", "version", "kernel_source", "gemm_dtype", "m", "n", "k", "latency"),
    )
    dtype, dropped = _dtypes(raw["gemm_dtype"])
    raw = raw.assign(dtype=dtype, M=raw["m"], N=raw["n"], K=raw["k"])[dtype.notna()]
    return _finish(raw, ["dtype", "M", "N", "K"], dropped)


ATTENTION_COLUMNS = (
    "framework",
    "version",
    "kernel_source",
    "batch_size",
    "isl",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "beam_width",
    "attn_dtype",
    "kv_cache_dtype",
    "step",
    "window_size",
    "latency",
)


def read_attention(root: Path) -> pd.DataFrame:
    """device_id, phase, dtype, kv_dtype, B, S, KV, H, HKV, D, W, latency_us, provenance.

    Prefill (context tables): S = isl query tokens over a context of KV = isl + step (step: a cached prefix, 0
    almost always). Decode (generation tables): one new token (S = 1) over KV = isl + step. HKV = 0 upstream
    means one KV head per query head (MHA); W = 0 is no sliding window."""
    parts = []
    dropped = 0
    for table, phase in (("context_attention", "prefill"), ("generation_attention", "decode")):
        raw = _read(table_files(root, "attention", table), ATTENTION_COLUMNS)
        if raw.empty:
            continue
        dtype, _ = _dtypes(raw["attn_dtype"])
        kv_dtype, _ = _dtypes(raw["kv_cache_dtype"] if "kv_cache_dtype" in raw else raw["attn_dtype"])
        beam = pd.to_numeric(raw["beam_width"], errors="coerce").fillna(1) if "beam_width" in raw else 1
        step = pd.to_numeric(raw["step"], errors="coerce").fillna(0) if "step" in raw else 0
        isl = pd.to_numeric(raw["isl"], errors="coerce")
        heads = pd.to_numeric(raw["num_heads"], errors="coerce")
        kv_heads = pd.to_numeric(raw["num_key_value_heads"], errors="coerce")
        frame = raw.assign(
            phase=phase,
            dtype=dtype,
            kv_dtype=kv_dtype,
            B=pd.to_numeric(raw["batch_size"], errors="coerce") * beam,
            S=isl if phase == "prefill" else 1,
            KV=isl + step,
            H=heads,
            HKV=kv_heads.where(kv_heads > 0, heads),
            D=raw["head_dim"],
            W=(pd.to_numeric(raw["window_size"], errors="coerce").fillna(0) if "window_size" in raw else 0),
        )
        keep = dtype.notna() & kv_dtype.notna()
        dropped += int((~keep).sum())
        parts.append(frame[keep])
    if not parts:
        return pd.DataFrame(
            columns=[
                "device_id",
                "phase",
                "dtype",
                "kv_dtype",
                "B",
                "S",
                "KV",
                "H",
                "HKV",
                "D",
                "W",
                "latency_us",
                *PROVENANCE,
            ]
        )
    return _finish(
        pd.concat(parts, ignore_index=True),
        ["phase", "dtype", "kv_dtype", "B", "S", "KV", "H", "HKV", "D", "W"],
        dropped,
    )


def read_moe(root: Path) -> pd.DataFrame:
    """device_id, dtype, T, E, topk, H, I, tp, ep, distribution, latency_us, provenance (the fused-MoE tables;
    the wide-EP DeepEP tables measure dispatch + experts together and are left out)."""
    raw = _read(
        table_files(root, "moe", "moe"),
        (
            "framework",
            "version",
            "kernel_source",
            "moe_dtype",
            "num_tokens",
            "hidden_size",
            "inter_size",
            "topk",
            "num_experts",
            "moe_tp_size",
            "moe_ep_size",
            "distribution",
            "latency",
        ),
    )
    dtype, dropped = _dtypes(raw["moe_dtype"], MOE_DTYPE_NAMES)
    raw = raw.assign(
        dtype=dtype,
        T=raw["num_tokens"],
        E=raw["num_experts"],
        H=raw["hidden_size"],
        I=raw["inter_size"],
        tp=raw["moe_tp_size"],
        ep=raw["moe_ep_size"],
        distribution=raw.get("distribution", "balanced"),
    )[dtype.notna()]
    return _finish(raw, ["dtype", "T", "E", "topk", "H", "I", "tp", "ep", "distribution"], dropped)


def read_allreduce(root: Path) -> pd.DataFrame:
    """device_id, dtype, bytes, gpus, latency_us, provenance: NCCL all-reduce and the frameworks' custom
    all-reduce. Upstream's ``message_size`` counts elements (collector/network/collect_nccl.py: size //
    bytes_per_element), so bytes = message_size x element size."""
    parts = []
    dropped = 0
    for table, dtype_column in (("nccl", "nccl_dtype"), ("custom_allreduce", "allreduce_dtype")):
        raw = _read(
            table_files(root, "comm", table),
            (
                "framework",
                "version",
                "kernel_source",
                "op_name",
                dtype_column,
                "num_gpus",
                "message_size",
                "latency",
            ),
        )
        if raw.empty:
            continue
        raw = raw[raw["op_name"].astype(str) == "all_reduce"] if "op_name" in raw else raw
        dtype, d = _dtypes(raw[dtype_column])
        dropped += d
        element = dtype.map(ELEMENT_BYTES)
        frame = raw.assign(
            dtype=dtype,
            gpus=raw["num_gpus"],
            bytes=pd.to_numeric(raw["message_size"], errors="coerce") * element,
        )
        parts.append(frame[dtype.notna() & element.notna()])
    if not parts:
        return pd.DataFrame(columns=["device_id", "dtype", "bytes", "gpus", "latency_us", *PROVENANCE])
    return _finish(pd.concat(parts, ignore_index=True), ["dtype", "bytes", "gpus"], dropped)


READERS = {"gemm": read_gemm, "attention": read_attention, "moe": read_moe, "allreduce": read_allreduce}
# The columns that identify one kernel of each family (what repeats share).
KERNEL_KEYS: dict[str, list[str]] = {
    "gemm": ["device_id", "dtype", "M", "N", "K"],
    "attention": ["device_id", "phase", "dtype", "kv_dtype", "B", "S", "KV", "H", "HKV", "D", "W"],
    "moe": ["device_id", "dtype", "T", "E", "topk", "H", "I", "tp", "ep", "distribution"],
    "allreduce": ["device_id", "dtype", "bytes", "gpus"],
}


def medians(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per distinct kernel: the median latency of its repeats, their count and spread, and how many
    kernel sources measured it."""
    grouped = frame.groupby(keys, sort=True, observed=True, dropna=False)
    out = (
        grouped["latency_us"]
        .agg(latency_us="median", n_repeats="size", latency_min_us="min", latency_max_us="max")
        .reset_index()
    )
    out["n_kernel_sources"] = grouped["kernel_source"].nunique().to_numpy()
    return out
