"""Where the MoE error of ``aiconfigurator-unseen-gpu`` sits: the held-out rows that
``benchmarks/transfer_gate_breakdown.py`` wrote (its ROWS parquet), MAPE % of the engine and the sibling rule
per (GPU, dtype, routed tokens per expert ``T * topk / E``, expert config ``E/topk``), the share of each
cell in its GPU's summed error, and the signed median log error (positive: the answer too slow).

    PYTHONPATH=. python benchmarks/moe_error_map.py ROWS.parquet [AFTER_ROWS.parquet]

With a second parquet (the same rows answered by other code): the engine's MAPE before -> after per cell.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

BUCKETS = [0, 0.5, 2, 8, 32, 128, 512, np.inf]


def error_map(path: str) -> pd.DataFrame:
    """The MoE rows of a ROWS parquet with their bucket, expert config and errors."""
    rows = pd.read_parquet(path)
    moe = rows[rows["family"] == "moe"].copy()
    moe["tokens/expert"] = pd.cut(moe["T"] * moe["topk"] / moe["E"], BUCKETS).astype(str)
    moe["experts"] = moe["E"].astype(int).astype(str) + "/" + moe["topk"].astype(int).astype(str)
    for answer in ("engine", "sibling"):
        moe[answer + "_ape"] = 100 * (moe[answer] - moe["latency_us"]).abs() / moe["latency_us"]
    moe["log_err"] = np.log(moe["engine"] / moe["latency_us"])
    return moe


def table(moe: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grouped = moe.groupby(keys, observed=True)
    out = grouped.agg(
        n=("engine_ape", "size"),
        engine_mape=("engine_ape", "mean"),
        sibling_mape=("sibling_ape", "mean"),
        log_err=("log_err", "median"),
    )
    total = moe.groupby("device")["engine_ape"].sum()
    summed = grouped["engine_ape"].sum()
    out["share_of_gpu_error"] = 100 * summed / total.reindex(out.index.get_level_values("device")).to_numpy()
    return out.round(2)


def main(path: str, after: str | None = None) -> None:
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    moe = error_map(path)
    if after:
        later = error_map(after)
        keys = ["device", "dtype", "T", "E", "topk", "H", "I", "tp", "ep", "distribution"]
        moe = moe.merge(later[[*keys, "engine_ape"]], on=keys, suffixes=("", "_after"))
    for keys in (["device", "dtype"], ["device", "dtype", "tokens/expert"], ["device", "dtype", "experts"]):
        out = table(moe, keys)
        if after:
            out["after"] = moe.groupby(keys, observed=True)["engine_ape_after"].mean().round(2)
        print(out.to_string(), "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
