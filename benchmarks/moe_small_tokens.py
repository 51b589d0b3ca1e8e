"""The MoE kernels at a handful of tokens per expert (issue 35, docs/engines.md "moe35"): what the measured
per-framework MoE tables of H100 and H200 say about efficiency (roofline time / measured time; the roofline
reads the touched experts' weights, ``physics.moe.experts_touched``) against tokens per touched expert, and
whether that efficiency carries to a site the table never measured.

1. Median efficiency per (GPU, dtype, framework) and bin of tokens per touched expert (balanced routing,
   EP 1, T <= 256).
2. Leave-one-site-out within each (GPU, framework, dtype, moe TP) at T <= 64: a site's times answered by the
   median over the other sites of their efficiency at the same tokens per touched expert, against one
   constant efficiency (the spec prior's form), MAPE %.
3. gpt-oss-120b's experts (E 128, top-4, H = I = 2880), which the ingested store does not hold
   (AIConfigurator measured them as ``w4a16_mxfp4``, a dtype ingest drops): the op engine's answer (the
   runs ask ``nvfp4``; Hopper has no fp4 pipe) and the tokens-per-expert median of the framework's fp8 sites
   (fp8_block for SGLang), against the measured ``w4a16_mxfp4`` kernel, MAPE % (T <= 16 and above).

    KERNELCAST_HOME=<state copy> KERNELCAST_DATASETS_DIR=... PYTHONPATH=. \\
        python benchmarks/moe_small_tokens.py STORE_DIR
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

GPUS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm"}
SITE = ["E", "topk", "H", "I"]
GPT_OSS = {"E": 128.0, "topk": 4.0, "H": 2880.0, "I": 2880.0}


def tokens_per_expert(t: np.ndarray, e: np.ndarray, k: np.ndarray) -> np.ndarray:
    from components.physics.moe import experts_touched

    return t * k / experts_touched(t, e, k)


def efficiency_rows(store_dir: Path) -> pd.DataFrame:
    """Balanced, EP 1, T <= 1024 rows of the per-framework MoE table on H100/H200, with their log
    efficiency ``lu`` and log2 tokens per touched expert ``lq``."""
    from components.devices import load_catalog
    from components.physics import roofline as physics

    catalog = load_catalog()
    m = pd.read_parquet(store_dir / "by_framework" / "moe.parquet")
    m = m[m["device_id"].isin(list(GPUS)) & (m["distribution"] == "balanced") & (m["ep"] == 1)]
    m = m[m["T"] <= 1024]
    parts = []
    for (device, dtype), g in m.groupby(["device_id", "dtype"], observed=True):
        shape = {k: g[k].to_numpy("float64") for k in ["T", *SITE, "tp", "ep"]}
        roof = physics.roofline("moe", str(dtype), shape, catalog.get(str(device))).time_us
        lu = np.log(np.clip(roof / g["latency_us"].to_numpy(), 1e-6, 1.0))
        lq = np.log2(tokens_per_expert(shape["T"], shape["E"], shape["topk"]))
        parts.append(g.assign(lu=lu, lq=lq, device_id=str(device), dtype=str(dtype)))
    return pd.concat(parts, ignore_index=True)


def median_curve(rows: pd.DataFrame, q: np.ndarray) -> np.ndarray:
    """Median over the sites of ``rows`` of each site's log efficiency interpolated at ``q`` (log2 tokens
    per touched expert; a site answers inside its measured range only)."""
    values = []
    for _, s in rows.groupby(SITE, observed=True):
        x, first = np.unique(s["lq"].to_numpy(), return_index=True)
        values.append(np.interp(q, x, s["lu"].to_numpy()[first], left=np.nan, right=np.nan))
    stacked = np.vstack(values)
    out = np.full(len(q), np.nan)
    some = np.isfinite(stacked).any(axis=0)
    out[some] = np.nanmedian(stacked[:, some], axis=0)
    return out


def leave_one_site_out(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    small = rows[rows["T"] <= 64]
    keys = ["device_id", "framework", "dtype", "tp"]
    for (device, fw, dtype, _tp), g in small.groupby(keys, observed=True):
        if dtype not in ("bf16", "fp8", "fp8_block") or g.groupby(SITE, observed=True).ngroups < 4:
            continue
        for key, s in g.groupby(SITE, observed=True):
            rest = g[~(g[SITE] == pd.Series(dict(zip(SITE, key, strict=True)))).all(axis=1)]
            by_tpe = np.exp(s["lu"].to_numpy() - median_curve(rest, s["lq"].to_numpy()))
            const = np.exp(s["lu"].to_numpy() - np.median(rest["lu"]))
            out.append(
                pd.DataFrame(
                    {
                        "device": device,
                        "framework": fw,
                        "dtype": dtype,
                        "T<=16": s["T"].to_numpy() <= 16,
                        "by_tpe": 100 * np.abs(by_tpe - 1),
                        "constant": 100 * np.abs(const - 1),
                    }
                )
            )
    return pd.concat(out, ignore_index=True).dropna()


def gpt_oss_truth(datasets: Path) -> pd.DataFrame:
    """The measured ``w4a16_mxfp4`` kernels at gpt-oss-120b's site (balanced, EP 1, moe TP 1-8), median
    over engine versions, us."""
    base = datasets / "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"
    rows = []
    for device, folder in GPUS.items():
        for f in sorted(glob.glob(str(base / folder / "moe/*/*/moe_perf.parquet"))):
            d = pd.read_parquet(f)
            d = d[
                (d["moe_dtype"] == "w4a16_mxfp4")
                & (d["num_experts"] == 128)
                & (d["topk"] == 4)
                & (d["hidden_size"] == 2880)
                & (d["distribution"] == "balanced")
                & (d["moe_ep_size"] == 1)
                & (d["num_tokens"] <= 512)
                & d["moe_tp_size"].isin([1, 2, 4, 8])
            ]
            rows.append(d.assign(device=device, framework=Path(f).parts[-3]))
    t = pd.concat(rows).groupby(["device", "framework", "moe_tp_size", "num_tokens"])["latency"].median()
    return t.mul(1000.0).rename("truth_us").reset_index()


def gpt_oss_answers(rows: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    from components.deployments.bench import bench_engine
    from components.devices import load_catalog

    catalog, engine = load_catalog(), bench_engine()
    out = []
    for (device, fw, tp), g in truth.groupby(["device", "framework", "moe_tp_size"]):
        t = g["num_tokens"].to_numpy("float64")
        shape = {"T": t, **{k: np.full(len(t), v) for k, v in GPT_OSS.items()}, "tp": np.full(len(t), tp)}
        answer = engine.for_framework(fw).predict("moe", "nvfp4", shape, catalog.get(device))
        dtype = "fp8_block" if fw == "sglang" else "fp8"
        own = rows[
            (rows["device_id"] == device)
            & (rows["framework"] == fw)
            & (rows["dtype"] == dtype)
            & (rows["tp"] == tp)
        ]
        q = np.log2(tokens_per_expert(t, np.full(len(t), 128.0), np.full(len(t), 4.0)))
        by_tpe = answer.roof.time_us / np.exp(median_curve(own, q))
        truth_us = g["truth_us"].to_numpy()
        out.append(
            pd.DataFrame(
                {
                    "device": device,
                    "framework": fw,
                    "T<=16": t <= 16,
                    "engine": 100 * np.abs(answer.duration_us / truth_us - 1),
                    "by_tpe": 100 * np.abs(by_tpe / truth_us - 1),
                    "engine/truth": answer.duration_us / truth_us,
                }
            )
        )
    return pd.concat(out, ignore_index=True)


def main(store_dir: str) -> None:
    pd.set_option("display.width", 200)
    rows = efficiency_rows(Path(store_dir))
    first = rows[rows["T"] <= 256]
    bins = pd.cut(first["lq"].rpow(2), [0, 1.01, 1.5, 2, 4, 8, 16, 64])
    table = first.groupby(["device_id", "dtype", "framework", bins], observed=True)["lu"].median()
    print("median efficiency by tokens per touched expert")
    print(np.exp(table).unstack().round(3).to_string())
    loso = leave_one_site_out(rows)
    print("leave-one-site-out MAPE %, T <= 64")
    print(loso.groupby(["device", "framework", "dtype"])[["by_tpe", "constant"]].mean().round(1).to_string())
    print(loso.groupby("T<=16")[["by_tpe", "constant"]].mean().round(1).to_string())
    datasets = Path(os.environ["KERNELCAST_DATASETS_DIR"])
    answers = gpt_oss_answers(rows, gpt_oss_truth(datasets))
    print("gpt-oss-120b experts: MAPE % against the measured w4a16_mxfp4 kernels")
    print(answers.groupby(["device", "framework", "T<=16"]).mean().round(2).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
