"""KernelBench leave-one-GPU-out on one level's problems only (eager), beside the sum-of-ops roofline.

A subset of ``kernelcast bench`` (components.evaluation.kernelbench_bench) small enough for a shared
box: only the chosen level's modules are traced, and each held-out GPU's program model is fitted on
that level's rows of the other GPUs.

Usage (from the repository root):
  KERNELCAST_HOME=.kernelcast python benchmarks/kernelbench_level.py --level 3 [--cache DIR] [--csv FILE]
      [--model DIR]   (a trained predictor folder: the program model in its basis -- the op engine's
                       answers for GEMM/bmm/attention, as module answers use -- instead of the roofline's)
      [--profiled DIR] (add the KernelBench problems kernelcast timed itself, e.g. profiled-data: the H200's
                       runs, as one more GPU; components.ingest.kernelbench_profiled, as the train stage)
      [--mass N]      (also rank the level's error mass by GPU, by term -- op GPU time vs time between the
                       ops --, by module class (and class x GPU) and by program, the top N programs;
                       components.evaluation.kernelbench_mass)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from components.devices import load_catalog
    from components.evaluation.kernelbench_bench import run_kernelbench_bench
    from components.ingest.kernelbench import ingest

    parser = argparse.ArgumentParser(description=__doc__)
    root = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "kernelbench"
    parser.add_argument("--root", type=Path, default=root)
    parser.add_argument("--level", default="3")
    parser.add_argument("--cache", type=Path, default=Path(".kernelcast") / "kbcache")
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--model", default=None, help="predictor folder or models:/ reference")
    parser.add_argument("--profiled", type=Path, default=None, help="profiled run folders to add")
    parser.add_argument("--mass", type=int, default=0, help="rank the error mass; show the top N programs")
    ns = parser.parse_args()
    predictor = None
    if ns.model:
        from components.serving.models import load_model

        predictor = load_model(ns.model).predictor
    out = ingest(ns.root, load_catalog())
    kernels = out.kernels
    measurements = out.measurements
    if ns.profiled is not None:
        import pandas as pd

        from components.ingest.profiled import kernelbench_runs

        profiled = kernelbench_runs(ns.profiled, load_catalog())
        print(f"profiled: {len(profiled)} KernelBench timings on {sorted(profiled['device_id'].unique())}")
        measurements = pd.concat([measurements, profiled], ignore_index=True)
    chosen = (
        kernels["program"].astype(str).str.startswith(f"level{ns.level}/") & kernels["source_text"].notna()
    )
    bench = run_kernelbench_bench(
        measurements,
        kernels,
        ns.cache,
        configs=["eager"],
        kernel_ids=sorted(set(kernels.loc[chosen, "kernel_id"])),
        op_predictor=predictor,
    )
    for row in bench.rows:
        if row["metric"] == "mape":
            print(row["family"], row["scope"], row["ours"], row["n"], row["n_asked"])
    print("\n".join(bench.notes))
    if ns.mass and bench.predictions is not None:
        from components.evaluation.kernelbench_mass import error_mass, mass_lines, scored_rows

        names = kernels.drop_duplicates("kernel_id").set_index("kernel_id")["name"]  # problem + its tree
        rows = scored_rows(bench.predictions, ns.level, names.astype(str))
        print("\n".join(mass_lines(error_mass(rows), top=ns.mass)))
    if ns.csv is not None and bench.predictions is not None:
        from components.common.atomic import atomic_write_text

        atomic_write_text(ns.csv, bench.predictions.to_csv(index=False))


if __name__ == "__main__":
    main()
