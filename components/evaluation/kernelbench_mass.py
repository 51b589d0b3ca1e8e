"""Where a KernelBench level's leave-one-GPU-out error sits: by GPU, by program and by term.

Reads the bench's scored rows (``kernelbench_bench.KernelBenchBench.predictions``: the measured time, the
program model's answer and ``pred_ops``, the ops' GPU time inside that answer). Every row's absolute
relative error is its error *mass*; the tables say which GPUs, which programs and which term of the answer
carry it. The term is the one the answer is mostly made of: ``between ops`` (launch gaps and host dispatch:
the ops' GPU time is under half the answer) or ``op GPU time``. A GPU's MAPE is its mass over its rows, so
the GPU table also gives the per-GPU figure the bench reports. Programs also fall into module classes
(``MODULE_CLASSES``, by name: cuDNN RNNs, RNN cells, MLPs, CNNs, mobile CNNs, attention, ...), tabled alone
and as the median answer/measured per class and GPU (too fast below 1, too slow above).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

BETWEEN_OPS = "between ops"  # the answer is mostly time between the ops (host dispatch, launch gaps)
OP_TIME = "op GPU time"  # the answer is mostly its ops' GPU time
OPS_SHARE_SPLIT = 0.5  # ops' GPU time under this share of the answer: the row is host/launch-bound
# A program's module class, from its name (first match): KernelBench level 3's kinds of whole model.
MODULE_CLASSES: tuple[tuple[str, str], ...] = (
    ("rnn (cuDNN LSTM/GRU)", r"LSTM|LTSM|GRU"),
    ("rnn cell", r"VanillaRNN"),
    ("attention", r"Transformer|Attention|MiniGPT|MinGPT|Swin"),
    ("mlp", r"_MLP|ShallowWide|DeepNarrow"),
    ("mobile cnn", r"MobileNet|EfficientNet|ShuffleNet|RegNet|SqueezeNet"),
    ("cnn", r"ResNet|VGG|DenseNet|AlexNet|LeNet|GoogleNet|UNet"),
    ("netvlad", r"NetVlad"),
    ("mamba", r"Mamba"),
)
OTHER_CLASS = "other"
REQUIRED = ("kernel_id", "device_id", "level", "duration_us", "pred_model", "pred_ops")


@dataclass
class ErrorMass:
    by_gpu: pd.DataFrame  # device_id: n, mape, mass_share, median_signed, between_ops_mass_share
    by_program: pd.DataFrame  # program: n_gpus, mape, mass_share, median_signed, ops_share
    by_term: pd.DataFrame  # term: n, mape, mass_share, median_signed
    by_class: pd.DataFrame  # module class: n, mape, mass_share, median_signed, ops_share
    class_by_gpu: pd.DataFrame  # module class x device_id: median predicted / measured


def module_class(program: str) -> str:
    """The module class of a program name (``MODULE_CLASSES``), ``other`` when none matches."""
    for name, pattern in MODULE_CLASSES:
        if re.search(pattern, program):
            return name
    return OTHER_CLASS


def scored_rows(predictions: pd.DataFrame, level: str, programs: pd.Series | None = None) -> pd.DataFrame:
    """One level's scored rows with ``signed`` (predicted / measured - 1), ``mass`` (its absolute value),
    ``ops_share`` and ``term``; ``program`` from ``programs`` (kernel_id -> name) or the kernel id.
    ValueError naming the missing columns when ``predictions`` is not a bench's scored rows."""
    missing = [c for c in REQUIRED if c not in predictions.columns]
    if missing:
        raise ValueError(f"predictions: missing column(s) {', '.join(missing)} (the bench's scored rows)")
    rows = predictions[predictions["level"].astype(str) == str(level)].copy()
    if "config" in rows.columns:
        rows = rows[rows["config"] == "eager"]
    true = rows["duration_us"].to_numpy("float64")
    pred = rows["pred_model"].to_numpy("float64")
    rows["signed"] = pred / true - 1.0
    rows["mass"] = np.abs(rows["signed"])
    rows["ops_share"] = rows["pred_ops"].to_numpy("float64") / np.maximum(pred, 1e-12)
    rows["term"] = np.where(rows["ops_share"] < OPS_SHARE_SPLIT, BETWEEN_OPS, OP_TIME)
    names = programs if programs is not None else pd.Series(dtype=object)
    rows["program"] = rows["kernel_id"].map(names).fillna(rows["kernel_id"]).astype(str)
    return rows.reset_index(drop=True)


def _table(rows: pd.DataFrame, key: str, total: float) -> pd.DataFrame:
    grouped = rows.groupby(key)
    out = pd.DataFrame(
        {
            "n": grouped.size(),
            "mape": grouped["mass"].mean(),
            "mass_share": grouped["mass"].sum() / total,
            "median_signed": grouped["signed"].median(),
        }
    )
    return out


def error_mass(rows: pd.DataFrame) -> ErrorMass:
    """The three tables of :func:`scored_rows`' rows, each sorted by its share of the level's mass."""
    if rows.empty:
        raise ValueError("no scored rows at this level")
    total = float(rows["mass"].sum()) or 1.0
    by_gpu = _table(rows, "device_id", total)
    between = rows[rows["term"] == BETWEEN_OPS].groupby("device_id")["mass"].sum()
    by_gpu["between_ops_mass_share"] = (between / rows.groupby("device_id")["mass"].sum()).fillna(0.0)
    by_program = _table(rows, "program", total).rename(columns={"n": "n_gpus"})
    by_program["ops_share"] = rows.groupby("program")["ops_share"].median()
    by_term = _table(rows, "term", total)
    classes = rows.assign(module_class=rows["program"].map(module_class), ratio=rows["signed"] + 1.0)
    by_class = _table(classes, "module_class", total)
    by_class["ops_share"] = classes.groupby("module_class")["ops_share"].median()
    ranked = (t.sort_values("mass_share", ascending=False) for t in (by_gpu, by_program, by_term, by_class))
    grid = classes.pivot_table(index="module_class", columns="device_id", values="ratio", aggfunc="median")
    return ErrorMass(*ranked, grid)


def mass_lines(mass: ErrorMass, top: int = 15) -> list[str]:
    """The tables as text lines (for the benchmark script and logs)."""
    lines: list[str] = []
    for title, table in (
        ("by GPU", mass.by_gpu),
        ("by term", mass.by_term),
        ("by module class", mass.by_class),
        ("median predicted / measured, module class x GPU:", mass.class_by_gpu),
        (f"by program (top {top})", mass.by_program.head(top)),
    ):
        lines.append(title if title.endswith(":") else f"error mass {title}:")
        lines += table.round(3).to_string().splitlines()
    return lines
