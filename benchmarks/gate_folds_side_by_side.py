"""The gate's leave-one-GPU-out folds as Ray tasks side by side, against a gate report computed before.

``kernelcast evaluate --gate`` refits the candidate's config on each held-out GPU's train side; this runs the
``unseen-gpu`` entry as the stage does (``report.evaluate_split``, the ``register.evaluation`` caps of
params.yaml) with the folds as Ray tasks (``folds.ray_fold_executor``) or one after the other, and checks that
its metrics and report equal those of a gate report written before (e.g. a fresh clone's, folds in turn).
Prints wall time and the CPU of this process and of the Ray workers it waited for. Usage (from the project
root, ``KERNELCAST_HOME`` holding the feature table and canonical tables the report was computed on)::

    python benchmarks/gate_folds_side_by_side.py PREDICTOR_DIR GATE_JSON [--serial]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from functools import partial
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictor_dir", type=Path)
    parser.add_argument("gate_json", type=Path)
    parser.add_argument("--serial", action="store_true", help="the folds one after the other, in-process")
    parser.add_argument("--split", default="unseen-gpu")
    args = parser.parse_args()
    from components.evaluation.folds import ray_fold_executor
    from components.evaluation.harness import read_feature_table
    from components.evaluation.report import evaluate_split
    from components.platform.config import get_settings, load_params
    from components.platform.runtime import ensure_ray
    from components.registry.gate import read_policy
    from components.registry.loading import load_any_predictor

    settings = get_settings()
    policy = read_policy(load_params(settings.params_file))
    canonical = settings.data_dir / "canonical"
    table = read_feature_table(settings.data_dir / "features" / "features.parquet", canonical)
    predictor = load_any_predictor(str(args.predictor_dir))
    executor = None if args.serial else partial(ray_fold_executor, start_ray=lambda: ensure_ray(settings))
    started, cpu = time.perf_counter(), time.process_time()
    entry = evaluate_split(
        predictor,
        table,
        args.split,
        mode="refit",
        caps=policy.evaluation,
        model=json.loads((args.predictor_dir / "registration.json").read_text())["predictor_dir"],
        canonical_dir=canonical,
        executor_factory=executor,
    )
    wall, own = time.perf_counter() - started, time.process_time() - cpu
    before = json.loads(args.gate_json.read_text())["splits"][args.split]
    same = {key: entry[key] == before[key] for key in ("metrics", "report", "n", "folds")}
    print(
        json.dumps(
            {
                "split": args.split,
                "ray": not args.serial,
                "wall_s": round(wall, 1),
                "cpu_this_process_s": round(own, 1),
                "cpu_children_s": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime, 1),
                "fold_seconds": [t.get("total_s") for t in entry["timings"]],
                "same_as_before": same,
            },
            indent=1,
        )
    )
    if not all(same.values()):
        raise SystemExit(f"{args.split}: differs from {args.gate_json}")


if __name__ == "__main__":
    main()
