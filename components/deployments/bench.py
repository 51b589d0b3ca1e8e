"""Deployment benchmark: the composition scored on measured serving runs, one GPU held out at a time.

Splits:
- ``llm-serving-pipeweave``: PipeWeave's offline runs (11 GPUs, TP 1-8). For each held-out GPU the
  framework cost is fitted on the OTHER GPUs' runs; MAPE of prefill, decode step and total per GPU and
  per TP, beside PipeWeave's, NeuSight's, Habitat's and the roofline's published rows and beside our own
  roofline composition (sum of speed-of-light op times, no framework cost).
- ``llm-serving-silicon``: AIConfigurator's steady-serving runs on H100 and H200, each held out of a
  fit on the other; TTFT and TPOT MAPE per model, precision, mode and engine of what ``predict --llm``
  answers (each run's serving engine simulated, ``bench_engines``), the steady composition beside it;
  every run answered or its reason counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from components.deployments.bench_common import (
    FAMILY,
    SPLIT_PIPEWEAVE,
    SPLIT_SILICON,
    SPLITS,
    UNSEEN,
    ServingBench,
    _combine,
    choose_source,
    op_sources,
)
from components.deployments.bench_pipeweave import (
    compose_pipeweave,
    fit_pipeweave,
    predict_pipeweave,
    run_pipeweave_bench,
)
from components.deployments.bench_silicon import (
    SI_TARGETS,
    compose_silicon,
    fit_steady,
    predict_steady,
    run_silicon_bench,
)
from components.deployments.data import (
    read_pipeweave_runs,
    read_silicon_runs,
)
from components.deployments.framework_cost import FrameworkCost
from components.deployments.ops import (
    ROOFLINE_SOURCE,
    has_data,
)


def bench_engine(predictor: Any = None) -> Any:
    """The op engine of ``predictor`` (or the state folder's), None when there is none to load."""
    from components.opmodel.loading import engine_for

    try:
        return engine_for(predictor)
    except (OSError, ValueError) as exc:  # a broken engine folder: the bench says so and uses the roofline
        return _Broken(str(exc))


class _Broken:
    measured = spec_model = None

    def __init__(self, why: str) -> None:
        self.why = why


def fit_framework(
    pipeweave: dict[str, pd.DataFrame], silicon: dict[str, pd.DataFrame], sources: dict[str, str]
) -> FrameworkCost:
    """A framework cost whose parts are each fitted on their source's op times (``sources``: part ->
    roofline | engine, for prefill, decode, steady_ttft, steady_tpot)."""
    pre = fit_pipeweave(pipeweave[sources["prefill"]])
    dec = fit_pipeweave(pipeweave[sources["decode"]])
    ttft = fit_steady(silicon[sources["steady_ttft"]])
    tpot = fit_steady(silicon[sources["steady_tpot"]])
    return FrameworkCost(
        prefill=pre.prefill,
        decode=dec.decode,
        steady_ttft=ttft.steady_ttft,
        steady_tpot=tpot.steady_tpot,
        steady_source=ttft.steady_source,
        source=pre.source,
        train_mape={
            "prefill": pre.train_mape["prefill"],
            "decode": dec.train_mape["decode"],
            "steady_ttft": ttft.train_mape["steady_ttft"],
            "steady_tpot": tpot.train_mape["steady_tpot"],
        },
        sources=dict(sources),
    )


def fit_production(
    datasets_dir: Path, catalog: Any, engine: Any = None
) -> tuple[FrameworkCost, FrameworkCost]:
    """(the production framework cost on the op sources chosen by inner cross-validation -- leave one
    PipeWeave GPU out, leave one silicon model out -- and the one on the roofline alone, for a state
    folder without an engine)."""
    sources = {k: fn for k, fn in op_sources(engine).items() if k != UNSEEN}
    runs = read_pipeweave_runs(datasets_dir)
    pw = {k: compose_pipeweave(runs, catalog, datasets_dir, fn) for k, fn in sources.items()}
    si_runs = read_silicon_runs(datasets_dir)
    si = {k: compose_silicon(si_runs, catalog, datasets_dir, fn)[0] for k, fn in sources.items()}
    pw_choice = choose_source(
        pw, "gpu", fit_pipeweave, predict_pipeweave, {"prefill": "prefill_ms", "decode": "decode_ms"}
    )
    si_choice = choose_source(
        si, "model_path", fit_steady, predict_steady, {t: f"silicon_{t}_ms" for t in SI_TARGETS}
    )
    chosen = {**pw_choice, "steady_ttft": si_choice["ttft"], "steady_tpot": si_choice["tpot"]}
    roofline = dict.fromkeys(("prefill", "decode", "steady_ttft", "steady_tpot"), ROOFLINE_SOURCE)
    return fit_framework(pw, si, chosen), fit_framework(pw, si, roofline)


def predict_frames(kind: str, frames: dict[str, pd.DataFrame], fw: FrameworkCost) -> pd.DataFrame:
    """Predictions of composed runs (``kind``: pipeweave | silicon) with each part on its own source's
    frame (frames aligned on the same runs)."""
    if kind == "pipeweave":
        held = {s: predict_pipeweave(f, fw) for s, f in frames.items()}
        choice = {"prefill": fw.source_of("prefill"), "decode": fw.source_of("decode")}
        return _combine(held, choice, osl=True)
    held = {s: predict_steady(f, fw) for s, f in frames.items()}
    choice = {"ttft": fw.source_of("steady_ttft"), "tpot": fw.source_of("steady_tpot")}
    return _combine(held, choice, osl=False)


def extend_result(
    result: Any,
    splits: Sequence[str],
    datasets_dir: Path,
    catalog: Any,
    *,
    log: Callable[[str], None] = lambda _: None,
    engine: Any = None,
) -> list[ServingBench]:
    """Run the asked serving splits; append their rows and notes to ``result`` (a ``bench.BenchResult``).
    ``engine``: the op engine to compose with (default: the state folder's, ``opmodel.loading``)."""
    engine = bench_engine() if engine is None else engine
    if not has_data(engine):
        result.notes.append(
            "serving splits: no op engine with data in the state folder: roofline op times only"
        )
    benches = []
    for split in splits:
        runner = {SPLIT_PIPEWEAVE: run_pipeweave_bench, SPLIT_SILICON: run_silicon_bench}[split]
        try:
            bench = runner(Path(datasets_dir), catalog, log=log, engine=engine)
        except (OSError, KeyError, ValueError) as exc:  # the datasets lack this source: say so, go on
            result.notes.append(f"{split}: skipped ({exc})")
            continue
        result.rows += bench.rows
        result.notes += bench.notes
        benches.append(bench)
    return benches


GATE_METRICS = {
    SPLIT_PIPEWEAVE: ("prefill_ms", "decode_ms", "total_ms"),
    SPLIT_SILICON: ("ttft_ms", "tpot_ms"),
}


def gate_entry(split: str, datasets_dir: Path, catalog: Any, engine: Any = None) -> dict[str, Any]:
    """One gate-report entry (status ok + metrics) for a serving split: the bench as above, without the
    per-source variants (PipeWeave: the composition; silicon: the simulated engines, as ``predict --llm``
    answers, and the steady composition beside it). Metrics: ``<target>_mape``,
    ``worst_gpu_<target>_mape`` and ``coverage``."""
    import time

    started = time.perf_counter()
    runner = {SPLIT_PIPEWEAVE: run_pipeweave_bench, SPLIT_SILICON: run_silicon_bench}.get(split)
    if runner is None:
        raise ValueError(f"unknown serving split {split!r}; choose one of {', '.join(SPLITS)}")
    bench = runner(Path(datasets_dir), catalog, engine=engine, variants=False)
    rows = [r for r in bench.rows if r["family"] == FAMILY]
    metrics: dict[str, float] = {}
    for target in GATE_METRICS[split]:
        name = target.removesuffix("_ms")
        overall = next(r for r in rows if r["target"] == target)
        metrics[f"{name}_mape"] = float(overall["ours"])
        per_gpu = [
            r["ours"]
            for r in rows
            if r["target"].startswith(f"{target}[") and r["scope"].split("=")[0] in ("gpu", "device")
        ]
        metrics[f"worst_gpu_{name}_mape"] = float(max(per_gpu))
        metrics["coverage"] = float(overall["coverage"])
        metrics["n"] = float(overall["n"])
    return {
        "status": "ok",
        "mode": "refit",
        "n": int(metrics["n"]),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": metrics,
        "report": {"notes": bench.notes},
        "timings": [],
        "note": None,
    }
