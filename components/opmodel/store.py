"""The measured store: one row per distinct kernel (device, family, dtype, shape) of the measured tables.

``build_store`` folds every repeat of a kernel (the same shape and dtype measured under several frameworks,
versions or kernel sources) into its median latency, repeat count and spread
(``components.ingest.aiconfigurator.medians``), and writes one parquet file per op family under a folder,
atomically (a reader sees the old folder or the whole new one). Rows are sorted by their keys, so the files
are the same bytes whatever order the tables were read in: the store is hash-deterministic, fit for DVC.
``load_store`` reads it back as ``{family: DataFrame}``. Why a store: the measured tier interpolates these
rows at question time, and the spec tier learns from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from components.common.atomic import atomic_write_dir

STORE_FAMILIES: tuple[str, ...] = ("gemm", "attention", "moe", "allreduce")
MANIFEST_NAME = "store.json"


def _measured_frames(datasets_root: Path, families: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    from components.ingest.aiconfigurator import KERNEL_KEYS, READERS, medians

    root = Path(datasets_root)
    root = root / "aiconfigurator" if (root / "aiconfigurator").is_dir() else root
    out = {}
    for family in families:
        frame = READERS[family](root)
        if frame.empty:
            continue
        folded = medians(frame, KERNEL_KEYS[family])
        out[family] = folded.sort_values(KERNEL_KEYS[family], kind="mergesort").reset_index(drop=True)
    return out


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    pq.write_table(table, path, compression="zstd")


def save_store(frames: dict[str, pd.DataFrame], out_dir: Path) -> Path:
    """Write ``{family: frame}`` as ``<family>.parquet`` + a manifest (row counts), atomically."""

    def write(tmp: Path) -> None:
        manifest = {}
        for family, frame in sorted(frames.items()):
            _write_parquet(frame, tmp / f"{family}.parquet")
            manifest[family] = {"rows": len(frame), "devices": sorted(map(str, frame["device_id"].unique()))}
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    atomic_write_dir(Path(out_dir), write)
    return Path(out_dir)


def build_store(
    datasets_root: Path, out_dir: Path, families: tuple[str, ...] = STORE_FAMILIES
) -> dict[str, int]:
    """Read the aiconfigurator tables under ``datasets_root`` (the datasets folder or the repository root),
    fold repeats, save the store under ``out_dir``; returns the rows per family."""
    frames = _measured_frames(Path(datasets_root), families)
    save_store(frames, Path(out_dir))
    return {family: len(frame) for family, frame in frames.items()}


def load_store(folder: Path, families: tuple[str, ...] | None = None) -> dict[str, pd.DataFrame]:
    """``{family: frame}`` of a saved store (the families present, or those asked that are present)."""
    folder = Path(folder)
    if not (folder / MANIFEST_NAME).is_file():
        raise FileNotFoundError(f"measured store {folder}: no {MANIFEST_NAME} (build it with build_store)")
    out = {}
    for family in families or STORE_FAMILIES:
        path = folder / f"{family}.parquet"
        if path.is_file():
            out[family] = pd.read_parquet(path)
    return out
