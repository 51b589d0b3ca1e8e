"""The gate's ``aiconfigurator-unseen-gpu`` entry at its caps, per (family, GPU, dtype): the engine
(transfer tier, else spec), the spec tier alone and the sibling rule, MAPE; and the wall time. The same call
the gate makes (``opmodel_bench.unseen_gpu`` with ``gate_entry``'s default caps), so before/after figures
compare.

    PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/transfer_gate_breakdown.py \
        STORE DATASETS [OUT] [GPUS] [ROWS]

ROWS: a parquet of every held-out row with each answer (``transfer_bench.row_detail``), and a finer table per
phase (attention prefill/decode) and roofline bound.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd


def phase_table(rows: pd.DataFrame) -> pd.DataFrame:
    """MAPE % per (family, GPU, dtype, phase, bound) of each answer on the rows where the sibling rule
    answers (all of them for the engine and spec columns' ``n``)."""
    rows = rows.assign(
        phase=np.where(rows["family"] != "attention", "-", np.where(rows["S"] == 1, "decode", "prefill")),
        dtype=rows["dtype"].astype(str)
        + np.where(rows["kv_dtype"].notna(), "|" + rows["kv_dtype"].astype(str), ""),
    )
    cols = ["engine", "spec", "transfer", "sibling"]
    for c in cols:
        rows[c] = 100 * (rows[c] - rows["latency_us"]).abs() / rows["latency_us"]
    keys = ["family", "device", "dtype", "phase", "bound"]
    table = rows.groupby(keys).agg(n=("engine", "size"), share=("tier", lambda t: (t == "transfer").mean()))
    return table.join(rows.groupby(keys)[cols].mean()).round(1)


def answered_by(support: pd.Series) -> pd.Series:
    """Which relatives answered a row, and how: each relative with its measured tier (measured,
    interpolated, held), ``+ spec`` where the far choice blended the spec tier in, ``spec`` for the spec
    tier."""
    text = support.astype(str)
    relatives = text.str.extract(r"carried over from (.*?) by roofline", expand=False)
    short = relatives.str.replace(r"\((measured|interpolated|held)[^)]*\)", r"(\1)", regex=True)
    blended = np.where(text.str.contains("blended with the spec tier"), " + spec", "")
    return pd.Series(np.where(relatives.notna(), short + blended, "spec"), index=support.index)


def source_tables(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """GEMM MAPE % per (GPU, dtype, bound, relatives that answered) and per (GPU, dtype, M range): where
    the mechanism loses what a relative measured (a far relative or the spec tier blended in,
    interpolation)."""
    gemm = rows[rows["family"] == "gemm"].copy()
    gemm["M range"] = pd.cut(
        gemm["M"], [0, 16, 128, 1024, 8192, np.inf], labels=["<=16", "<=128", "<=1k", "<=8k", ">8k"]
    )
    gemm["answered by"] = answered_by(gemm["support"])
    cols = ["engine", "spec", "transfer", "sibling"]
    for c in cols:
        gemm[c] = 100 * (gemm[c] - gemm["latency_us"]).abs() / gemm["latency_us"]
    keys = ["device", "dtype", "bound", "answered by"]
    out = []
    for level in (keys, ["device", "dtype", "M range"]):
        table = gemm.groupby(level, observed=True)[cols].mean().round(1)
        out.append(table.join(gemm.groupby(level, observed=True).size().rename("n")))
    return out


def main(
    store_dir: str, datasets: str, out: str | None = None, gpus: str | None = None, rows: str | None = None
) -> None:
    from components.devices.aiconfigurator_sheet import aiconfigurator_device_ids
    from components.evaluation.opmodel_bench import unseen_gpu
    from components.opmodel.store import load_store

    store = load_store(Path(store_dir), ("gemm", "attention", "moe", "bmm"))
    held = {str(d) for f in store.values() for d in f["device_id"].unique()} & aiconfigurator_device_ids()
    if gpus:
        held &= set(gpus.split(","))
    detail: list | None = [] if rows else None
    started = time.perf_counter()
    result = unseen_gpu(
        store,
        Path(datasets),
        gpus=tuple(sorted(held)),
        train_per_group=600,
        test_per_group=100,
        rounds=40,
        transfer_pair_rows=80,
        detail=detail,
    )
    seconds = time.perf_counter() - started
    frame = pd.DataFrame(result["groups"])
    table = frame.groupby(["family", "device", "dtype"]).agg(
        n=("n", "sum"),
        ape=("sum_ape", "sum"),
        spec=("sum_spec", "sum"),
        sib=("sum_sibling", "sum"),
        n_sib=("n_sibling", "sum"),
        share=("transfer_share", "mean"),
    )
    table["engine"] = 100 * table.ape / table.n
    table["spec_only"] = 100 * table.spec / table.n
    table["sibling"] = 100 * table.sib / table.n_sib
    pd.set_option("display.width", 200)
    print(table[["n", "share", "engine", "spec_only", "sibling"]].round(1).to_string())
    for level in (["family", "device"], ["family"]):
        agg = table.groupby(level=level)[["n", "ape", "spec", "sib", "n_sib"]].sum()
        agg = pd.DataFrame(
            {
                "engine": 100 * agg.ape / agg.n,
                "spec_only": 100 * agg.spec / agg.n,
                "sibling": 100 * agg.sib / agg.n_sib,
            }
        )
        print(agg.round(1).to_string())
    print(f"seconds {seconds:.1f}")
    if rows and detail:
        every = pd.concat(detail, ignore_index=True)
        every.to_parquet(rows)
        print(phase_table(every).to_string())
        for table in source_tables(every):
            print(table.to_string())
    print("settings", json.dumps(result.get("transfer_settings")))
    if out:
        Path(out).write_text(
            json.dumps(
                {
                    "seconds": seconds,
                    "metrics": result["metrics"],
                    "groups": result["groups"],
                    "settings": result.get("transfer_settings"),
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
