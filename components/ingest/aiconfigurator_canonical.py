"""The ``aiconfigurator`` ingest adapter: NVIDIA AIConfigurator's measured tables -> the canonical tables.

Reads upstream's layout (``systems/data/<gpu>/<op>/<framework>/<version>/<table>_perf.parquet``) through the
readers of ``components.ingest.aiconfigurator`` (one reader; this module only maps their frames): GEMM in
every dtype the readers name, context (prefill) and generation (decode) attention, fused MoE, NCCL and custom
all-reduce. Latency is milliseconds upstream, microseconds here.

Identity and repeats: a kernel is (family, op, dtype, shape) -- the shape includes the attention KV-cache
dtype and window and the MoE routing distribution. The same kernel measured on one GPU under several
frameworks, versions or kernel sources is kept as *repeats*: one measurement row each, all under one
``kernel_id``, with framework/version/kernel source in ``params_json`` and ``run_id`` (so their spread is
the noise floor).
Ops: ``gemm``; attention ``prefill`` | ``decode``; ``moe``; all-reduce ``nccl`` | ``custom`` (different
libraries, so different kernels; a framework's graph/eager custom variants are repeats).

Sample: the full tables hold ~10M rows (~0.9M distinct kernels); the canonical tables take a deterministic,
deduplicated sample of at most ``ingest.aiconfigurator_max_kernels`` kernels (params.yaml), chosen by a salted
hash of ``kernel_id`` with the budget shared evenly between (family, op) groups (a small group is taken whole,
its unused share goes to the others). Every measurement of a chosen kernel -- each GPU, each repeat -- is
kept.
The full tables stay readable through the readers (the measured store). ``rows_in`` counts the sampled rows
and the rejected ones (a shape with no work -- upstream's M = 0 GEMMs -- or a GPU neither catalog nor sheet
gives);
the notes give the full tables' sizes and what the readers dropped (unknown dtypes, bad latencies), by family.

Devices: a GPU folder the catalog does not name is taken from its spec sheet (``systems/<gpu>.yaml``,
``components.devices.spec_from_aiconfigurator_sheet``), validated, returned in ``AdapterOutput.devices`` and
noted; where that fails its rows are rejected as an unknown device, with the sheet's error in the notes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import MEASUREMENT_COLUMNS, RAW_LIMIT, conform, stable_id

SOURCE = "aiconfigurator"
DEFAULT_MAX_KERNELS = 24_000
SAMPLE_SALT = "aiconfigurator-sample-v1"
# CUDA-graph replays timed with torch.cuda.Event (collector/helper.py benchmark_with_power)
PROFILER = "cuda_event"

# family -> the shape keys of a kernel (physics.SHAPE_KEYS names) and the non-numeric identity keys.
SHAPES: dict[str, tuple[str, ...]] = {
    "gemm": ("M", "N", "K"),
    "attention": ("B", "S", "KV", "H", "HKV", "D", "W"),
    "moe": ("T", "E", "topk", "H", "I", "tp", "ep"),
    "allreduce": ("bytes", "gpus"),
}
LABELS: dict[str, tuple[str, ...]] = {"attention": ("kv_dtype",), "moe": ("distribution",)}
ROW_COLUMNS: tuple[str, ...] = (
    "device_id",
    "device_name_raw",
    "gpu_folder",
    "upstream_file",
    "upstream_row",
    "framework",
    "version",
    "kernel_source",
    "latency_us",
)


# ----------------------------------------------------------------------------------------------
# Kernel identity
# ----------------------------------------------------------------------------------------------
def _op_column(family: str, frame: pd.DataFrame) -> pd.Series:
    if family == "attention":
        return frame["phase"].astype(str)
    if family == "allreduce":
        nccl = frame["upstream_file"].astype(str).str.endswith("/nccl_perf.parquet")
        return pd.Series(np.where(nccl, "nccl", "custom"), index=frame.index)
    return pd.Series(family, index=frame.index)


def shape_json_column(frame: pd.DataFrame, family: str) -> pd.Series:
    """``canonical_json`` of each row's shape (numbers as integers, labels as strings), vectorised:
    the same text ``schema.canonical_json`` gives for the dict, built without a Python loop."""
    keys = sorted((*SHAPES[family], *LABELS.get(family, ())))
    parts = []
    for key in keys:
        if key in LABELS.get(family, ()):
            value = '"' + frame[key].astype(str) + '"'
        else:
            value = pd.to_numeric(frame[key]).round().astype("int64").astype(str)
        parts.append(f'"{key}":' + value)
    text = parts[0]
    for part in parts[1:]:
        text = text + "," + part
    return "{" + text + "}"


def _kernel_table(family: str, frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The distinct kernels of one family's rows and, per row, the position of its kernel in that table."""
    identity = pd.DataFrame({"op": _op_column(family, frame), "dtype": frame["dtype"].astype(str)})
    for key in (*SHAPES[family], *LABELS.get(family, ())):
        identity[key] = frame[key].to_numpy()
    codes = identity.groupby(list(identity.columns), sort=False, dropna=False).ngroup().to_numpy()
    first = pd.Series(np.arange(len(codes))).groupby(codes, sort=True).first().to_numpy()
    kernels = identity.iloc[first].reset_index(drop=True)
    kernels["shape_json"] = shape_json_column(kernels, family).to_numpy()
    kernels["family"] = family
    kernels["kernel_id"] = [
        stable_id(SOURCE, family, op, dtype, shape)
        for op, dtype, shape in zip(kernels["op"], kernels["dtype"], kernels["shape_json"], strict=True)
    ]
    return kernels, codes


# Shape keys that may be 0 (W: no sliding window); every other dimension must be >= 1 (all-reduce: >= 2 GPUs).
MAY_BE_ZERO: frozenset[str] = frozenset({"W"})


def shape_problems(family: str, frame: pd.DataFrame) -> pd.Series:
    """Per row the first shape problem ("M = 0: no work", ...), <NA> where the shape is a real kernel.
    Upstream's GEMM tables hold M = 0 rows (an empty product, timed at ~0.5 us): no kernel to learn from."""
    problem = pd.Series(pd.NA, index=frame.index, dtype="object")
    for key in SHAPES[family]:
        values = pd.to_numeric(frame[key], errors="coerce")
        floor = 0 if key in MAY_BE_ZERO else (2 if (family, key) == ("allreduce", "gpus") else 1)
        bad = (values.isna() | (values < floor)) & problem.isna()
        if bad.any():
            problem[bad] = key + " = " + values[bad].astype(str) + f" (expected >= {floor}): no work to time"
    return problem


# ----------------------------------------------------------------------------------------------
# The sample
# ----------------------------------------------------------------------------------------------
def group_quotas(sizes: dict[str, int], budget: int) -> dict[str, int]:
    """Share ``budget`` evenly between groups; a group smaller than its share is taken whole and what it
    leaves is shared among the rest (water-filling). Deterministic: remainders go to the groups in name
    order."""
    quotas = {name: 0 for name in sizes}
    remaining = max(int(budget), 0)
    open_groups = sorted(sizes, key=lambda name: (sizes[name], name))
    while open_groups and remaining > 0:
        share = remaining // len(open_groups)
        smallest = open_groups[0]
        if sizes[smallest] <= share:
            quotas[smallest] = sizes[smallest]
            remaining -= sizes[smallest]
            open_groups.pop(0)
            continue
        extra = remaining - share * len(open_groups)
        for i, name in enumerate(sorted(open_groups)):
            quotas[name] = share + (1 if i < extra else 0)
        break
    return quotas


def sample_rank(kernel_ids: pd.Series) -> pd.Series:
    """Salted hash of each kernel_id: the order kernels enter the sample (independent of the ids' own order,
    which the splits hash)."""
    return pd.Series(
        [hashlib.sha1(f"{SAMPLE_SALT}\x1f{k}".encode()).hexdigest() for k in kernel_ids],
        index=kernel_ids.index,
    )


def choose_kernels(kernels: pd.DataFrame, max_kernels: int | None) -> pd.Series:
    """Boolean mask over ``kernels`` (columns kernel_id, family, op): the hash-chosen sample."""
    if max_kernels is None or len(kernels) <= max_kernels:
        return pd.Series(True, index=kernels.index)
    group = kernels["family"] + "/" + kernels["op"]
    quotas = group_quotas(group.value_counts().to_dict(), max_kernels)
    rank = sample_rank(kernels["kernel_id"])
    order = pd.DataFrame({"group": group, "rank": rank}).sort_values(["group", "rank"], kind="mergesort")
    position = order.groupby("group", sort=False).cumcount()
    keep = position < order["group"].map(quotas)
    return keep.reindex(kernels.index)


# ----------------------------------------------------------------------------------------------
# Devices
# ----------------------------------------------------------------------------------------------
def resolve_devices(frame: pd.DataFrame, root: Path, catalog: Any) -> tuple[pd.Series, list, list[str]]:
    """Per row the catalog id (or the id of a sheet-derived spec; <NA> where neither), the sheet-derived
    specs, and notes. The readers give a catalog id for known GPU folders and the folder name otherwise; an
    unknown folder is then looked up by the CUDA device name its tables recorded, and only then by its
    sheet."""
    from components.devices import SpecError, spec_from_aiconfigurator_sheet
    from components.ingest.aiconfigurator import systems_dir

    def lookup(name: str) -> str | None:
        for find in (catalog.get, catalog.resolve):
            try:
                return find(name).id
            except LookupError:
                continue
        return None

    ids: dict[tuple[str, str, str], object] = {}
    sheets: dict[str, object] = {}
    specs: list = []
    notes: list[str] = []
    keys = frame[["device_id", "gpu_folder", "device_name_raw"]].astype(str)
    for device, folder, raw in keys.drop_duplicates().itertuples(index=False):
        found = lookup(device) or lookup(raw)
        if found is None and folder not in sheets:
            sheets[folder] = pd.NA
            sheet = systems_dir(root) / f"{folder}.yaml"
            if not sheet.is_file():
                notes.append(
                    f"GPU folder {folder!r} ({raw}): not in the catalog and no spec sheet "
                    f"{sheet.name}: rows rejected"
                )
            else:
                try:
                    spec = spec_from_aiconfigurator_sheet(sheet, catalog)
                except (SpecError, ValueError) as exc:
                    notes.append(
                        f"GPU folder {folder!r} ({raw}): not in the catalog; its sheet does not "
                        f"validate ({exc}): rows rejected"
                    )
                else:
                    sheets[folder] = spec.id
                    specs.append(spec)
                    notes.append(
                        f"GPU folder {folder!r} ({raw}): not in the catalog, taken from its spec "
                        f"sheet {sheet.name} as {spec.id!r} ({spec.notes})"
                    )
        ids[(device, folder, raw)] = found if found is not None else sheets[folder]
    triples = zip(keys["device_id"], keys["gpu_folder"], keys["device_name_raw"], strict=True)
    per_row = pd.Series(list(triples), index=frame.index).map(ids)
    return per_row.astype("string"), specs, notes


# ----------------------------------------------------------------------------------------------
# The adapter
# ----------------------------------------------------------------------------------------------
def _row_columns(family: str) -> tuple[str, ...]:
    return (*ROW_COLUMNS, "dtype", *SHAPES[family], *LABELS.get(family, ()))


def _slim(family: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The columns the sample needs, text as categories: a family's full table costs a fraction of its read
    size while the next family is read (peak memory: one family's table, not all four)."""
    keep = [c for c in _row_columns(family) if c in frame.columns]
    slim = frame[keep].copy()
    for column in keep:
        if not pd.api.types.is_numeric_dtype(slim[column]):
            slim[column] = slim[column].astype("category")
    slim.attrs = dict(frame.attrs)
    return slim


def _flops(family: str, rows: pd.DataFrame) -> np.ndarray:
    """FLOPs by op definition (``components.physics.roofline.op_work``), per (dtype, kv dtype) group."""
    from components.physics.roofline import PhysicsError, op_work

    out = np.full(len(rows), np.nan)
    keys = rows["dtype"].astype(str) + ("|" + rows["kv_dtype"].astype(str) if family == "attention" else "")
    for key, index in rows.groupby(keys, sort=True).indices.items():
        dtype, _, kv_dtype = key.partition("|")
        shape = {k: rows[k].to_numpy("float64")[index] for k in SHAPES[family]}
        try:
            work = op_work(family, dtype, shape, kv_dtype=kv_dtype or None)
        except PhysicsError:
            continue  # a dtype the physics cannot cost: FLOPs unknown, never a guess
        flops = np.asarray(work.flops, dtype="float64")
        out[index] = np.where(flops > 0, flops, np.nan)
    return out


def _params_json(kernel_shapes: list[dict], codes: np.ndarray, rows: pd.DataFrame) -> list[str]:
    out = []
    provenance = zip(codes, rows["framework"], rows["version"], rows["kernel_source"], strict=True)
    for code, framework, version, source in provenance:
        params = {
            **kernel_shapes[code],
            "framework": str(framework),
            "version": str(version),
            "kernel_source": str(source),
        }
        out.append(json.dumps(params, sort_keys=True, separators=(",", ":")))
    return out


def _repeat_run_ids(rows: pd.DataFrame) -> pd.Series:
    """framework/version/kernel_source, plus /rep<k> for the k-th identical configuration in one file."""
    base = (
        rows["framework"].astype(str)
        + "/"
        + rows["version"].astype(str)
        + "/"
        + rows["kernel_source"].astype(str)
    )
    occurrence = (
        pd.DataFrame({"k": rows["kernel_id"], "d": rows["device_id"], "p": rows["params_json"], "b": base})
        .groupby(["k", "d", "p", "b"], sort=False, dropna=False)
        .cumcount()
    )
    return base + pd.Series(np.where(occurrence > 0, "/rep" + occurrence.astype(str), ""), index=rows.index)


def noise_floor(measurements: pd.DataFrame, same_kernel_source: bool = False) -> float:
    """Median over (kernel, GPU) pairs with 2+ repeats of (max - min) / median of their durations; with
    ``same_kernel_source`` only repeats of one kernel source (other framework versions) count together."""
    keys = [measurements["kernel_id"], measurements["device_id"]]
    if same_kernel_source:
        keys.append(measurements["run_id"].astype(str).str.split("/").str[2])
    grouped = measurements["duration_us"].groupby(keys, sort=False)
    stats = grouped.agg(["size", "min", "max", "median"])
    stats = stats[stats["size"] >= 2]
    return float(((stats["max"] - stats["min"]) / stats["median"]).median()) if len(stats) else float("nan")


def max_kernels_from_params() -> int | None:
    """``ingest.aiconfigurator_max_kernels`` of params.yaml (DEFAULT_MAX_KERNELS without a params file)."""
    from components.platform.config import get_settings, ingest_max_kernels, load_params

    path = get_settings().params_file
    if not path.is_file():
        return DEFAULT_MAX_KERNELS
    value = ingest_max_kernels(load_params(path), SOURCE)
    return DEFAULT_MAX_KERNELS if value is None else value


def ingest(
    root: Path,
    catalog: Any,
    max_kernels: int | str | None = "params",
    progress: Callable[[str], None] | None = None,
) -> AdapterOutput:
    """Read every GEMM/attention/MoE/all-reduce table under ``root`` (upstream's repository root, or its
    ``systems`` folder) into the canonical tables. ``max_kernels``: the sample cap ("params": params.yaml's
    ``ingest.aiconfigurator_max_kernels``; None: every kernel)."""
    from components.ingest.aiconfigurator import systems_dir

    root = require_dir(Path(root), SOURCE)
    if not (systems_dir(root) / "data").is_dir():
        raise IngestError(
            f"{SOURCE}: {root}: no systems/data folder (expected upstream's layout "
            "aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/)"
        )
    cap = max_kernels_from_params() if max_kernels == "params" else max_kernels
    from components.ingest.aiconfigurator import READERS

    frames: dict[str, pd.DataFrame] = {}
    kernels_by_family: dict[str, pd.DataFrame] = {}
    codes_by_family: dict[str, np.ndarray] = {}
    shape_rejects: list[pd.DataFrame] = []
    copies: dict[str, int] = {}
    for family, reader in READERS.items():
        frame = reader(root)
        frames[family] = frame
        if not len(frame):
            continue
        # A row equal to an earlier one in every column but its file (same GPU, shape, dtype, framework,
        # version *column*, kernel source and latency) is a copied table, not a second measurement: upstream
        # ships e.g. L40S TRT-LLM custom all-reduce under 1.0.0, 1.3.0rc15 and 1.3.0rc20 folders, byte for
        # byte.
        same = [
            c
            for c in (
                "device_id",
                "dtype",
                *SHAPES[family],
                *LABELS.get(family, ()),
                "phase",
                "framework",
                "version",
                "kernel_source",
                "latency_us",
            )
            if c in frame.columns
        ]
        copied = frame.duplicated(same, keep="first").to_numpy()
        copies[family] = int(copied.sum())
        if copied.any():
            attrs = frame.attrs
            frame = frame.loc[~copied].reset_index(drop=True)
            frame.attrs = attrs
            frames[family] = frame
        problem = shape_problems(family, frame)
        if problem.notna().any():
            bad = problem.notna().to_numpy()
            raw_text = (
                frame.loc[bad, [*SHAPES[family], "dtype", "latency_us"]].astype(str).agg(",".join, axis=1)
            )
            shape_rejects.append(
                pd.DataFrame(
                    {
                        "source": SOURCE,
                        "upstream_file": frame.loc[bad, "upstream_file"].astype(str),
                        "upstream_row": frame.loc[bad, "upstream_row"],
                        "reason": family + ": " + problem[bad].astype(str),
                        "raw": raw_text,
                    }
                )
            )
            frame = frame.loc[~bad].reset_index(drop=True)
            frame.attrs = frames[family].attrs
            frames[family] = frame
            if not len(frame):
                continue
        kernels_by_family[family], codes_by_family[family] = _kernel_table(family, frame)
        frames[family] = _slim(family, frame)
        del frame
    if not kernels_by_family:
        raise IngestError(f"{SOURCE}: {systems_dir(root) / 'data'}: no gemm/attention/moe/all-reduce tables")
    all_kernels = pd.concat(kernels_by_family.values(), ignore_index=True)
    chosen = choose_kernels(all_kernels[["kernel_id", "family", "op"]], cap).to_numpy()

    parts: list[pd.DataFrame] = []
    kernel_parts: list[pd.DataFrame] = []
    offset = 0
    full_notes: list[str] = []
    for family, kernels in kernels_by_family.items():
        frame, codes = frames[family], codes_by_family[family]
        mine = chosen[offset : offset + len(kernels)]
        offset += len(kernels)
        full_notes.append(
            f"{family}: {len(frame)} rows, {len(kernels)} kernels, {int(mine.sum())} sampled; "
            f"readers dropped {frame.attrs.get('dropped', 0)}; "
            f"{copies.get(family, 0)} copies of another table's rows left out"
        )
        selected = mine[codes]
        columns = [c for c in _row_columns(family) if c in frame.columns]
        rows = frame.loc[selected, columns].reset_index(drop=True)
        row_codes = codes[selected]
        picked = kernels[mine]
        # Re-number the kernels of this family's sample so row codes index ``picked``.
        renumber = np.full(len(kernels), -1)
        renumber[np.flatnonzero(mine)] = np.arange(len(picked))
        row_codes = renumber[row_codes]
        shapes = [json.loads(text) for text in picked["shape_json"]]
        rows["kernel_id"] = picked["kernel_id"].to_numpy()[row_codes]
        rows["family"] = family
        rows["params_json"] = _params_json(shapes, row_codes, rows)
        rows["flops"] = _flops(family, rows)
        parts.append(rows)
        kernel_parts.append(picked)
    rows = pd.concat(parts, ignore_index=True)
    device_id, specs, device_notes = resolve_devices(rows, root, catalog)
    rows["device_id"] = device_id
    unknown = rows["device_id"].isna().to_numpy()
    rejects = pd.DataFrame(
        {
            "source": SOURCE,
            "upstream_file": rows.loc[unknown, "upstream_file"].astype(str),
            "upstream_row": rows.loc[unknown, "upstream_row"],
            "reason": "unknown device '" + rows.loc[unknown, "device_name_raw"].astype(str) + "'",
            "raw": rows.loc[unknown, "params_json"].str.slice(0, RAW_LIMIT),
        }
    )
    rejects = pd.concat([*shape_rejects, rejects], ignore_index=True)
    good = rows.loc[~unknown].reset_index(drop=True)
    good["run_id"] = _repeat_run_ids(good)
    duration = good["latency_us"].astype("float64")
    measurements = pd.DataFrame(
        {
            "kernel_id": good["kernel_id"],
            "device_id": good["device_id"],
            "device_name_raw": good["device_name_raw"].astype(str),
            "source": SOURCE,
            "upstream_file": good["upstream_file"].astype(str),
            "upstream_row": good["upstream_row"],
            "profiler": PROFILER,
            "clock_mode": "unknown",
            "run_id": good["run_id"],
            "params_json": good["params_json"],
            "duration_us": duration,
            "flops": good["flops"],
            "gflops": good["flops"] / duration / 1e3,
        }
    )
    kernels = pd.concat(kernel_parts, ignore_index=True)
    kernels = pd.DataFrame(
        {
            "kernel_id": kernels["kernel_id"],
            "source": SOURCE,
            "family": kernels["family"],
            "op": kernels["op"],
            "name": (
                kernels["family"] + "/" + kernels["op"] + kernels["shape_json"] + "[" + kernels["dtype"] + "]"
            ),
            "language": "op",
            "shape_json": kernels["shape_json"],
            "dtype": kernels["dtype"],
        }
    )
    measurements = conform(measurements, MEASUREMENT_COLUMNS)
    notes = [
        "latency (ms upstream) x 1000 = duration_us; CUDA-graph replays timed with torch.cuda.Event "
        "(collector/helper.py): profiler=cuda_event, clock_mode=unknown",
        f"sample: at most {cap if cap is not None else 'all'} kernels by salted hash of kernel_id, "
        "shared evenly between (family, op) groups; every GPU and repeat of a chosen kernel kept; "
        "rows_in counts the sampled rows plus every rejected row (shapes without work, unknown GPUs)",
        *full_notes,
        "repeats: one kernel_id per (family, op, dtype, shape) measured under several framework/"
        "version/kernel_source (run_id); median relative spread (max-min)/median over (kernel, GPU) "
        f"pairs with 2+ repeats: {noise_floor(measurements):.3f} (different kernel sources are different "
        f"implementations); within one kernel source: {noise_floor(measurements, True):.3f}",
        *device_notes,
    ]
    output = AdapterOutput.conformed(SOURCE, measurements, kernels, rejects, notes=notes, devices=specs)
    if progress:
        progress(f"{SOURCE}: {len(measurements)} measurements of {len(kernels)} kernels")
    return output
