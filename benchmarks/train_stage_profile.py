"""The train stage (``train_stage`` as ``kernelcast train --family tabular --split unseen-kernel`` calls it),
profiled part by part: wall and CPU (``time.process_time``) around each of the stage's calls in its own
process, a cProfile (CPU clock) of that process, and one of each spawned side process (the op engine's fit;
the KernelBench traces then the roofline basis), each written to ``PROF_DIR/<part>.prof``
(docs/pipeline-time.md)::

    KERNELCAST_HOME=<a copy of data/features + data/canonical> PYTHONPATH=. nice -n 10 \\
        python benchmarks/train_stage_profile.py FEATURES OUT_DIR PROF_DIR

``PROF_DIR/parts.json`` holds the per-part figures; ``python -m pstats PROF_DIR/stage.prof`` reads a profile.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTS: dict[str, dict[str, float]] = {}
STARTED = time.perf_counter()


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            PARTS[name] = {
                "start_s": round(wall - STARTED, 1),
                "wall_s": round(time.perf_counter() - wall, 1),
                "cpu_s": round(time.process_time() - cpu, 1),
            }
            print(f"[profile] {name}: {PARTS[name]}", flush=True)

    return run


def _profiled_side(name: str, function_path: str, prof_dir: str, *args: Any) -> Any:
    """``function_path(*args)`` under cProfile (CPU clock) in the side process; its figures printed."""
    import importlib

    module, attr = function_path.rsplit(".", 1)
    function = getattr(importlib.import_module(module), attr)
    profile = cProfile.Profile(time.process_time)
    wall, cpu = time.perf_counter(), time.process_time()
    profile.enable()
    try:
        return function(*args)
    finally:
        profile.disable()
        profile.dump_stats(str(Path(prof_dir) / f"{name}.prof"))
        figures = {
            "wall_s": round(time.perf_counter() - wall, 1),
            "cpu_s": round(time.process_time() - cpu, 1),
        }
        (Path(prof_dir) / f"{name}.json").write_text(json.dumps(figures))
        print(f"[profile] side {name}: {figures}", flush=True)


def _side(name: str, prof_dir: str, original: str) -> Callable[..., Any]:
    import functools

    return functools.partial(_profiled_side, name, original, prof_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("features", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("prof_dir", type=Path)
    args = parser.parse_args()
    args.prof_dir.mkdir(parents=True, exist_ok=True)
    prof = str(args.prof_dir)

    from kernelcast.commands._common import prepared_settings

    settings = prepared_settings()
    import components.evaluation.harness as harness
    import components.evaluation.plots as plots
    import components.programs.kernelbench_model as kbm
    import components.registry.runs as runs
    import components.training.stage as stage
    import components.training.tabular as tabular
    from components.platform.config import load_params

    stage._fit_engine = _side("engine", prof, "components.training.stage._fit_engine")
    stage._trace_side = _side("traces", prof, "components.training.stage._trace_side")
    stage._roofline_side = _side("roofline", prof, "components.training.stage._roofline_side")
    harness.read_feature_table = _timed("read features", harness.read_feature_table)
    tabular.make_predictor = _timed("tabular fit", tabular.make_predictor)
    harness.evaluate_predictor = _timed("test side scoring", harness.evaluate_predictor)
    kbm.fit_after_training = _timed("program model (predictor basis)", kbm.fit_after_training)
    plots.write_plots = _timed("plots", plots.write_plots)
    runs.log_training_run = _timed("log training run", runs.log_training_run)
    stage._finish_engine = _timed("wait for the op engine", stage._finish_engine)

    inputs = stage.TrainInputs(features_file=args.features, out_dir=args.out)
    profile = cProfile.Profile(time.process_time)
    wall, cpu = time.perf_counter(), time.process_time()
    profile.enable()
    stage.train_stage(inputs, settings, load_params(settings.params_file), progress=print)
    profile.disable()
    profile.dump_stats(str(args.prof_dir / "stage.prof"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    PARTS["stage"] = {
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
    }
    PARTS["children (reaped)"] = {"cpu_s": round(children.ru_utime + children.ru_stime, 1)}
    (args.prof_dir / "parts.json").write_text(json.dumps(PARTS, indent=1))
    print(json.dumps(PARTS, indent=1))


if __name__ == "__main__":
    main()
