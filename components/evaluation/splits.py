"""Train/test splits of the feature table, including the published splits of the field.

Every split is a pure function of the table (deterministic hashing, no RNG state), returns one or
more ``Fold``s of row labels, and guarantees no overlap between train and test; the grouped splits
also guarantee that no kernel (or GPU) of the test side appears in training.

- ``random``: 80/20 by measurement.
- ``unseen-kernel``: 80/20 by kernel_id (a kernel's rows on every GPU stay together).
- ``unseen-gpu``: leave-one-GPU-out, one fold per device with rows in a multi-GPU source (the bench
  keeps those with at least ``bench_min_gpu_rows`` rows).
- ``neusight``: NeuSight ASPLOS'25 -- train on the per-GPU ``collect`` files of P4, P100, T4, V100,
  A100 (training GPUs); test on the rows of its ``test/`` files measured on GPUs it never trained
  on (H100, L4; A100-80GB PCIe is also unseen by the model and reported per device).
- ``pipeweave-fp8``: PipeWeave FP8 GEMM -- train ``gemm_fp8_train.csv`` (H20, H800), test the
  rows of ``gemm_fp8_test.csv`` on H100 and H200.
- ``bolet-roofline``: Bolet et al.'s balanced roofline task on gpuFLOPBench -- one row per CUDA or
  OpenMP kernel (its first launch in the HEAD profiling file), test = 170 bandwidth-bound + 170
  compute-bound kernels drawn by program hash, train = kernels of the other programs only.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from components.common.sampling import unit_hash_series as _unit_hash  # [0, 1) per key, by hash
from components.platform.config import SPLITS  # the names; each is built here

NEUSIGHT_TRAIN_DEVICES: tuple[str, ...] = (
    "Tesla P4",
    "Tesla P100-PCIE-16GB",
    "Tesla T4",
    "Tesla V100-PCIE-32GB",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe",  # NeuSight's conv training file is the 80 GB card (MANIFEST)
)
PIPEWEAVE_FP8_TEST_DEVICES: tuple[str, ...] = ("NVIDIA H100", "NVIDIA H200")
BOLET_PER_CLASS = 170


@dataclass(frozen=True)
class Fold:
    name: str
    train: pd.Index
    test: pd.Index

    def __post_init__(self) -> None:
        overlap = self.train.intersection(self.test)
        if len(overlap):
            raise AssertionError(f"split {self.name}: {len(overlap)} rows in both train and test")


def _device_ids(names: tuple[str, ...]) -> set[str]:
    from components.devices import load_catalog

    catalog = load_catalog()
    return {catalog.resolve(name).id for name in names}


def random_split(table: pd.DataFrame, test_share: float = 0.2) -> list[Fold]:
    in_test = _unit_hash(table["measurement_id"], "random") < test_share
    return [Fold("random", table.index[~in_test], table.index[in_test])]


def unseen_kernel_split(table: pd.DataFrame, test_share: float = 0.2) -> list[Fold]:
    in_test = _unit_hash(table["kernel_id"], "unseen-kernel") < test_share
    return [Fold("unseen-kernel", table.index[~in_test], table.index[in_test])]


def unseen_gpu_devices(table: pd.DataFrame, min_devices_per_source: int = 2) -> pd.DataFrame:
    """The GPUs a leave-one-GPU-out fold can hold out, with their row counts.

    A GPU qualifies when it has rows in a source that measured at least ``min_devices_per_source``
    GPUs (a single-GPU source has nothing to transfer from). Columns: ``device_id``, ``rows`` (all
    its rows in the table: the fold's test side), ``rows_<source>`` per source; sorted by device.
    """
    if table.empty:
        return pd.DataFrame(columns=["device_id", "rows"])
    devices_per_source = table.groupby("source")["device_id"].nunique()
    eligible_sources = devices_per_source[devices_per_source >= min_devices_per_source].index
    eligible = sorted(table.loc[table["source"].isin(eligible_sources), "device_id"].dropna().unique())
    rows = table[table["device_id"].isin(eligible)]
    per_source = rows.groupby(["device_id", "source"]).size().unstack(fill_value=0)
    per_source.columns = [f"rows_{source}" for source in per_source.columns]
    counts = per_source.assign(rows=per_source.sum(axis=1)).reindex(eligible).fillna(0).astype("int64")
    return counts.reset_index()[["device_id", "rows", *per_source.columns]]


def unseen_gpu_split(
    table: pd.DataFrame,
    min_devices_per_source: int = 2,
    min_rows: int = 0,
    devices: tuple[str, ...] | None = None,
) -> list[Fold]:
    """Leave one GPU out. Training keeps every source, so the held-out GPU is unseen everywhere.

    One fold per eligible GPU (see ``unseen_gpu_devices``) with at least ``min_rows`` rows, or --
    when ``devices`` names catalog ids -- exactly those GPUs, whatever their size (an id with no
    eligible rows is a ValueError naming it and the GPUs there are).
    """
    counts = unseen_gpu_devices(table, min_devices_per_source)
    if devices is not None:
        known = set(counts["device_id"])
        missing = [d for d in devices if d not in known]
        if missing:
            where = (
                "a GPU of this feature table"
                if min_devices_per_source <= 1
                else f"a GPU of a source with at least {min_devices_per_source} GPUs in this feature table"
            )
            raise ValueError(
                f"no leave-one-GPU-out fold for {', '.join(missing)}: not {where} "
                f"(GPUs there: {', '.join(sorted(known)) or 'none'})"
            )
        chosen = sorted(dict.fromkeys(devices))
    else:
        chosen = counts.loc[counts["rows"] >= min_rows, "device_id"].tolist()
    folds = []
    for device in chosen:
        on_device = table["device_id"] == device
        folds.append(Fold(f"unseen-gpu:{device}", table.index[~on_device], table.index[on_device]))
    return folds


def neusight_split(table: pd.DataFrame) -> list[Fold]:
    rows = table[table["source"] == "neusight"]
    train_devices = _device_ids(NEUSIGHT_TRAIN_DEVICES)
    from_collect = rows["upstream_file"].str.contains("/train/collect/", regex=False)
    from_test = rows["upstream_file"].str.contains("/dataset/test/", regex=False)
    train = rows.index[from_collect & rows["device_id"].isin(train_devices)]
    test = rows.index[from_test & ~rows["device_id"].isin(train_devices)]
    return [Fold("neusight", train, test)]


def pipeweave_fp8_split(table: pd.DataFrame) -> list[Fold]:
    rows = table[(table["source"] == "pipeweave") & (table["family"] == "gemm")]
    test_devices = _device_ids(PIPEWEAVE_FP8_TEST_DEVICES)
    train = rows.index[rows["upstream_file"].str.endswith("gemm_fp8_train.csv")]
    test = rows.index[
        rows["upstream_file"].str.endswith("gemm_fp8_test.csv") & rows["device_id"].isin(test_devices)
    ]
    return [Fold("pipeweave-fp8", train, test)]


def bolet_kernel_rows(table: pd.DataFrame) -> pd.DataFrame:
    """One row per gpuFLOPBench kernel: its first launch in the HEAD profiling file, labelled."""
    rows = table[
        (table["source"] == "gpuflopbench")
        & ~table["upstream_file"].str.contains("_history/", regex=False)
        & table["roofline_class_published"].notna()
    ]
    return rows.sort_values(["kernel_id", "upstream_row"]).drop_duplicates("kernel_id", keep="first")


def bolet_roofline_split(table: pd.DataFrame, per_class: int = BOLET_PER_CLASS) -> list[Fold]:
    """Balanced test of ``per_class`` kernels per class, drawn whole-program-first by hash."""
    kernels = bolet_kernel_rows(table).copy()
    kernels["_program_rank"] = _unit_hash(kernels["program"], "bolet")
    kernels["_kernel_rank"] = _unit_hash(kernels["kernel_id"], "bolet-k")
    kernels = kernels.sort_values(["_program_rank", "_kernel_rank"])
    test_programs: set[str] = set()
    taken = {"bandwidth": 0, "compute": 0}
    test_index = []
    for program, group in kernels.groupby("program", sort=False):
        if all(count >= per_class for count in taken.values()):
            break
        wanted = []
        for idx, label in zip(group.index, group["roofline_class_published"], strict=False):
            if taken[label] < per_class:
                taken[label] += 1
                wanted.append(idx)
        if wanted:
            test_programs.add(program)
            test_index.extend(wanted)
    train = kernels.index[~kernels["program"].isin(test_programs)]
    return [Fold("bolet-roofline", train, pd.Index(test_index))]


def _amd_source_split(table: pd.DataFrame) -> list[Fold]:
    from components.evaluation.amd_source import amd_source_split  # its own module (HIP static features)

    return amd_source_split(table)


def make_split(table: pd.DataFrame, name: str) -> list[Fold]:
    builders = {
        "random": random_split,
        "unseen-kernel": unseen_kernel_split,
        "unseen-gpu": unseen_gpu_split,
        "neusight": neusight_split,
        "pipeweave-fp8": pipeweave_fp8_split,
        "bolet-roofline": bolet_roofline_split,
        "amd-source": _amd_source_split,
    }
    if name not in builders:
        raise ValueError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    return builders[name](table)
