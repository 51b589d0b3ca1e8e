"""The training-side choice behind a step-cost term (issue 35): an inner leave-one-model-out within each GPU
(fit on the GPU's other models, score the left-out one), with and without ``StepCost.per_layer_us``. Each
GPU's runs are fitted and scored among themselves only: no held-out GPU takes part.

    cd TREE && KERNELCAST_HOME=<state> KERNELCAST_DATASETS_DIR=... PYTHONPATH=. \\
        python benchmarks/silicon_inner_lomo.py simulate OUT.pkl   # every silicon run simulated once
    cd TREE && PYTHONPATH=. python benchmarks/silicon_inner_lomo.py score OUT.pkl
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import components.deployments.bench_engines as be
from components.common.metrics import mape

PER_LAYER = list(be.StepCost.__dataclass_fields__).index("per_layer_us")


def simulate(out: Path) -> None:
    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import op_sources
    from components.deployments.bench_silicon import silicon_deployments
    from components.deployments.data import read_silicon_runs
    from components.deployments.disagg_workers import with_derived_workers
    from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE
    from components.devices import load_catalog

    datasets = Path(os.environ["KERNELCAST_DATASETS_DIR"])
    sources = op_sources(bench_engine(), False)
    fn = sources.get(ENGINE_SOURCE, sources[ROOFLINE_SOURCE])
    runs = with_derived_workers(read_silicon_runs(datasets), load_catalog(), datasets, fn)
    sim = be.simulate_runs(runs, load_catalog(), datasets, fn, silicon_deployments, print)
    out.write_bytes(pickle.dumps(sim))


def inner_lomo_predictions(sim: be.Simulated) -> pd.DataFrame:
    """Every run's (TTFT, TPOT) predicted by the fit on its GPU's other models (its engine's constants),
    beside the measured: columns ttft_pred_us, tpot_pred_us on a copy of ``sim.runs``."""
    runs = sim.runs.copy()
    runs["ttft_pred_us"] = np.nan
    runs["tpot_pred_us"] = np.nan
    for dev in sorted(runs["device_id"].unique()):
        for model in sorted(runs.loc[runs["device_id"] == dev, "model_path"].unique()):
            train = ((runs["device_id"] == dev) & (runs["model_path"] != model)).to_numpy()
            for engine, (key, coef, _) in be.fit_engines(sim, train).items():
                test = (
                    (runs["device_id"] == dev) & (runs["model_path"] == model) & (runs["engine"] == engine)
                ).to_numpy()
                if test.any():
                    ttft, tpot = sim.predict(key, test, coef)
                    runs.loc[test, "ttft_pred_us"], runs.loc[test, "tpot_pred_us"] = ttft, tpot
    return runs


def inner_lomo(sim: be.Simulated, frame: pd.DataFrame | None = None) -> dict[str, tuple[float, float]]:
    """Per GPU: (TTFT, TPOT) MAPE of each model's runs predicted by the fit on the GPU's other models
    (``frame``: ``inner_lomo_predictions``' rows to score, default all of them)."""
    runs = inner_lomo_predictions(sim) if frame is None else frame
    out = {}
    for dev, mine in runs.dropna(subset=["ttft_pred_us"]).groupby("device_id"):
        out[str(dev)] = (
            mape(mine["ttft_us"].to_numpy(), mine["ttft_pred_us"].to_numpy()),
            mape(mine["tpot_us"].to_numpy(), mine["tpot_pred_us"].to_numpy()),
        )
    return out


def score(path: Path) -> None:
    sim = pickle.loads(path.read_bytes())
    full = list(be.COST_BOUNDS)
    without = [*full[:PER_LAYER], (0.0, 0.0), *full[PER_LAYER + 1 :]]
    for name, bounds in (("with per_layer_us", full), ("without", without)):
        be.COST_BOUNDS[:] = bounds
        for dev, (ttft, tpot) in inner_lomo(sim).items():
            print(f"{name:18s} {dev}: inner leave-one-model-out TTFT {ttft:.1%} TPOT {tpot:.1%}")
    be.COST_BOUNDS[:] = full


if __name__ == "__main__":
    {"simulate": simulate, "score": score}[sys.argv[1]](Path(sys.argv[2]))
