"""The ``llm-serving-silicon`` gate entry, and the runs whose disaggregated worker counts are derived beside
the rest, under the gate's composition and under the simulated engines.

    cd TREE && KERNELCAST_HOME=... PYTHONPATH=. python benchmarks/silicon_disagg_workers.py

Needs the op engine in ``$KERNELCAST_HOME`` (``components.opmodel.train.train_engine``). Prints the gate
metrics and notes, then TTFT / TPOT MAPE (held-out GPU) of the derived runs and of the recorded runs per
engine and GPU, and the median predicted / measured ratio of the derived ones (the sign of their error).
``check`` instead scores the recorded disaggregated runs twice -- with their recorded worker counts and
with the counts blanked and derived as for the others -- the one place the derivation meets its truth.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from components.common.metrics import mape
from components.deployments.bench import bench_engine, gate_entry
from components.deployments.bench_common import op_sources
from components.deployments.bench_engines import leave_one_gpu_out, simulate_runs
from components.deployments.bench_silicon import run_silicon_bench, silicon_deployments
from components.deployments.data import read_silicon_runs
from components.deployments.disagg_workers import with_derived_workers
from components.deployments.ops import ENGINE_SOURCE
from components.devices import load_catalog
from components.platform.config import get_settings


def _line(tag: str, g: pd.DataFrame, true: tuple[str, str], pred: tuple[str, str]) -> str:
    ttft = mape(g[true[0]].to_numpy(), g[pred[0]].to_numpy())
    tpot = mape(g[true[1]].to_numpy(), g[pred[1]].to_numpy())
    ratio = (g[pred[0]] / g[true[0]]).median(), (g[pred[1]] / g[true[1]]).median()
    return (
        f"{tag:34s} n={len(g):4d} TTFT {ttft:6.1%} TPOT {tpot:6.1%} "
        f"(median pred/true {ratio[0]:.2f} / {ratio[1]:.2f})"
    )


def _split(frame: pd.DataFrame, by: list[str]) -> list[tuple[str, pd.DataFrame]]:
    out = [("derived", frame[frame["workers_derived"]]), ("recorded", frame[~frame["workers_derived"]])]
    for key, g in frame[frame["workers_derived"]].groupby(by):
        out.append((f"derived {'/'.join(key)}", g))
    return out


def report(ds: Path, catalog, engine) -> None:
    entry = gate_entry("llm-serving-silicon", ds, catalog, engine)
    print(json.dumps(entry["metrics"]))
    for note in entry["report"]["notes"]:
        print("note:", note)
    pred = run_silicon_bench(ds, catalog, engine=engine, variants=False).predictions
    for tag, g in _split(pred, ["backend", "device_id"]):
        print(
            _line(f"gate {tag}", g, ("silicon_ttft_ms", "silicon_tpot_ms"), ("ttft_pred_ms", "tpot_pred_ms"))
        )
    fn = op_sources(engine, False)[ENGINE_SOURCE]
    runs = with_derived_workers(read_silicon_runs(ds), catalog, ds, fn)
    frame, _ = leave_one_gpu_out(simulate_runs(runs, catalog, ds, fn, silicon_deployments))
    frame = frame.merge(runs[["id", "workers_derived"]].drop_duplicates("id"), on="id")
    for tag, g in _split(frame, ["engine", "device_id"]):
        print(_line(f"sim {tag}", g, ("ttft_us", "tpot_us"), ("ttft_pred_us", "tpot_pred_us")))


def check(ds: Path, catalog, engine) -> None:
    runs = read_silicon_runs(ds)
    rec = (runs["mode"] == "disagg") & runs["decode_num_workers"].notna() & runs["id"].str.contains(r"_c\d+_")
    blank = runs.copy()
    blank.loc[rec, ["prefill_num_workers", "decode_num_workers", "decode_batch_size"]] = np.nan
    for name, frame in (("recorded counts", runs), ("derived counts", blank)):
        pred = run_silicon_bench(ds, catalog, engine=engine, variants=False, runs=frame).predictions
        g = pred[pred["id"].isin(set(runs.loc[rec, "id"]))]
        print(_line(name, g, ("silicon_ttft_ms", "silicon_tpot_ms"), ("ttft_pred_ms", "tpot_pred_ms")))


if __name__ == "__main__":
    datasets, cat, eng = Path(get_settings().datasets_dir), load_catalog(), bench_engine()
    (check if sys.argv[1:] == ["check"] else report)(datasets, cat, eng)
