"""Adapter for NeuSight (ASPLOS'25, sitar-lab/NeuSight): FP32 PyTorch op latencies on 8 NVIDIA GPUs.

Upstream layout (relative to the repository root):

- ``scripts/asplos/data/dataset/train/collect/<op>/p2.1.0/<GPU>.csv`` -- the training rows (80 files,
  16 ops x 5 GPUs). The upstream training scripts read merged ``train/{bmm,linear,vec}.csv`` files,
  which are the same rows; the snapshot lacks them, so the per-GPU files are the training set.
- ``scripts/asplos/data/dataset/test/{bmm,elem,linear,ln,softmax,vec}.csv`` -- the published test
  set. ``vec.csv`` is ``elem`` + ``ln`` + ``softmax`` again: rows repeat across files, kept apart by
  ``run_id`` = the file they came from, because NeuSight's published split is defined by file.

- ``scripts/asplos/data/dataset_amd/`` (read whenever present): NeuSight's AMD collection, the same
  CSV layout measured with PyTorch 2.4.1 on ROCm (``AMD Instinct MI100``/``MI210``), but both sides
  are per-GPU ``collect`` files: ``dataset_amd/{train,test}/collect/<op>/p<torch>/<GPU>.csv``. Its
  merged copies (``train/collect/<op>.csv``, ``train/{elem,ln,softmax,vec}.csv``) repeat those rows
  and are not read. ``run_id`` = ``amd/train/collect`` or ``amd/test/collect``; the NeuSight split
  (``components.evaluation.splits``) keys on ``/dataset/`` paths, so AMD rows stay out of it and
  serve leave-one-GPU-out instead. The AMD files lack ``Torch Version``/``CUDNN Version``/
  ``Warps per SM``/``Blocks per SM``/``CUDA Version``, which this adapter does not read anyway.

``Latency`` is milliseconds from ``torch.cuda.Event``: the mean of the 5 fastest of 25 runs
(``neusight/Dataset/collect.py``), hence ``n_trials=25`` and ``profiler=cuda_event``. The GPUs
were not clock-locked as far as upstream documents, hence ``clock_mode=unknown``.

A kernel is op + shapes + dtype (fp32); the CUDA kernel the profiler saw (``Kernel Name``) differs
per GPU, so it is a measurement parameter, not part of the kernel's identity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from components.ingest import csv_rows
from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import (
    KERNEL_COLUMNS,
    MEASUREMENT_COLUMNS,
    canonical_json,
    conform,
    stable_id,
)

SOURCE = "neusight"
DATASET_DIR = Path("scripts/asplos/data/dataset")
AMD_DATASET_DIR = Path("scripts/asplos/data/dataset_amd")
TRAIN_GLOB = "train/collect/*/p2.1.0/*.csv"
AMD_GLOB = "{side}/collect/*/p*/*.csv"  # per-GPU files of either side; the torch version folder varies
TEST_FILES: tuple[str, ...] = ("bmm", "elem", "linear", "ln", "softmax", "vec")
N_TRIALS = 25  # mean of the 5 fastest of 25 timed runs

COMMON_COLUMNS: tuple[str, ...] = (
    "OPName",
    "Latency",
    "Device",
    "Kernel Name",
    "Grid x",
    "Grid y",
    "Grid z",
    "Block x",
    "Block y",
    "Block z",
)
GRID_COLUMNS: dict[str, str] = {
    "Grid x": "grid_x",
    "Grid y": "grid_y",
    "Grid z": "grid_z",
    "Block x": "block_x",
    "Block y": "block_y",
    "Block z": "block_z",
}
GEMM_SHAPE: tuple[str, ...] = ("B", "M", "N", "K")
ROW_SHAPE: tuple[str, ...] = ("B", "H")
# Upstream column -> shape key. ``Kernel_Szie`` is upstream's misspelling; the canonical key is spelled right.
CONV_SHAPE: dict[str, str] = {
    "B": "B",
    "Input_Channel": "Input_Channel",
    "Output_Channel": "Output_Channel",
    "Kernel_Szie": "Kernel_Size",
    "Input_Size": "Input_Size",
    "Stride": "Stride",
    "Padding": "Padding",
}
ELEMENTWISE_OPS: frozenset[str] = frozenset(
    {"add", "addu", "div", "divu", "mul", "mulu", "pow", "powu", "relu", "gelu", "tanh"}
)
FAMILY_OF_OP: dict[str, str] = {
    "bmm": "bmm",
    "linear": "linear",
    "conv": "conv",
    "softmax": "softmax",
    "ln": "layernorm",
    **{op: "elementwise" for op in ELEMENTWISE_OPS},
}


# ----------------------------------------------------------------------------------------------
# NeuSight
# ----------------------------------------------------------------------------------------------
def _shape_spec(kind: str) -> dict[str, str]:
    """Upstream shape column -> canonical key, by the op family the file holds."""
    if kind in ("bmm", "linear"):
        return {c: c for c in GEMM_SHAPE}
    if kind == "conv":
        return dict(CONV_SHAPE)
    return {c: c for c in ROW_SHAPE}


def _files(root: Path) -> list[tuple[Path, str, str]]:
    """(path, kind, run_id) of every NeuSight data file, in a stable order; missing groups raise."""
    dataset = require_dir(root / DATASET_DIR, SOURCE)
    train = sorted(dataset.glob(TRAIN_GLOB))
    if not train:
        raise IngestError(f"{SOURCE}: no training files {dataset / TRAIN_GLOB}")
    files = [(path, path.parent.parent.name, "train/collect") for path in train]
    for stem in TEST_FILES:
        path = dataset / "test" / f"{stem}.csv"
        if not path.is_file():
            raise IngestError(f"{SOURCE}: expected file is missing: {path}")
        files.append((path, stem, f"test/{stem}"))
    return files + _amd_files(root)


TRAINING_RUN_IDS: tuple[str, ...] = ("train/collect", "amd/train/collect")  # NeuSight's training side


def training_rows(root: Path, catalog, kinds: tuple[str, ...]) -> tuple[pd.DataFrame, list[dict]]:
    """(parsed rows, reject records) of NeuSight's *training* files of the op ``kinds`` (folder names:
    ``linear``, ``bmm``) only: what the op engine's measured store may hold. The published test files
    (``test/*.csv``) are the ``neusight`` split's test side and are never read here."""
    root = require_dir(Path(root), SOURCE)
    parts, rejects = [], []
    for path, kind, run_id in _files(root):
        if run_id in TRAINING_RUN_IDS and kind in kinds:
            good, bad, _ = _read_file(root, path, kind, run_id, catalog)
            parts.append(good)
            rejects += bad
    return (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()), rejects


def _amd_files(root: Path) -> list[tuple[Path, str, str]]:
    """(path, kind, run_id) of the AMD collection's per-GPU files; [] when the folder is absent."""
    amd = root / AMD_DATASET_DIR
    if not amd.is_dir():
        return []
    files: list[tuple[Path, str, str]] = []
    for side in ("train", "test"):
        for path in sorted(amd.glob(AMD_GLOB.format(side=side))):
            files.append((path, path.parent.parent.name, f"amd/{side}/collect"))
    if not files:
        raise IngestError(
            f"{SOURCE}: {amd} exists but holds no per-GPU files {AMD_GLOB.format(side='{train,test}')}"
        )
    return files


def _read_file(
    root: Path, path: Path, kind: str, run_id: str, catalog
) -> tuple[pd.DataFrame, list[dict], int]:
    """One upstream CSV -> (parsed good rows, reject records, rows in)."""
    label = path.relative_to(root).as_posix()
    frame, rejects = csv_rows.read_csv_strings(path, SOURCE, root)
    rows_in = len(frame) + len(rejects)
    spec = _shape_spec(kind)
    csv_rows.require_columns(frame, [*COMMON_COLUMNS, *spec], path, SOURCE)

    latency = pd.to_numeric(frame["Latency"].str.strip(), errors="coerce")
    shapes, shape_problem = csv_rows.integer_columns(frame, spec)
    launch, launch_problem = csv_rows.integer_columns(frame, GRID_COLUMNS)
    op = frame["OPName"].str.strip()
    family = op.map(FAMILY_OF_OP)
    device_id = csv_rows.resolve_devices(frame["Device"].str.strip(), catalog)
    large = frame["large"].str.strip().str.lower() if "large" in frame.columns else None

    # First failing check wins, so each reject has one clear reason.
    reason = pd.Series(pd.NA, index=frame.index, dtype="object")
    checks: list[tuple[pd.Series, Callable[[pd.Index], pd.Series]]] = [
        (
            latency.isna() | ~np.isfinite(latency.fillna(0)),
            lambda idx: "Latency is not a number: " + frame.loc[idx, "Latency"].str.slice(0, 40).map(repr),
        ),
        (family.isna(), lambda idx: "unknown op " + op[idx].map(repr)),
        (
            shape_problem.notna(),
            lambda idx: "shape column " + shape_problem[idx].astype(str) + " is not an integer",
        ),
        (
            launch_problem.notna(),
            lambda idx: "launch column " + launch_problem[idx].astype(str) + " is not an integer",
        ),
        (
            device_id.isna(),
            lambda idx: "unknown device " + frame.loc[idx, "Device"].str.strip().map(lambda s: f"'{s}'"),
        ),
    ]
    if large is not None:
        checks.append(
            (
                ~large.isin(["true", "false"]),
                lambda idx: "large is not True/False: " + frame.loc[idx, "large"].map(repr),
            )
        )
    bad = csv_rows.apply_checks(frame, checks, reason, SOURCE, label, rejects)

    keep = ~bad
    good = pd.DataFrame(
        {
            "upstream_row": frame.index[keep].astype("int64"),
            "op": op[keep],
            "family": family[keep],
            "device_id": device_id[keep],
            "device_name_raw": frame.loc[keep, "Device"].str.strip(),
            "kernel_name": frame.loc[keep, "Kernel Name"],
            "n_kernels": frame.loc[keep, "Kernels"].str.count(";") if "Kernels" in frame.columns else pd.NA,
            "duration_us": latency[keep] * 1000.0,
            "large": (large[keep] == "true") if large is not None else pd.NA,
        }
    )
    for upstream, key in spec.items():
        good[f"shape:{key}"] = shapes.loc[keep, upstream]
    for upstream, column in GRID_COLUMNS.items():
        good[column] = launch.loc[keep, upstream]
    good["upstream_file"] = label
    good["run_id"] = run_id
    good["shape_keys"] = ",".join(spec.values())
    return good.reset_index(drop=True), rejects, rows_in


def _shape_dicts(good: pd.DataFrame) -> tuple[pd.Series, dict[str, dict]]:
    """shape_json per row, and the shape dict of each distinct shape_json (for op_flops)."""
    texts = np.empty(len(good), dtype=object)
    dicts: dict[str, dict] = {}
    for keys, group in good.groupby("shape_keys", sort=False):
        names = keys.split(",")
        values = group[[f"shape:{k}" for k in names]].to_numpy(dtype="int64")
        positions = good.index.get_indexer(group.index)
        for pos, row in zip(positions, values, strict=True):
            shape = dict(zip(names, (int(v) for v in row), strict=True))
            text = canonical_json(shape)
            dicts.setdefault(text, shape)
            texts[pos] = text
    return pd.Series(texts, index=good.index, dtype="object"), dicts


def _params_json(good: pd.DataFrame, shape_json: pd.Series, shapes: dict[str, dict]) -> list[str]:
    """Shape + the dominant CUDA kernel + how many kernels the op launched + NeuSight's ``large`` flag."""
    out: list[str] = []
    for text, name, n_kernels, large in zip(
        shape_json, good["kernel_name"], good["n_kernels"], good["large"], strict=True
    ):
        params: dict[str, object] = {**shapes[text], "kernel_name": name}
        if not pd.isna(n_kernels):
            params["n_kernels"] = int(n_kernels)
        if not pd.isna(large):
            params["large"] = bool(large)
        out.append(canonical_json(params))
    return out


def _kernel_table(good: pd.DataFrame, shape_json: pd.Series) -> pd.DataFrame:
    kernels = pd.DataFrame(
        {
            "kernel_id": good["kernel_id"],
            "family": good["family"],
            "op": good["op"],
            "shape_json": shape_json,
        }
    ).drop_duplicates("kernel_id")
    kernels["source"] = SOURCE
    kernels["name"] = kernels["op"] + kernels["shape_json"] + "[fp32]"
    kernels["language"] = "pytorch"
    kernels["dtype"] = "fp32"
    return conform(kernels, KERNEL_COLUMNS)


def ingest(root: Path, catalog) -> AdapterOutput:
    """Read NeuSight's train/collect and test CSVs under ``root`` into the canonical tables."""
    root = require_dir(Path(root), SOURCE)
    parts: list[pd.DataFrame] = []
    rejects: list[dict] = []
    rows_in = 0
    for path, kind, run_id in _files(root):
        good, bad, n = _read_file(root, path, kind, run_id, catalog)
        parts.append(good)
        rejects += bad
        rows_in += n
    good = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    measurements, kernels = _canonical(good)
    notes = [
        "Latency (ms) is torch.cuda.Event timing, mean of the 5 fastest of 25 runs: n_trials=25",
        "run_id: train/collect = training files; test/<file> = NeuSight's published test file",
        "test/vec.csv repeats elem+ln+softmax rows; they stay as separate rows (run_id differs)",
        *(
            ["dataset_amd/: AMD collection read (run_id amd/train/collect, amd/test/collect)"]
            if (root / AMD_DATASET_DIR).is_dir()
            else []
        ),
    ]
    return AdapterOutput.conformed(SOURCE, measurements, kernels, rejects, rows_in, notes)


def _canonical(good: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    if good.empty:
        return csv_rows.empty_tables()
    shape_json, shapes = _shape_dicts(good)
    good["kernel_id"] = [
        stable_id(SOURCE, f, o, "fp32", s)
        for f, o, s in zip(good["family"], good["op"], shape_json, strict=True)
    ]
    params_json = pd.Series(_params_json(good, shape_json, shapes), index=good.index)
    good["params_json"] = params_json
    run_id = csv_rows.run_ids(good)
    flops = csv_rows.definition_flops(good["family"], good["op"], shape_json, shapes)
    measurements = pd.DataFrame(
        {
            **csv_rows.provenance(good, SOURCE, "cuda_event", "unknown", run_id),
            "params_json": params_json,
            **{column: good[column] for column in GRID_COLUMNS.values()},
            "duration_us": good["duration_us"],
            "n_trials": N_TRIALS,
            "flops": flops,
            "gflops": csv_rows.gflops_of(flops, good["duration_us"]),
        }
    )
    return conform(measurements, MEASUREMENT_COLUMNS), _kernel_table(good, shape_json)
