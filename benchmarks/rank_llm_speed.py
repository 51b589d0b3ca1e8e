"""Time a whole-catalog ``rank --llm`` over the serving engines, and dump its answers to compare two trees.

    cd TREE && PYTHONPATH=. python benchmarks/rank_llm_speed.py time            # stage times, CPU and wall
    cd TREE && PYTHONPATH=. python benchmarks/rank_llm_speed.py dump /tmp/x.json  # every ranked row
    python benchmarks/rank_llm_speed.py compare /tmp/old.json /tmp/new.json     # relative differences

The op engine is the state folder's (``$KERNELCAST_HOME``: ``ops.production_op_time``), as the CLI's.
``time`` reports the process's engine load, the first ranking (which also loads each serving engine's own
kernel tables) and a second ranking (what a server or notebook that keeps the engine answers in), each
with the stages inside it (step-model grids, phase composition, simulations). ``dump`` ranks a few
questions (a dense 70B and 8B, a MoE, long and short prompts, batch and steady) over ``--framework all``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUESTIONS: list[tuple[str, dict[str, Any]]] = [
    ("Llama-3.1-70B", {"isl": 2048, "osl": 256, "concurrency": 32}),
    ("Llama-3.1-70B", {"isl": 8192, "osl": 256, "concurrency": 8, "dtype": "fp8"}),
    ("Llama-3.1-8B", {"isl": 1024, "osl": 512, "concurrency": 16, "workload": "batch"}),
    ("Qwen/Qwen3-30B-A3B", {"isl": 4096, "osl": 128, "concurrency": 16}),
]


class _Clock:
    """CPU and wall seconds spent inside wrapped functions (outermost calls only)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.depth: dict[str, int] = defaultdict(int)

    def wrap(self, module: Any, name: str) -> None:
        fn: Callable[..., Any] = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth[name] += 1
            c, w = time.process_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth[name] -= 1
                if not self.depth[name]:
                    self.cpu[name] += time.process_time() - c
                    self.wall[name] += time.perf_counter() - w

        setattr(module, name, timed)

    def report(self, title: str) -> None:
        parts = ", ".join(f"{k} {self.cpu[k]:.2f} CPU-s / {self.wall[k]:.2f} s" for k in self.cpu)
        print(f"  {title}: {parts}")
        self.cpu.clear()
        self.wall.clear()


def _rank(model: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    from components.deployments.service import rank_deployments
    from components.serving.rank import resolve_devices

    specs = resolve_devices("all", "--device", allow_files=False)
    return rank_deployments(model, specs, {"framework": "all", **params}, {}, by="tpot")


def _time() -> None:
    import os

    from components.deployments import answer
    from components.deployments.ops import production_op_time

    clock = _Clock()
    clock.wrap(answer, "build_step_models")
    clock.wrap(answer, "_phases_once")
    clock.wrap(answer, "simulate_deployment")
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared)")
    c, w = time.process_time(), time.perf_counter()
    production_op_time()
    print(f"op engine load: {time.process_time() - c:.2f} CPU-s, {time.perf_counter() - w:.2f} s wall")
    model, params = QUESTIONS[0]
    for label in ("first ranking", "second ranking"):
        c, w = time.process_time(), time.perf_counter()
        ranking, skipped = _rank(model, params)
        print(
            f"{label} ({model}, {len(ranking)} options fit, {skipped} not): "
            f"{time.process_time() - c:.2f} CPU-s, {time.perf_counter() - w:.2f} s wall"
        )
        clock.report("inside")


def _dump(out: Path) -> None:
    rows = {}
    for model, params in QUESTIONS:
        ranking, skipped = _rank(model, params)
        key = f"{model} {json.dumps(params, sort_keys=True)}"
        rows[key] = {"skipped": skipped, "ranking": ranking}
    out.write_text(json.dumps(rows, indent=1, sort_keys=True))
    print(f"{sum(len(v['ranking']) for v in rows.values())} rows -> {out}")


def _compare(old: Path, new: Path) -> int:
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    worst, differ = 0.0, 0
    for key in a:
        ra = {(r["device"], r["engine"], r["tp"]): r for r in a[key]["ranking"]}
        rb = {(r["device"], r["engine"], r["tp"]): r for r in b.get(key, {"ranking": []})["ranking"]}
        if set(ra) != set(rb) or a[key]["skipped"] != b[key]["skipped"]:
            print(f"{key}: options differ ({len(ra)} vs {len(rb)})")
            differ += 1
        for option in set(ra) & set(rb):
            for field in ("ttft_ms", "tpot_ms", "e2e_ms", "tokens_per_s_per_gpu", "memory_gb_per_gpu"):
                x, y = ra[option][field], rb[option][field]
                rel = abs(x - y) / max(abs(x), 1e-12)
                worst = max(worst, rel)
                if rel > 1e-9:
                    differ += 1
                    if differ <= 20:
                        print(f"{key} {option} {field}: {x} -> {y} ({rel:.2e})")
    print(f"{differ} differences; largest relative difference {worst:.3e}")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("time", "dump", "compare"))
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args()
    if args.what == "time":
        _time()
        return 0
    if args.what == "dump":
        _dump(args.paths[0])
        return 0
    return _compare(args.paths[0], args.paths[1])


if __name__ == "__main__":
    sys.exit(main())
