"""The serving systems no file of ours measured (AIConfigurator's B200, GB200, B300, GB300 runs are withheld):
how many of their runs the silicon bench answers, why the rest are refused, and whether the answers keep
the physics (a Blackwell GPU no slower than an H200 where its peaks and bandwidth are higher).

    KERNELCAST_HOME=<a copy of a state folder> KERNELCAST_DATASETS_DIR=<datasets> PYTHONPATH=. \\
        python benchmarks/withheld_systems.py coverage [--per-group N] [--roofline] [--systems a,b]
    ... python benchmarks/withheld_systems.py physics [--roofline]

``coverage``: the measured H100/H200 silicon runs (``--per-group N``: N per engine x mode x GPU, seeded)
asked again on each withheld system and answered by the gate's path (``bench_coverage.coverage``); prints
runs answered per system and every refusal's reason grouped. ``physics``: TTFT / TPOT of a dense 8B, a 70B
at TP 4, DeepSeek-R1 and gpt-oss-120b on 8 GPUs (and DeepSeek-R1 at attention DP 16 / EP 16, a group
larger than an HGX board) per GPU and engine, as ``predict --llm`` answers them. Op times: the state
folder's op engine (the product's), or the fixed-efficiency roofline with ``--roofline``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "gb200_sxm", "b300_sxm", "gb300_sxm")
ENGINES = ("vllm", "sglang", "trtllm")
# (label, model, deployment fields): the sanity deployments (ISL 1024 / OSL 128 unless named)
DEPLOYMENTS: tuple[tuple[str, str, dict], ...] = (
    ("8B tp1 c8", "meta-llama/Meta-Llama-3.1-8B", {"tp": 1, "concurrency": 8}),
    ("70B tp4 c16", "meta-llama/Meta-Llama-3.1-70B", {"tp": 4, "concurrency": 16}),
    ("R1 tp8 ep8 c32", "deepseek-ai/DeepSeek-R1", {"tp": 8, "ep": 8, "concurrency": 32}),
    ("gpt-oss-120b tp8 c32", "openai/gpt-oss-120b", {"tp": 8, "concurrency": 32}),
    (
        "R1 1P1D tp8 ep8 c32",
        "deepseek-ai/DeepSeek-R1",
        {"tp": 8, "ep": 8, "concurrency": 32, "mode": "disagg"},
    ),
    ("R1 dp16 ep16 c4/rank", "deepseek-ai/DeepSeek-R1", {"tp": 1, "dp": 16, "ep": 16, "concurrency": 4}),
)


def _op_time(roofline: bool):
    from components.deployments.ops import production_op_time, roofline_op_time

    return roofline_op_time if roofline else production_op_time()[0]


def run_coverage(per_group: int | None, systems: list[str], roofline: bool) -> None:
    from components.deployments.bench_coverage import coverage
    from components.deployments.data import read_silicon_runs
    from components.devices import load_catalog
    from components.platform.config import get_settings

    datasets = Path(get_settings().datasets_dir)
    runs = read_silicon_runs(datasets)
    if per_group:
        groups = runs.groupby(["backend", "mode", "system"])
        runs = pd.concat([g.sample(min(len(g), per_group), random_state=0) for _, g in groups])
    started = time.process_time()
    cov = coverage(runs, systems, load_catalog(user_dir=None), datasets, _op_time(roofline), print)
    print(
        f"{len(runs)} measured runs asked on {len(systems)} systems; "
        f"{time.process_time() - started:.0f} CPU-s"
    )
    print(cov.counts().to_string())
    with pd.option_context("display.width", 250, "display.max_colwidth", 160):
        print(cov.reasons().to_string(index=False))
        by_engine = cov.answered.groupby(["system", "engine"]).size().unstack(fill_value=0)
        print(by_engine.to_string())


def _disaggregated(model: str, specs: list, params: dict, fn) -> list[dict]:
    """One prefill and one decode worker of the same parallelism (``predict --llm`` takes no worker fields
    and answers ``mode disagg`` as aggregated): simulated as the silicon bench simulates a disaggregated
    run (``serve.simulate_deployment`` with a decode worker), the engine's fitted constants, no floors."""
    from components.deployments.config import DeploymentError, model_shape
    from components.deployments.engines.registry import engine_for
    from components.deployments.serve import simulate_deployment
    from components.deployments.service import deployment_from
    from components.deployments.stepmodel import build_step_models

    shape = model_shape(model)
    out = []
    for spec in specs:
        d = deployment_from(shape, spec, params)
        engine = engine_for(d.framework, spec)
        try:
            pre, dec = build_step_models([d, d], fn)
            served = simulate_deployment(d, engine, pre, decode_worker=(d, dec))
        except (DeploymentError, ValueError) as exc:
            out.append({"refused": str(exc)})
            continue
        ttft, tpot = served.times_us(engine)
        out.append({"ttft_ms": ttft / 1e3, "tpot_ms": tpot / 1e3})
    return out


def run_physics(roofline: bool) -> None:
    from components.deployments.service import predict_deployment
    from components.devices import load_catalog

    catalog = load_catalog(user_dir=None)
    specs = [catalog.resolve(s) for s in SYSTEMS]
    fn = _op_time(roofline)
    rows = []
    started = time.process_time()
    for label, model, fields in DEPLOYMENTS:
        for engine in ENGINES:
            params = {"isl": 1024, "osl": 128, "framework": engine, **fields}
            try:
                disagg = params.get("mode") == "disagg"
                answers = (_disaggregated if disagg else predict_deployment)(model, specs, params, fn)
            except Exception as exc:  # a refusal is a row of the table
                rows.append(
                    {"deployment": label, "engine": engine, "gpu": "all", "answer": f"refused: {exc}"}
                )
                continue
            for system, answer in zip(SYSTEMS, answers, strict=True):
                if "refused" in answer:
                    text = f"refused: {answer['refused'][:60]}"
                else:
                    text = f"{answer['ttft_ms']:.0f} / {answer['tpot_ms']:.1f}"
                rows.append({"deployment": label, "engine": engine, "gpu": system, "answer": text})
    table = pd.DataFrame(rows).pivot_table(
        index=["deployment", "engine"], columns="gpu", values="answer", aggfunc="first"
    )
    print(f"TTFT ms / TPOT ms (ISL 1024, OSL 128); {time.process_time() - started:.0f} CPU-s")
    cols = [s for s in SYSTEMS if s in table.columns] + [c for c in table.columns if c not in SYSTEMS]
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(table[cols].to_string())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("coverage", "physics"))
    parser.add_argument("--per-group", type=int, default=None)
    parser.add_argument("--systems", default="b200_sxm,gb200_sxm,b300_sxm,gb300_sxm")
    parser.add_argument("--roofline", action="store_true")
    args = parser.parse_args()
    if args.what == "coverage":
        run_coverage(args.per_group, args.systems.split(","), args.roofline)
    else:
        run_physics(args.roofline)


if __name__ == "__main__":
    main()
