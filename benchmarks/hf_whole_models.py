"""Hugging Face transformers as whole programs: predicted time vs the sum of ops' rooflines, and each op
family's achieved rate vs what the GPU's measured rows reach at matching shapes.

Issue 36 scored ``kernelcast predict MODEL.py`` on published whole-model timings (FP32 inference, batch
2-16, sequence 512-2048, BERT/GPT-2/OPT-style) and found every answer too slow. This builds such models
from their transformers configs (offline: no weights, fake tensors, as ``predict MODEL.py`` does), asks
the predictor for each GPU, and prints per (GPU, model):

- ``pred_ms``: the answer's total; ``ops_ms``: its ops' GPU time; ``roof_ms``: the sum of its ops'
  roofline times (the floor any answer must respect);
- ``pred/gemm_measured``: the total over the same total with every GEMM at its measured rows' median rate
  (a proxy of the GEMMs' share of the bias, where the GPU has rows);
- per family (``gemm``: mm/addmm/linear; ``bmm``; ``attention``; ``norm``; ``softmax``): the share of the
  peak the answer's ops reach (FLOP/s over the dtype's peak for GEMMs, bytes/s over DRAM for the
  rest, time-weighted), beside the median of the GPU's **measured** rows (NeuSight's FP32 ``linear``,
  ``bmm``, ``ln``, ``softmax``, training and test files: training data, not a scored split) at shapes
  within a factor 2 per dimension of the model's ops.

Usage (from the repository root):
  KERNELCAST_HOME=.kernelcast python benchmarks/hf_whole_models.py [--model DIR|models:/kernelcast@champion]
      [--gpus v100-pcie-32gb,...] [--models bert-large,...] [--csv FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

DATASETS = Path(
    os.environ.get("KERNELCAST_DATASETS_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets")
)
NEUSIGHT = DATASETS / "neusight" / "scripts" / "asplos"
GPUS = ("v100-pcie-32gb", "p100-pcie-16gb", "a100-pcie-40gb", "h100-sxm", "mi100", "mi210")
# NeuSight device strings -> catalog ids (the GPUs of the whole-model table that NeuSight measured)
NEUSIGHT_DEVICES = {
    "Tesla V100-PCIE-32GB": "v100-pcie-32gb",
    "Tesla P100-PCIE-16GB": "p100-pcie-16gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "AMD Instinct MI100": "mi100",
}
# name -> (transformers class prefix, config kwargs, batch, sequence)
MODELS: dict[str, tuple[str, dict[str, Any], int, int]] = {
    "bert-large": (
        "Bert",
        {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
        8,
        512,
    ),
    "gpt2-medium": ("GPT2", {"n_embd": 1024, "n_layer": 24, "n_head": 16, "n_positions": 1024}, 4, 1024),
    "gpt2-large": ("GPT2", {"n_embd": 1280, "n_layer": 36, "n_head": 20, "n_positions": 1024}, 4, 1024),
    "gpt3-xl": ("GPT2", {"n_embd": 2048, "n_layer": 24, "n_head": 16, "n_positions": 2048}, 2, 2048),
    "opt-1.3b": (
        "OPT",
        {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "ffn_dim": 8192,
            "max_position_embeddings": 2048,
        },
        4,
        1024,
    ),
    "gpt3-2.7b": ("GPT2", {"n_embd": 2560, "n_layer": 32, "n_head": 32, "n_positions": 2048}, 2, 1024),
}
MODULE = """
import torch
from transformers import {cls}Config, {cls}Model


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = {cls}Model({cls}Config(**{kwargs!r})).eval()

    def forward(self, ids):
        return self.m(input_ids=ids).last_hidden_state


def get_inputs():
    return [torch.randint(0, 1000, ({batch}, {seq}))]


def get_init_inputs():
    return []
"""
FAMILIES = ("gemm", "bmm", "attention", "norm", "softmax")
MEASURED_OPS = {"gemm": "linear", "bmm": "bmm", "norm": "ln", "softmax": "softmax"}


def module_text(name: str) -> str:
    cls, kwargs, batch, seq = MODELS[name]
    return MODULE.format(cls=cls, kwargs=kwargs, batch=batch, seq=seq)


def measured_rows() -> pd.DataFrame:
    """NeuSight FP32 rows (linear, bmm, ln, softmax) of the GPUs above: device_id, op, dims, latency_us."""
    files = []
    for op in MEASURED_OPS.values():
        files += list((NEUSIGHT / "data" / "dataset" / "train" / "collect" / op).glob("p*/*.csv"))
        files += list((NEUSIGHT / "data" / "dataset_amd").glob(f"*/collect/{op}/p*/*.csv"))
        test = NEUSIGHT / "data" / "dataset" / "test" / f"{op}.csv"
        files += [test] if test.is_file() else []
    keep = ["OPName", "Latency", "Device", "B", "M", "N", "K", "H"]
    parts = [pd.read_csv(f, usecols=lambda c: c in keep) for f in files]
    rows = pd.concat(parts, ignore_index=True)
    rows["device_id"] = rows["Device"].map(NEUSIGHT_DEVICES)
    rows = rows[rows["device_id"].notna()].copy()
    rows["latency_us"] = rows["Latency"].astype(float) * 1e3
    return rows.drop(columns=["Latency", "Device"])


def _dims(family: str, shape: dict[str, float]) -> tuple[str, dict[str, float]] | None:
    """The measured op and its dims a program op compares with (linear: M folded over any batch)."""
    if family == "linear":
        return "linear", {"M": shape["M"], "N": shape["N"], "K": shape["K"]}
    if family == "bmm":
        return "bmm", {"B": shape["B"], "M": shape["M"], "N": shape["N"], "K": shape["K"]}
    if family == "attention":  # PyTorch 2.1's FP32 attention: two bmm (Q K^T, P V) around a softmax
        b = shape["B"] * shape["heads"]
        return "bmm", {"B": b, "M": shape["seq"], "N": shape["seq_kv"], "K": shape["head_dim"]}
    if family in ("layernorm", "softmax") and "B" in shape and "H" in shape:
        return ("ln" if family == "layernorm" else "softmax"), {"B": shape["B"], "H": shape["H"]}
    return None


def measured_rate(rows: pd.DataFrame, device: str, op: str, dims: dict[str, float]) -> float | None:
    """Median rate (FLOP/s for GEMMs, bytes/s for rows ops) of the GPU's measured rows within 2x per dim."""
    sel = rows[(rows["device_id"] == device) & (rows["OPName"] == op)]
    if op == "linear":
        sel = sel.assign(M=sel["M"] * sel["B"].fillna(1.0))
    for k, v in dims.items():
        sel = sel[(sel[k] >= v / 2) & (sel[k] <= v * 2)]
    if sel.empty:
        return None
    if op in ("linear", "bmm"):
        work = 2.0 * sel["M"] * sel["N"] * sel["K"] * (sel["B"] if op == "bmm" else 1.0)
    else:
        work = 8.0 * sel["B"] * sel["H"]  # fp32 read + write
    return float(np.median(work / (sel["latency_us"] * 1e-6)))


def peaks(device: str, catalog: Any) -> tuple[float, float]:
    """(FP32 FLOP/s of the pipe FP32 GEMMs run on, DRAM bytes/s)."""
    from components.physics import roofline as physics

    spec = catalog.get(device)
    return float(physics.pipe_for("fp32", spec).peak_flops), float(spec.dram_gbps) * 1e9


def family_of(row: Any) -> str | None:
    if row.family in ("linear", "bmm", "attention"):
        return "gemm" if row.family == "linear" else str(row.family)
    if row.family == "layernorm" or row.kind == "norm":
        return "norm"
    if row.family == "softmax":
        return "softmax"
    return None


def model_rows(
    name: str, predictor: Any, gpus: list[str], catalog: Any, measured: pd.DataFrame, basis: str = "auto"
) -> list[dict[str, Any]]:
    from components.programs.module_predict import answer_ops, program_frames, resolve_program_model
    from components.programs.ops import program_ops
    from components.programs.trace import trace_module

    trace = trace_module(module_text(name))
    program = program_ops(trace.ops)
    model, matches = resolve_program_model(predictor)
    if basis != "auto":  # the program model of one basis, whichever resolve_program_model would pick
        from components.platform.config import get_settings
        from components.programs.module_predict import ROOFLINE_BASIS, basis_id, program_model_path
        from components.programs.overheads import ProgramModel

        fitted = ROOFLINE_BASIS if basis == "roofline" else basis_id(predictor)
        model = ProgramModel.load(program_model_path(get_settings().models_dir, fitted))
        matches = basis != "roofline"
    specs = [catalog.get(g) for g in gpus]
    times, frame = program_frames([program], specs, predictor, model, matches)
    out = []
    for device in gpus:
        ops = answer_ops(times[times["device_id"] == device], model, matches)
        total = float(frame.loc[frame["device_id"] == device, "predicted_us"].iloc[0])
        fp32, dram = peaks(device, catalog)
        row: dict[str, Any] = {
            "gpu": device,
            "model": name,
            "pred_ms": total / 1e3,
            "ops_ms": float(ops["total_us"].sum()) / 1e3,
            "roof_ms": float(ops["roof_total"].sum()) / 1e3,
        }
        fams = [family_of(r) for r in ops.itertuples()]
        ops = ops.assign(fam=fams)
        swapped = 0.0  # the answer with every GEMM at its measured rows' median rate instead of its own
        for fam in FAMILIES:
            part = ops[ops["fam"] == fam]
            if part.empty:
                continue
            t = float(part["total_us"].sum()) * 1e-6
            row[f"{fam}_ms"] = t * 1e3
            compute = fam in ("gemm", "bmm", "attention")
            work = (part["flops"] if compute else part["bytes_moved"]).fillna(0.0) * part["count"]
            row[f"{fam}_pred"] = float(work.sum()) / t / (fp32 if compute else dram)
            rates, weights = [], []
            for r in part.itertuples():
                dims = _dims(str(r.family), dict(program.questions[int(r.question)].shape))
                rate = measured_rate(measured, device, *dims) if dims else None
                if rate is not None:
                    rates.append(rate / (fp32 if compute else dram))
                    weights.append(float(r.total_us))
                    if fam == "gemm":
                        swapped += float(r.flops) * float(r.count) / rate - float(r.total_us) * 1e-6
            if rates:
                order = np.argsort(rates)
                cum = np.cumsum(np.asarray(weights)[order])
                row[f"{fam}_meas"] = float(np.asarray(rates)[order][np.searchsorted(cum, cum[-1] / 2)])
        row["pred/gemm_measured"] = total / (total + swapped * 1e6)
        out.append(row)
    return out


def main() -> None:
    from components.devices import load_catalog
    from components.serving.models import load_model

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="models:/kernelcast@champion")
    parser.add_argument("--gpus", default=",".join(GPUS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument(
        "--basis", choices=("auto", "predictor", "roofline"), default="auto", help="program model basis"
    )
    ns = parser.parse_args()
    catalog = load_catalog()
    predictor = load_model(ns.model).predictor
    measured = measured_rows()
    rows = []
    for name in ns.models.split(","):
        rows += model_rows(name, predictor, ns.gpus.split(","), catalog, measured, ns.basis)
    table = pd.DataFrame(rows)
    table["pred/roof"] = table["pred_ms"] / table["roof_ms"]
    cols = ["gpu", "model", "pred_ms", "ops_ms", "roof_ms", "pred/roof", "pred/gemm_measured"]
    cols += [c for f in FAMILIES for c in (f"{f}_pred", f"{f}_meas") if c in table.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table[cols].round(3).to_string(index=False))
    print("\n*_pred: share of peak the answer's ops reach (FP32 GEMM pipe: gemm/bmm/attention; DRAM else)")
    print("*_meas: the GPU's measured NeuSight rows within 2x per dimension (median, time-weighted)")
    print("pred/gemm_measured: the total over the total with each GEMM at its measured rows' median rate")
    summary = table.groupby("gpu")[["pred/roof", "pred/gemm_measured"]].median().round(3)
    print("\nmedian over the models per GPU:\n" + summary.to_string())
    if ns.csv is not None:
        from components.common.atomic import atomic_write_text

        atomic_write_text(ns.csv, table.to_csv(index=False))


if __name__ == "__main__":
    main()
