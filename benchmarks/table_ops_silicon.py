"""The ``llm-serving-silicon`` runs of the models whose mixer is timed from AIConfigurator's tables -- the
hybrid Gated DeltaNet models (Qwen3.5: ``gdn``), the DSA sparse-attention ones (GLM-5: ``dsa``) -- under
the simulated engines: TTFT / TPOT MAPE on the held-out GPU with the op from the measured tables, and with
those tables withheld (the roofline fallback every GPU without a table gets).

    cd TREE && KERNELCAST_HOME=... PYTHONPATH=. python benchmarks/table_ops_silicon.py {gdn|dsa} [roofline]

Needs the op engine in ``$KERNELCAST_HOME``. Prints one line per engine and GPU of the family's runs, and
all runs' line (the other models must not move between the two variants).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from components.common.metrics import mape
from components.deployments import dsa_tables, gdn_tables
from components.deployments.bench import bench_engine
from components.deployments.bench_common import op_sources
from components.deployments.bench_engines import leave_one_gpu_out, simulate_runs
from components.deployments.bench_silicon import silicon_deployments
from components.deployments.data import read_silicon_runs
from components.deployments.ops import ENGINE_SOURCE
from components.devices import load_catalog
from components.platform.config import get_settings


def _line(tag: str, g: pd.DataFrame) -> str:
    ttft = mape(g["ttft_us"].to_numpy(), g["ttft_pred_us"].to_numpy())
    tpot = mape(g["tpot_us"].to_numpy(), g["tpot_pred_us"].to_numpy())
    ratio = (g["ttft_pred_us"] / g["ttft_us"]).median(), (g["tpot_pred_us"] / g["tpot_us"]).median()
    median = f"(median pred/true {ratio[0]:.2f} / {ratio[1]:.2f})"
    return f"{tag:34s} n={len(g):4d} TTFT {ttft:6.1%} TPOT {tpot:6.1%} {median}"


MODELS = {"gdn": "Qwen3.5", "dsa": "GLM-5"}  # the silicon runs' models of each family


def main(family: str, roofline: bool) -> None:
    if roofline:  # the path of a GPU without a table
        gdn_tables.gdn_table = lambda *args: None  # type: ignore[assignment]
        dsa_tables.dsa_tables = lambda *args: []  # type: ignore[assignment]
    ds, catalog = Path(get_settings().datasets_dir), load_catalog()
    fn = op_sources(bench_engine(), False)[ENGINE_SOURCE]
    runs = read_silicon_runs(ds)
    frame, _ = leave_one_gpu_out(simulate_runs(runs, catalog, ds, fn, silicon_deployments))
    model = MODELS[family]
    print(f"{family} op: {'roofline (tables withheld)' if roofline else f'measured {family} tables'}")
    print(_line("all runs", frame))
    ours = frame[frame["model_path"].str.contains(model)] if "model_path" in frame else frame.iloc[:0]
    print(_line(f"{model} runs", ours))
    for key, g in ours.groupby(["engine", "device_id"]):
        print(_line(f"{model} {'/'.join(key)}", g))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gdn", "roofline" in sys.argv[2:])
