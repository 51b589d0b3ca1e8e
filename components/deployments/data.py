"""Readers for measured serving runs and the measured all-reduce tables behind the TP term.

- PipeWeave (``pipeweave/e2e/real/e2e_[tpN_]<GPU>.jsonl``): offline batches (all requests start together),
  one row per repeat: batch, mean input tokens, output tokens, prefill latency (s), median decode step (s),
  total (s). The ``*_comparison.csv`` beside them hold PipeWeave/NeuSight/Habitat/roofline predictions.
- AIConfigurator silicon (``systems/silicon_sample.csv``): steady serving (H100/H200 in our copy; any
  AIConfigurator system name maps to its catalog GPU); TTFT, TPOT (ms).
- PipeWeave's collective tables (``pipeweave/dataset/collective/<GPU>/all_reduce.csv``): measured NCCL
  all-reduce times by message size and group size, used as the measured tier of the all-reduce op.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

PIPEWEAVE_E2E = Path("pipeweave/e2e")
PIPEWEAVE_COLLECTIVE = Path("pipeweave/dataset/collective")
SILICON_CSV = Path("aiconfigurator/aic-core/src/aiconfigurator_core/systems/silicon_sample.csv")
# PipeWeave's GPU labels -> catalog ids (the hardware/*.json files name the parts).
PIPEWEAVE_GPUS: dict[str, str] = {
    "A100": "a100-sxm4-80gb",
    "A40": "a40",
    "H100": "h100-sxm",
    "H20": "h20",
    "H200": "h200",
    "H800": "h800",
    "L20": "l20",
    "L40": "l40",
    "RTX_6000_Ada": "rtx-6000-ada",
    "RTX_A6000": "rtx-a6000",
    "RTX_PRO_6000_S": "rtx-pro-6000-s",
    "RTX 6000 Ada": "rtx-6000-ada",
    "RTX PRO 6000 S": "rtx-pro-6000-s",
}
PIPEWEAVE_MODELS: dict[str, str] = {
    "Qwen2.5-14B": "Qwen2.5-14B",
    "Qwen3-32B": "Qwen3-32B",
    "Llama-3.1-70B": "Llama-3.1-70B",
}
PUBLISHED_METHODS = ("pipeweave", "neusight", "habitat", "roofline")


def read_pipeweave_runs(datasets_dir: Path) -> pd.DataFrame:
    """PipeWeave's runs in the datasets folder (:func:`read_pipeweave_tree` of ``datasets/pipeweave``)."""
    return read_pipeweave_tree(Path(datasets_dir) / PIPEWEAVE_E2E.parent)


def read_pipeweave_tree(root: Path) -> pd.DataFrame:
    """One row per (GPU, TP, run) of a PipeWeave tree (``root/e2e/real``): medians over repeats, in ms.

    Columns: gpu (PipeWeave label), device_id, tp, model, workload, batch, isl (mean prompt tokens =
    total_prefill_tokens / batch), isl_max (the run's nominal input_len), osl, prefill_ms, decode_ms,
    total_ms,
    repeats.
    """
    rows = []
    for path in sorted((Path(root) / PIPEWEAVE_E2E.name / "real").glob("e2e_*.jsonl")):
        match = re.match(r"e2e_(?:tp(\d+)_)?(.+)\.jsonl$", path.name)
        if not match:
            continue
        tp, gpu = int(match.group(1) or 1), match.group(2)
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        frame = pd.DataFrame(records)
        for run, group in frame.groupby("run_name"):
            model, workload = _split_run(str(run))
            first = group.iloc[0]
            rows.append(
                {
                    "gpu": gpu,
                    "device_id": PIPEWEAVE_GPUS.get(gpu, gpu.lower()),
                    "tp": tp,
                    "model": model,
                    "workload": workload,
                    "batch": int(first["batch_size"]),
                    "isl": float(first["total_prefill_tokens"]) / float(first["batch_size"]),
                    "isl_max": int(first["input_len"]),
                    "osl": int(first["output_len"]),
                    "prefill_ms": float(group["prefill_latency"].median()) * 1e3,
                    "decode_ms": float(group["median_decode_latency"].median()) * 1e3,
                    "total_ms": float(group["total_latency"].median()) * 1e3,
                    "repeats": len(group),
                }
            )
    return pd.DataFrame(rows)


def _split_run(run: str) -> tuple[str, str]:
    for model in sorted(PIPEWEAVE_MODELS, key=len, reverse=True):
        if run.startswith(model + "-"):
            return model, run[len(model) + 1 :]
    model, _, workload = run.rpartition("-")
    return model, workload


def read_published(datasets_dir: Path) -> pd.DataFrame:
    """The published predictions for the same runs: method, gpu, tp, model, workload, MAPE_* (percent)."""
    frames = []
    for method in PUBLISHED_METHODS:
        path = Path(datasets_dir) / PIPEWEAVE_E2E / f"{method}_comparison.csv"
        if path.is_file():
            frame = pd.read_csv(path)
            frame["method"] = method
            frames.append(frame)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True).rename(
        columns={"Hardware": "gpu", "TP": "tp", "Model": "model", "Workload": "workload"}
    )
    return out


def read_silicon_runs(datasets_dir: Path) -> pd.DataFrame:
    """AIConfigurator's measured serving runs with a catalog device_id column."""
    return read_silicon_tree(Path(datasets_dir) / SILICON_CSV.parts[0])


def read_silicon_tree(root: Path) -> pd.DataFrame:
    """The silicon runs of an AIConfigurator tree (``root/aic-core/.../systems/silicon_sample.csv``)."""
    frame = pd.read_csv(Path(root).joinpath(*SILICON_CSV.parts[1:]))
    frame["device_id"] = silicon_device_ids(frame["system"])
    return with_squared_parallel_read(frame)


def silicon_device_ids(systems: pd.Series) -> pd.Series:
    """Catalog ids of AIConfigurator ``system`` names (``devices.aiconfigurator_device_id``: every system
    AIConfigurator names, through the catalog's spellings); an unknown name kept as written, so its runs are
    refused naming it."""
    from components.devices.aiconfigurator_sheet import aiconfigurator_device_id

    names = {name: aiconfigurator_device_id(str(name)) or str(name) for name in systems.dropna().unique()}
    return systems.map(names).fillna(systems)


def with_squared_parallel_read(frame: pd.DataFrame) -> pd.DataFrame:
    """The 86 H200 rows whose MoE split was recorded as ``moe_tp_size = moe_ep_size = N`` with ``tp_size``
    (or ``attention_dp_size``) ``N^2`` -- DeepSeek-R1/V3 and gpt-oss-120b under TensorRT-LLM, Qwen3.5-397B
    under SGLang -- read as the N-GPU runs their ids name (``..._tp8_ep8_922``: tp 8, ep 8). Why: the engines
    require ``moe_tp x moe_ep = tp x attention_dp`` = the GPUs of the group, so N x N over N^2 GPUs would
    be 64 GPUs for a ``tp8`` id; where the id names no TP (``cfg181``), 9 of its 15 rows measure
    byte-identical TTFT and TPOT to 8-GPU rows of the same model and workload. Read as tp N (or attention
    DP N), MoE EP N, MoE TP 1, with ``parallel_read`` saying so; the measurements are untouched."""
    out = frame.copy()
    out["parallel_read"] = ""
    if not {"moe_tp_size", "moe_ep_size", "tp_size", "attention_dp_size"} <= set(out.columns):
        return out
    n = out["moe_ep_size"].fillna(1)
    tp, dp = out["tp_size"].fillna(1), out["attention_dp_size"].fillna(1)
    named = out["id"].astype(str).str.extract(r"_tp(\d+)_")[0].astype(float)
    squared = (n > 1) & (out["moe_tp_size"] == n) & (tp * dp == n * n) & (named.isna() | (named == n))
    for column, recorded in (("tp_size", tp), ("attention_dp_size", dp)):
        hit = squared & (recorded == n * n)
        out.loc[hit, column] = n[hit]
    out.loc[squared, "moe_tp_size"] = 1.0
    out.loc[squared, "parallel_read"] = (
        "recorded tp x attention_dp = moe_tp x moe_ep = N^2: read as N GPUs (tp or attention DP N, MoE EP N)"
    )
    return out


class AllReduceTable:
    """All-reduce time (us) = latency + ring traffic / bus bandwidth, fitted per group size on a GPU's table.

    The fit (not an interpolation): small-message medians are noisy (a 10 KB message measures 5-40 us on
    one box), so the latency is the median of the per-size minima under 64 KB and the bandwidth the median
    ring rate of messages of 64 MB and more.
    """

    def __init__(self, fits: dict[int, tuple[float, float]]) -> None:
        self.fits = fits  # gpus -> (latency_us, bus bytes per us)

    def link_gbps(self) -> float:
        return max(bw for _, bw in self.fits.values()) / 1e3

    def __call__(self, size_bytes: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        size_bytes, gpus = np.broadcast_arrays(np.asarray(size_bytes, float), np.asarray(gpus, float))
        out = np.zeros(size_bytes.shape)
        for n in np.unique(gpus):
            if n <= 1:
                continue
            have = min(self.fits, key=lambda k: (abs(k - n), -k))
            latency, rate = self.fits[have]
            mask = gpus == n
            out[mask] = latency * n / have + 2 * (n - 1) / n * size_bytes[mask] / rate
        return out


SMALL_MESSAGE = 64 * 1024
LARGE_MESSAGE = 64 * 1024 * 1024


def read_allreduce_tables(datasets_dir: Path, tree: bool = False) -> dict[str, AllReduceTable]:
    """device_id -> its all-reduce fit (latency + bandwidth per group size) from PipeWeave's table
    (``tree``: ``datasets_dir`` is a PipeWeave tree's root)."""
    tables: dict[str, AllReduceTable] = {}
    folder = Path(datasets_dir) / (
        PIPEWEAVE_COLLECTIVE.relative_to("pipeweave") if tree else PIPEWEAVE_COLLECTIVE
    )
    for path in sorted(folder.glob("*/all_reduce.csv")):
        frame = pd.read_csv(path)
        fits = {}
        for n, group in frame.groupby("num_workers"):
            per_size = (
                group.groupby("size").agg(
                    low=("time_stats.all_reduce.min", "median"),
                    med=("time_stats.all_reduce.median", "median"),
                )
                * 1e3
            )  # us
            small = per_size[per_size.index < SMALL_MESSAGE]
            large = per_size[per_size.index >= LARGE_MESSAGE]
            if small.empty or large.empty:
                continue
            latency = float(small["low"].median())
            moved = 2 * (n - 1) / n * large.index.to_numpy(float)
            rate = float(np.median(moved / np.maximum(large["med"].to_numpy() - latency, 1e-3)))
            fits[int(n)] = (latency, rate)
        if fits:
            tables[PIPEWEAVE_GPUS.get(path.parent.name, path.parent.name.lower())] = AllReduceTable(fits)
    return tables
