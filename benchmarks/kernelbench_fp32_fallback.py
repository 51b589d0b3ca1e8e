"""KernelBench leave-one-GPU-out per level with both fallbacks of a program's FP32/FP64 GEMMs that no
measured kernel of the GPU is near (``engine_ops.FP32_FALLBACK``: "data" -- the engine's data tiers --
or "learned" -- the tabular champion, as an op question): one trace, per fold the program model's
train-side MAPE (what the choice reads) and the held-out GPU's MAPE, fitted and scored as
``components.evaluation.kernelbench_bench`` does (eager).

Usage (from the repository root, ``KERNELCAST_HOME`` set):
  PYTHONPATH=. python benchmarks/kernelbench_fp32_fallback.py MODEL [--levels 3,2,1] [--cache DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / true))


def main() -> None:
    from components.devices import load_catalog
    from components.evaluation.kernelbench_bench import MIN_HELD_OUT_ROWS, MIN_TRAIN_GPUS
    from components.ingest.kernelbench import ingest
    from components.programs import engine_ops
    from components.programs.kernelbench_data import load_kernelbench
    from components.programs.kernelbench_model import fit_program_model, program_table
    from components.serving.models import load_model

    root = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "kernelbench"
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", help="predictor folder or models:/ reference")
    parser.add_argument("--root", type=Path, default=root)
    parser.add_argument("--levels", default="3,2,1")
    parser.add_argument("--cache", type=Path, default=Path(".kernelcast") / "kbcache")
    ns = parser.parse_args()
    predictor = load_model(ns.model).predictor
    catalog = load_catalog()
    out = ingest(ns.root, catalog)
    kernels, measurements = out.kernels, out.measurements
    stands = engine_ops.engine_kinds(predictor)
    for level in ns.levels.split(","):
        chosen = (
            kernels["program"].astype(str).str.startswith(f"level{level}/") & kernels["source_text"].notna()
        )
        ids = sorted(set(kernels.loc[chosen, "kernel_id"]))
        data = load_kernelbench(measurements, kernels, ns.cache, kernel_ids=ids)
        for fallback in ("data", "learned"):
            engine_ops.FP32_FALLBACK = fallback
            rows = program_table(data, catalog, predictor)
            rows = rows[rows["config"] == "eager"]
            counts = rows.groupby("device_id").size()
            train_err, test_err = {}, {}
            for device in sorted(counts[counts >= MIN_HELD_OUT_ROWS].index):
                train = rows[rows["device_id"] != device]
                if int((train["device_id"].value_counts() >= MIN_HELD_OUT_ROWS).sum()) < MIN_TRAIN_GPUS:
                    continue
                model = fit_program_model(
                    train.assign(config="eager"), "roofline", min_rows=50, stands=stands
                )
                test = rows[rows["device_id"] == device]
                train_err[device] = _mape(model.predict(train), train["duration_us"].to_numpy("float64"))
                test_err[device] = _mape(model.predict(test), test["duration_us"].to_numpy("float64"))
            worst = max(test_err, key=test_err.get)
            print(
                f"level {level} fallback={fallback}: {len(rows)} rows; train-side MAPE median over folds "
                f"{100 * statistics.median(train_err.values()):.1f}%; held-out median GPU "
                f"{100 * statistics.median(test_err.values()):.1f}%, "
                f"worst {100 * test_err[worst]:.1f}% ({worst})",
                flush=True,
            )
            print("   held-out: " + ", ".join(f"{d} {100 * e:.1f}" for d, e in sorted(test_err.items())))


if __name__ == "__main__":
    main()
