"""The ``llm-serving-pipeweave`` gate entry broken down per GPU, run, model and workload.

    cd TREE && PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/pipeweave_breakdown.py [OUT.csv]

Runs the bench as the gate does (``bench_pipeweave.run_pipeweave_bench`` without the unseen-GPU variant, the
op engine of ``$KERNELCAST_HOME``) and prints the overall MAPE, the mean absolute error per GPU, per run
(signed, with each phase's chosen op source and the reachable-rate slowdowns the fold learned) and per model
and workload; OUT.csv keeps the per-run predictions. Comparing two trees on one state: run it in each.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from components.common.metrics import mape
from components.deployments.bench import bench_engine
from components.deployments.bench_pipeweave import run_pipeweave_bench
from components.devices import load_catalog
from components.platform.config import get_settings

TARGETS = ("prefill", "decode", "total")


def main(out: str | None = None) -> None:
    started = time.perf_counter()
    bench = run_pipeweave_bench(
        Path(get_settings().datasets_dir), load_catalog(), engine=bench_engine(), variants=False
    )
    pred = bench.predictions.copy()
    print(f"bench {time.perf_counter() - started:.1f} s")
    for t in TARGETS:
        print(t, f"{mape(pred[f'{t}_ms'].to_numpy(), pred[f'{t}_pred_ms'].to_numpy()):.2%}")
        pred[f"{t}_err"] = pred[f"{t}_pred_ms"] / pred[f"{t}_ms"] - 1
    errors = [f"{t}_err" for t in TARGETS]
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 200)
    print(pred.groupby("gpu")[errors].agg(lambda x: np.mean(np.abs(x))).round(3))
    cols = ["gpu", "tp", "model", "workload", "batch", *errors, "prefill_source", "decode_source"]
    cols += [c for c in ("power_slowdown", "sm_feed_slowdown") if c in pred]
    print(pred[cols].sort_values(["gpu", "tp", "model"]).round(3).to_string())
    for by in ("model", "workload"):
        print(pred.groupby(by)[errors[:2]].agg(lambda x: np.mean(np.abs(x))).round(3))
    if out:
        pred.drop(columns=[c for c in pred if c.endswith("_lines") or c == "spec"]).to_csv(out, index=False)
    print(bench.notes[-1])


if __name__ == "__main__":
    main(*sys.argv[1:2])
