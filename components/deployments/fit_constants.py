"""Refit the data in ``engines/constants.json`` (never generated code).

    python -m components.deployments.fit_constants --engines     # per-engine step cost + memory fraction
    python -m components.deployments.fit_constants --framework   # the offline-batch framework cost
    python -m components.deployments.fit_constants --limits      # the GPUs' reachable rates alone

``--engines``: every AIConfigurator silicon run simulated on the op engine of the state folder (measured
tier where measured), each engine's constants fitted on all its runs of both GPUs; the provenance records
the same procedure's leave-one-GPU-out error, the date and the commit. ``--framework``: the PipeWeave /
silicon framework cost (``bench.fit_production``) and the GPUs' reachable rates; ``--limits``: those rates
alone (``framework.gpu_limits``: what every deployment's op times are bounded by, ``op_limits``). Bench
folds never read this file: each refits on its own training side.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from components.deployments.engines.base import CONSTANTS_FILE, _read_constants
from components.deployments.op_limits import LIMITS_KEY


def _datasets() -> Path:
    from components.platform.config import DEFAULT_DATASETS_DIR

    return Path(os.environ.get("KERNELCAST_DATASETS_DIR", DEFAULT_DATASETS_DIR))


def fit_engines(datasets: Path, log: Any = print) -> dict[str, Any]:
    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import op_sources
    from components.deployments.bench_engines import production_constants, simulate_runs
    from components.deployments.bench_silicon import silicon_deployments
    from components.deployments.data import read_silicon_runs
    from components.deployments.ops import ENGINE_SOURCE
    from components.devices import load_catalog

    fn = op_sources(bench_engine(), False)[ENGINE_SOURCE]
    # Fitted on the runs whose worker counts were recorded: a constant is learned from what was measured,
    # not from our own derivation of the disaggregated runs' workers (those runs are refused here, as the
    # steady fit of bench_silicon leaves them out of its training side).
    runs = read_silicon_runs(datasets)
    sim = simulate_runs(runs, load_catalog(), datasets, fn, silicon_deployments, log)
    return production_constants(sim)


def fit_framework(datasets: Path) -> dict[str, Any]:
    from components.deployments.bench import bench_engine, fit_production
    from components.devices import load_catalog

    catalog = load_catalog()
    chosen, roofline = fit_production(datasets, catalog, bench_engine())

    def plain(fw: Any) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(fw).items()}

    return {"engine": plain(chosen), "roofline": plain(roofline), LIMITS_KEY: fit_gpu_limits(datasets)}


def fit_gpu_limits(datasets: Path) -> dict[str, Any]:
    """The reachable rates (``physics.limits``) learned on every PipeWeave run, as the bench's folds learn
    them on their training GPUs (the speed-of-light parts they read do not depend on the op source)."""
    from components.deployments.bench_pipeweave import compose_pipeweave, fit_limits
    from components.deployments.data import read_pipeweave_runs
    from components.devices import load_catalog

    runs = read_pipeweave_runs(datasets)
    return fit_limits(compose_pipeweave(runs, load_catalog(), datasets)).to_json()


def main(argv: list[str]) -> None:
    from components.deployments.bench_engines import write_constants

    if argv not in (["--engines"], ["--framework"], ["--limits"]):
        raise SystemExit(
            "usage: python -m components.deployments.fit_constants --engines | --framework | --limits"
        )
    current = dict(_read_constants(str(CONSTANTS_FILE)))
    engines, framework = current.get("engines", {}), current.get("framework", {})
    if argv == ["--engines"]:
        engines = fit_engines(_datasets())
    elif argv == ["--limits"]:
        framework = {**framework, LIMITS_KEY: fit_gpu_limits(_datasets())}
    else:
        framework = {**framework, **fit_framework(_datasets())}
    write_constants(CONSTANTS_FILE, engines, framework)
    print(f"wrote {CONSTANTS_FILE}")


if __name__ == "__main__":
    main(sys.argv[1:])
