"""The train stage's program-model fit, both bases in one process (before) or the roofline basis in a spawned
process beside the predictor's (after, as ``training.stage`` runs it), on a trained state: wall, CPU of this
process and of the side process, and the files written, for ``cmp``/digests between the two runs.

Needs a state folder (``KERNELCAST_HOME``) holding a trained predictor, the feature table, the canonical
tables and the trace cache (a fresh clone's, copied). Usage, from the project root::

    PYTHONPATH=. python benchmarks/program_model_beside.py one  PREDICTOR_DIR OUT_DIR
    PYTHONPATH=. python benchmarks/program_model_beside.py side PREDICTOR_DIR OUT_DIR

Each run writes the models into ``OUT_DIR/programs`` (its own ``models_dir``) and ``OUT_DIR/predictor``
(a copy of PREDICTOR_DIR with its ``program_model.json`` refitted); compare the two OUT_DIRs file by file.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("one", "side"))
    parser.add_argument("predictor_dir", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    from types import SimpleNamespace

    from components.evaluation.harness import read_feature_table, split_folds
    from components.models import load_predictor
    from components.platform.config import get_settings
    from components.platform.runtime import configure_environment
    from components.programs.kernelbench_model import TIMING_SOURCES, fit_after_training
    from components.training.stage import _beside_in_turn, _roofline_side, pick_fold

    settings = get_settings()
    configure_environment(settings)
    predictor_dir = args.out / "predictor"
    shutil.copytree(args.predictor_dir, predictor_dir)
    (predictor_dir / "program_model.json").unlink(missing_ok=True)
    data = settings.data_dir
    table = read_feature_table(data / "features" / "features.parquet", data / "canonical")
    # what the fits read of the settings, with models/programs/<basis>.json under OUT_DIR
    settings = SimpleNamespace(data_dir=data, cache_dir=settings.cache_dir, models_dir=args.out)
    train = table.loc[pick_fold(split_folds(table, "unseen-kernel"), None).train]
    predictor = load_predictor(predictor_dir)
    wall, cpu = time.perf_counter(), time.process_time()
    if args.mode == "one":
        written = fit_after_training(predictor, train, settings, predictor_dir, print)
    else:
        kernelbench = train.loc[train["source"].isin(TIMING_SOURCES), ["source", "measurement_id"]]
        with _beside_in_turn((_roofline_side, kernelbench, settings)) as (roofline_job,):
            fitted = fit_after_training(predictor, train, settings, predictor_dir, print, roofline=False)
            main_cpu = time.process_time() - cpu
            roofline_paths, lines = roofline_job.result()
        print(*lines, sep="\n")
        print(f"this process's CPU until its basis was fitted: {main_cpu:.1f} s")
        written = [*roofline_paths, *fitted]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"{args.mode}: wall {time.perf_counter() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s here + "
        f"{children.ru_utime + children.ru_stime:.1f} s in the side process; written: "
        + ", ".join(str(p.relative_to(args.out)) for p in written)
    )


if __name__ == "__main__":
    main()
