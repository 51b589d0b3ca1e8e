"""The measured store: one row per distinct kernel (device, family, dtype, shape) of the measured tables.

Sources: AIConfigurator's tables (NVIDIA GPUs) and aiter's tuned tables (AMD MI300X / MI308X, read by
``components.ingest.aiter.tables``: copies across M already left out), each wherever it is under the datasets
folder. aiter's rows take the same per-family layout (its batched GEMMs are family ``bmm``, keyed by B too);
a row faster than its roofline on the catalog spec (17 MI308X rows: placeholder times such as ``us = 1.0``
for a 98304 x 24576 x 1536 GEMM) is physically impossible and stays out of the store (validation
quarantines it in the canonical tables). Every source's rows are quarantined too (``quarantine``) where no
kernel can have measured them: an empty kernel (a size below 1: H100's bf16 and fp8_block GEMM tables hold
882 rows with M = 0, a launch and no work, which the measured tier would return as a GEMM's time), and a
row faster than its compute roofline (H100's int8_wo table: 70 rows beat the bf16 pipe a weight-only GEMM's
math runs on). The manifest counts them per family, GPU and reason. Memory-bound rows may beat the DRAM
roofline (an L2-resident working set: L40S's 96 MB L2 holds many of its small GEMMs), so only aiter's
placeholder rows are judged on the whole roofline.

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

import numpy as np
import pandas as pd

from components.common.atomic import atomic_write_dir
from components.opmodel.store_cache import framework_key

STORE_FAMILIES: tuple[str, ...] = ("gemm", "attention", "moe", "allreduce", "bmm")
MANIFEST_NAME = "store.json"
STORE_VERSION = 3  # 2: impossible rows quarantined (``quarantine``); 3: NeuSight's rows (MEASURED_ONLY_DIR)
MEASURED_ONLY_DIR = "measured_only"  # <family>.parquet there: rows only the measured tier answers from
AITER_FAMILIES: tuple[str, ...] = ("gemm", "moe", "bmm")


def store_keys(family: str) -> list[str]:
    """The columns that identify one kernel of ``family`` in the store."""
    from components.ingest.aiconfigurator import KERNEL_KEYS

    return ["device_id", "dtype", "B", "M", "N", "K"] if family == "bmm" else KERNEL_KEYS[family]


def source_roots(datasets_root: Path) -> dict[str, Path]:
    """Where each store source lives under ``datasets_root``: the datasets folder (``aiconfigurator/``,
    ``aiter/``), or one source's repository root."""
    from components.ingest.aiter import CONFIGS, table_files
    from components.ingest.neusight import DATASET_DIR

    root = Path(datasets_root)
    out = {name: root / name for name in ("aiconfigurator", "aiter") if (root / name).is_dir()}
    if "aiter" in out and not table_files(out["aiter"]):
        del out["aiter"]  # a folder without tuned tables (a project copy's empty stand-in) adds no rows
    if (root / "neusight" / DATASET_DIR).is_dir():
        out["neusight"] = root / "neusight"
    if not out:
        out["aiter" if (root / CONFIGS).is_dir() else "aiconfigurator"] = root
    return out


def below_roofline(frame: pd.DataFrame, family: str, catalog: object) -> np.ndarray:
    """Rows measured faster than their roofline time on the catalog spec (no kernel can be)."""
    from components.physics import roofline as physics

    bad = np.zeros(len(frame), bool)
    keys = physics.SHAPE_KEYS["gemm" if family == "bmm" else family]
    for (device, dtype), index in frame.groupby(["device_id", "dtype"], sort=True).indices.items():
        part = frame.iloc[index]
        shape = {k: part[k].to_numpy(dtype="float64") for k in (*keys[0], *keys[1]) if k in part}
        roof = physics.roofline("gemm" if family == "bmm" else family, dtype, shape, catalog.get(device))
        bad[index] = part["latency_us"].to_numpy(dtype="float64") < roof.time_us
    return bad


EMPTY_REASON = "empty kernel: a size below 1"
COMPUTE_REASON = "faster than its compute roofline"


def quarantine(frame: pd.DataFrame, family: str, catalog: object) -> tuple[pd.DataFrame, dict]:
    """``frame`` without the rows no kernel can have measured, and ``{device: {reason: rows}}`` of those left
    out: an empty kernel (a required size below 1), or a time below the compute roofline on the catalog
    spec (GPUs the catalog lacks are judged on the sizes only)."""
    from components.physics import roofline as physics

    physics_family = "gemm" if family == "bmm" else family
    required, optional = physics.SHAPE_KEYS[physics_family]
    present = [k for k in required if k in frame]
    reason = np.full(len(frame), "", dtype=object)
    if present:
        reason[(frame[present].to_numpy(dtype="float64") < 1).any(axis=1)] = EMPTY_REASON
    keys = ["device_id", "dtype"] + (["kv_dtype"] if "kv_dtype" in frame else [])
    known = set(getattr(catalog, "ids", lambda: [])())
    for key, index in frame.groupby(keys, sort=True, observed=True).indices.items():
        device, dtype = str(key[0]), str(key[1])
        index = index[reason[index] == ""]
        if not len(index) or (known and device not in known):
            continue
        part = frame.iloc[index]
        shape = {k: part[k].to_numpy(dtype="float64") for k in (*required, *optional) if k in part}
        try:
            roof = physics.roofline(
                physics_family, dtype, shape, catalog.get(device), str(key[2]) if len(key) > 2 else None
            )
        except (physics.PhysicsError, KeyError, ValueError):
            continue  # a GPU or dtype without physics: judged on its sizes only
        fast = part["latency_us"].to_numpy(dtype="float64") < roof.compute_us
        reason[index[fast]] = COMPUTE_REASON
    bad = reason != ""
    counts: dict[str, dict[str, int]] = {}
    for (device, why), n in (
        pd.Series(1, index=[frame["device_id"].astype(str)[bad], reason[bad]])
        .groupby(level=[0, 1])
        .size()
        .items()
    ):
        counts.setdefault(str(device), {})[str(why)] = int(n)
    return frame[~bad].reset_index(drop=True), counts


def aiter_frames(root: Path, families: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    """aiter's measured rows per store family (device_id, dtype, shape, latency_us, kernel_source)."""
    from components.devices.catalog import load_catalog
    from components.ingest.aiter import tables

    catalog = load_catalog(user_dir=None)  # the packaged catalog: the store must not depend on user files
    rows, _, _ = tables(root, catalog)
    out = {}
    for family in families:
        if family not in AITER_FAMILIES:
            continue
        part = rows[rows["family"] == family]
        part = part[[*store_keys(family), "latency_us", "kernel_source"]].reset_index(drop=True)
        sizes = [k for k in store_keys(family) if k not in ("device_id", "dtype", "distribution")]
        part = part.astype(
            {k: "int64" for k in sizes}
        )  # the store's schema: integer sizes, as aiconfigurator's
        if not part.empty:
            out[family] = part[~below_roofline(part, family, catalog)]
    return out


def _measured_frames(
    datasets_root: Path, families: tuple[str, ...]
) -> tuple[dict[str, pd.DataFrame], dict[str, dict], dict[str, dict]]:
    from components.ingest.aiconfigurator import READERS, medians

    roots = source_roots(Path(datasets_root))
    parts: dict[str, list[pd.DataFrame]] = {}
    by_framework: dict[str, pd.DataFrame] = {}
    versions: dict[str, dict[str, list[str]]] = {}
    if "aiconfigurator" in roots:
        for family in families:
            if family in READERS:
                raw = READERS[family](roots["aiconfigurator"])
                parts.setdefault(family, []).append(raw)
                if not raw.empty:
                    by_framework[family] = framework_medians(raw, store_keys(family))
                    versions[family] = framework_versions(raw)
    if "aiter" in roots:
        for family, frame in aiter_frames(roots["aiter"], families).items():
            parts.setdefault(family, []).append(frame)
    from components.devices.catalog import load_catalog

    catalog = load_catalog(user_dir=None)
    out, quarantined = {}, {}
    if "neusight" in roots:  # kept apart: the measured tier's rows only (``store_neusight``)
        from components.opmodel.store_neusight import neusight_frames

        neusight, rejected = neusight_frames(roots["neusight"], catalog)
        for family, frame in neusight.items():
            keys = store_keys(family)
            kept, quarantined[f"{MEASURED_ONLY_DIR}/{family}"] = quarantine(
                medians(frame, keys), family, catalog
            )
            out[f"{MEASURED_ONLY_DIR}/{family}"] = kept.sort_values(keys, kind="mergesort").reset_index(
                drop=True
            )
        if rejected:
            quarantined[f"{MEASURED_ONLY_DIR}/unreadable"] = rejected
    for family, frames in parts.items():
        frames = [f for f in frames if not f.empty]
        if not frames:
            continue
        keys = store_keys(family)
        folded = pd.concat([medians(f, keys) for f in frames], ignore_index=True)
        kept, quarantined[family] = quarantine(folded, family, catalog)
        out[family] = kept.sort_values(keys, kind="mergesort").reset_index(drop=True)
    for family, frame in by_framework.items():
        kept, _ = quarantine(
            frame, family, catalog
        )  # the same rows out as the pooled table's (counted there)
        # one framework's rows together (in their order): its row groups are all a reader of it decodes
        by_name = kept.sort_values("framework", kind="mergesort")
        out[f"{FRAMEWORK_DIR}/{family}"] = by_name.reset_index(drop=True)
    return out, quarantined, versions


FRAMEWORK_DIR = "by_framework"  # <family>.parquet there: the rows folded per serving framework
ROW_GROUP = 65536  # rows per parquet row group of a saved table


def framework_medians(raw: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (serving framework, kernel): the repeats of one framework's versions and kernel sources
    folded (``medians``), an ``n_versions`` column counting them. AIConfigurator measured each table under the
    framework that runs it (vllm / sglang / trtllm folders): an engine's step answers from its own kernels
    where its framework measured them (``measured.MeasuredTier.for_framework``)."""
    from components.ingest.aiconfigurator import medians

    raw = raw.assign(framework=framework_name(raw["framework"]))
    out = medians(raw, [*keys, "framework"])
    grouped = raw.groupby([*keys, "framework"], sort=True, observed=True, dropna=False)
    out["n_versions"] = grouped["version"].nunique().to_numpy()  # names: ``framework_versions``
    return out.sort_values(["framework", *keys], kind="mergesort").reset_index(drop=True)


def framework_name(names: pd.Series) -> pd.Series:
    """The serving engine's name as the deployments spell it: the tables write ``VLLM``, ``vLLM``,
    ``SGLang``, ``TRTLLM`` (``components.deployments.engines``: vllm, sglang, trtllm)."""
    return names.astype(str).str.lower().str.replace(r"[-_]", "", regex=True).replace("tensorrtllm", "trtllm")


def framework_versions(raw: pd.DataFrame) -> dict[str, list[str]]:
    """The versions each framework's rows were measured under (the store manifest names them)."""
    pairs = raw[["framework", "version"]].astype(str).assign(framework=framework_name(raw["framework"]))
    pairs = pairs.drop_duplicates()
    return {str(f): sorted(g["version"]) for f, g in pairs.groupby("framework", sort=True)}


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    # row groups of ROW_GROUP rows: a filtered read (``load_framework_rows``) skips the groups whose
    # statistics exclude the filter
    pq.write_table(table, path, compression="zstd", row_group_size=ROW_GROUP)


def save_store(
    frames: dict[str, pd.DataFrame],
    out_dir: Path,
    sources: tuple[str, ...] = (),
    quarantined: dict[str, dict] | None = None,
    versions: dict[str, dict] | None = None,
) -> Path:
    """Write ``{family: frame}`` as ``<family>.parquet`` + a manifest (row counts, devices, the sources read,
    the rows quarantined per family, GPU and reason), atomically."""

    def write(tmp: Path) -> None:
        manifest = {}
        for family, frame in sorted(frames.items()):
            (tmp / family).parent.mkdir(parents=True, exist_ok=True)
            _write_parquet(frame, tmp / f"{family}.parquet")
            manifest[family] = {"rows": len(frame), "devices": sorted(map(str, frame["device_id"].unique()))}
        manifest["measured_only_groups"] = sorted(
            [family.split("/", 1)[1], str(device), str(dtype)]
            for family, frame in frames.items()
            if family.startswith(f"{MEASURED_ONLY_DIR}/")
            for device, dtype in frame[["device_id", "dtype"]].drop_duplicates().itertuples(index=False)
        )
        manifest["sources"], manifest["version"] = sorted(sources), STORE_VERSION
        manifest["quarantined"] = {f: q for f, q in sorted((quarantined or {}).items()) if q}
        if versions:  # per family, the versions each serving framework's rows were measured under
            manifest["framework_versions"] = versions
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    atomic_write_dir(Path(out_dir), write)
    return Path(out_dir)


def build_store(
    datasets_root: Path, out_dir: Path, families: tuple[str, ...] = STORE_FAMILIES
) -> dict[str, int]:
    """Read the aiconfigurator and aiter tables under ``datasets_root`` (the datasets folder or one source's
    repository root), fold repeats, save the store under ``out_dir``; returns the rows per family."""
    frames, quarantined, versions = _measured_frames(Path(datasets_root), families)
    save_store(frames, Path(out_dir), tuple(source_roots(Path(datasets_root))), quarantined, versions)
    return {family: len(frame) for family, frame in frames.items()}


def load_framework_rows(folder: Path, family: str, framework: str) -> pd.DataFrame | None:
    """``family``'s rows one serving framework measured (``framework_medians``), None where the store has
    no per-framework table (a store built before it kept them, or a source without frameworks)."""
    path = Path(folder) / FRAMEWORK_DIR / f"{family}.parquet"
    if not path.is_file():
        return None
    frame = pd.read_parquet(path, filters=[("framework", "==", framework_key(framework))])
    return frame.drop(columns=["framework", "n_versions"])


def built_from(folder: Path) -> list[str]:
    """The sources a saved store was built from (a store older than the manifest's list: aiconfigurator)."""
    manifest = json.loads((Path(folder) / MANIFEST_NAME).read_text())
    return list(manifest.get("sources", ["aiconfigurator"]))


def store_version(folder: Path) -> int:
    """The layout version a saved store was built with (1: before the manifest said)."""
    return int(json.loads((Path(folder) / MANIFEST_NAME).read_text()).get("version", 1))


def load_store(
    folder: Path, families: tuple[str, ...] | None = None, measured_only: bool = False
) -> dict[str, pd.DataFrame]:
    """``{family: frame}`` of a saved store (the families present, or those asked that are present).
    ``measured_only``: with the rows only the measured tier answers from (NeuSight's) appended; the spec
    model, the transfer fit and the op engine's gate splits read the store without them."""
    folder = Path(folder)
    if not (folder / MANIFEST_NAME).is_file():
        raise FileNotFoundError(f"measured store {folder}: no {MANIFEST_NAME} (build it with build_store)")
    out = {}
    for family in families or STORE_FAMILIES:
        parts = [folder / f"{family}.parquet"]
        parts += [folder / MEASURED_ONLY_DIR / f"{family}.parquet"] if measured_only else []
        frames = [pd.read_parquet(p) for p in parts if p.is_file()]
        if frames:
            out[family] = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return out
