"""The serving simulator against a reference version of itself on the silicon bench's real workloads.

Every ``simulate`` call the ``llm-serving-silicon`` bench makes (``bench_engines.simulate_runs`` over
AIConfigurator's runs, after ``with_derived_workers``: the same deployments, engines, settings candidates
and KV capacities the gate simulates) is captured once, then replayed through the working tree's simulator
and through a reference one (``simulate.py`` and ``stepmodel.py`` as a git ref has them, loaded beside
the working tree's), every output array of every call compared and each side's CPU time summed.

Usage (from the worktree root, ``KERNELCAST_HOME`` / ``KERNELCAST_DATASETS_DIR`` set):
  python benchmarks/sim_equivalence.py capture OUT.pkl [--source engine|roofline] [--every N]
  python benchmarks/sim_equivalence.py compare OUT.pkl [--ref main] [--rel 1e-9] [--every N]

``--source engine``: the state folder's op engine (what the gate uses), else the roofline; ``--every N``:
every N-th run only. ``compare`` exits 1 when any output differs by more than ``--rel`` (relative).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARRAYS = ("arrival_us", "arrival_extra_us", "first_us", "finish_us", "f_arrival", "f_first", "f_finish")
SCALARS = ("osl", "steps", "decode_batch", "kv_capacity_tokens", "preemptions")


def capture(out: Path, source: str, every: int) -> None:
    from components.deployments import serve
    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import op_sources
    from components.deployments.bench_engines import simulate_runs
    from components.deployments.bench_silicon import silicon_deployments
    from components.deployments.data import read_silicon_runs
    from components.deployments.disagg_workers import with_derived_workers
    from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE
    from components.devices import load_catalog
    from components.platform.config import DEFAULT_DATASETS_DIR

    datasets = Path(os.environ.get("KERNELCAST_DATASETS_DIR", DEFAULT_DATASETS_DIR))
    runs = read_silicon_runs(datasets)
    sources = op_sources(bench_engine(), False) if source == "engine" else {}
    fn = sources.get(ENGINE_SOURCE) if source == "engine" else None
    if source == "engine" and fn is None:
        raise SystemExit("--source engine: the state folder has no op engine with data")
    from components.deployments.ops import roofline_op_time

    fn = fn or roofline_op_time
    assert ROOFLINE_SOURCE  # the gate's fallback when the state has no engine
    catalog = load_catalog()
    runs = with_derived_workers(runs, catalog, datasets, fn).iloc[::every]
    calls: list[tuple[Any, ...]] = []
    real = serve.simulate

    def recording(step: Any, engine: Any, kv: float, workload: Any, memo: Any = None) -> Any:
        calls.append((step, engine, kv, workload))  # every call, those the bench's memo answers too
        return (
            real(step, engine, kv, workload, memo) if memo is not None else real(step, engine, kv, workload)
        )

    serve.simulate = recording
    try:
        simulate_runs(runs, catalog, datasets, fn, silicon_deployments, print)
    finally:
        serve.simulate = real
    with out.open("wb") as handle:
        pickle.dump(calls, handle, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"captured {len(calls)} simulations of {len(runs)} runs ({source} op times) in {out}")


def _module_at(ref: str, path: str, name: str) -> ModuleType:
    text = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module  # dataclasses resolve their module's globals through sys.modules
    exec(compile(text, f"{ref}:{path}", "exec"), module.__dict__)
    return module


def _as(cls: type, step: Any) -> Any:
    return cls(**{f.name: getattr(step, f.name) for f in fields(step)})


def _timed(fn: Any, calls: list[tuple[Any, ...]], cls: type) -> tuple[list[Any], float]:
    steps = {id(c[0]): _as(cls, c[0]) for c in calls}  # fresh memos, each side its own StepModel class
    outs = []
    start = time.process_time()
    for step, engine, kv, workload in calls:
        try:
            outs.append(fn(steps[id(step)], engine, kv, workload))
        except ValueError as exc:
            outs.append(f"{type(exc).__name__}: {exc}")
    return outs, time.process_time() - start


def _differs(a: Any, b: Any, rel: float) -> str | None:
    if isinstance(a, str) or isinstance(b, str):
        return None if a == b else f"{a!r} vs {b!r}"
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        if x.shape != y.shape:
            return f"{name}: shape {x.shape} vs {y.shape}"
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        close = np.abs(x - y) <= rel * np.maximum(np.abs(x), np.abs(y))
        if not (same | close).all():
            worst = float(np.nanmax(np.abs(x - y) / np.maximum(np.abs(x), 1e-300)))
            return f"{name}: {int((~(same | close)).sum())} values differ (worst relative {worst:.3g})"
    for name in SCALARS:
        x, y = getattr(a, name), getattr(b, name)
        if not (x == y or abs(x - y) <= rel * max(abs(x), abs(y))):
            return f"{name}: {x} vs {y}"
    return None if a.notes == b.notes else f"notes {a.notes} vs {b.notes}"


def compare(path: Path, ref: str, rel: float, every: int = 1) -> int:
    from components.deployments import simulate as new_sim
    from components.deployments import stepmodel as new_step

    old_step = _module_at(ref, "components/deployments/stepmodel.py", "_ref_stepmodel")
    old_sim = _module_at(ref, "components/deployments/simulate.py", "_ref_simulate")
    old_sim.StepModel = old_step.StepModel
    with path.open("rb") as handle:
        calls = pickle.load(handle)[::every]
    old, t_old = _timed(old_sim.simulate, calls, old_step.StepModel)
    new, t_new = _timed(new_sim.simulate, calls, new_step.StepModel)
    bad = 0
    exact = 0
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        why = _differs(a, b, rel)
        if why:
            bad += 1
            if bad <= 10:
                print(f"call {i} ({calls[i][3]}): {why}")
        elif isinstance(a, str) or all(np.array_equal(getattr(a, n), getattr(b, n), True) for n in ARRAYS):
            exact += 1
    print(
        f"{len(calls)} simulations: {len(calls) - bad} equal within {rel:g} ({exact} bit-identical), "
        f"{bad} differ; CPU {ref} {t_old:.2f} s, working tree {t_new:.2f} s ({t_old / max(t_new, 1e-9):.2f}x)"
    )
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("out", type=Path)
    cap.add_argument("--source", choices=("engine", "roofline"), default="engine")
    cap.add_argument("--every", type=int, default=1)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("path", type=Path)
    cmp_.add_argument("--ref", default="main")
    cmp_.add_argument("--rel", type=float, default=1e-9)
    cmp_.add_argument("--every", type=int, default=1)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.out, args.source, args.every)
        return 0
    return compare(args.path, args.ref, args.rel, args.every)


if __name__ == "__main__":
    raise SystemExit(main())
