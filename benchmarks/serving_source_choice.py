"""Which inner folds choose the op source of the ``llm-serving-pipeweave`` bench, measured on TRAIN sides.

Per outer fold (a PipeWeave GPU the op engine answers through its relatives' kernels; never read here), each
other such training GPU g is left out in turn and the bench's procedure runs on the remaining GPUs: the op
source per phase (roofline ops or the engine) chosen by inner leave-one-GPU-out, the framework cost fitted,
g scored. Rules compared: ``every`` (the inner folds of every training GPU, the bench before),
``tier-matched`` (``bench_common.tier_matched``: the inner folds of training GPUs answered like the held-out
one; adopted) and ``relatives-fit`` (every inner fold, but the GPUs with their own kernels composed, for the
choice and the fit, as the engine answers them without those kernels: the transfer tier from the other GPUs'
tables -- the spec model and the transfer settings as trained, so not fully blind; not adopted). Prints and
writes the mean over outer folds of g's mean MAPE per target.

    PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/serving_source_choice.py [OUT.json]

The engine is the state folder's (``kernelcast train`` builds it); ~1 min on 2 cores once it is built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TARGETS = ("prefill", "decode", "total")


def without_own(engine: Any, spec: Any) -> Any:
    """``engine`` as it answers ``spec`` had no table measured it: its measured tier and curves without the
    GPUs of ``spec``'s physics, the transfer tier over the rest."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.measured import physics_key
    from components.opmodel.transfer import TransferTier

    own = [d for d, s in engine.measured.specs.items() if physics_key(s) == physics_key(spec)]
    measured = engine.measured
    for device in own:
        measured = measured.without(device)
    transfer = TransferTier(measured, None, engine.transfer.model)
    transfer.curve_groups = {k: v for k, v in engine.transfer.curve_groups.items() if k[1] not in own}
    return OpEngine(
        measured,
        engine.spec_model,
        engine.calibrations,
        engine.intervals,
        engine.meta,
        engine.store_dir,
        engine.fallback_util,
        transfer,
        engine.monotone,
    )


def relatives_frame(frames: dict[str, pd.DataFrame], own: dict[str, bool], compose: Any, engine: Any) -> Any:
    """The engine frame with each own-kernel GPU's runs recomposed by ``without_own``."""
    from components.deployments.ops import engine_op_time
    from components.devices.catalog import load_catalog

    frame, catalog = frames["engine"], load_catalog()
    parts = [frame[~frame["gpu"].isin([g for g, mine in own.items() if mine])]]
    for gpu in (g for g, mine in own.items() if mine):
        asked = frame[frame["gpu"] == gpu]
        parts.append(
            compose(asked, engine_op_time(without_own(engine, catalog.resolve(asked["device_id"].iloc[0]))))
        )
    return pd.concat(parts, ignore_index=True).sort_values("run_id").reset_index(drop=True)


def nested(
    frames: dict[str, pd.DataFrame], own: dict[str, bool], matched: bool, fit_frames: Any = None
) -> dict[str, Any]:
    from components.common.metrics import mape
    from components.deployments.bench_common import _combine, choose_source, tier_matched
    from components.deployments.bench_pipeweave import fit_pipeweave, predict_pipeweave

    gpus = frames["roofline"]["gpu"]
    relatives = sorted(g for g, mine in own.items() if not mine)
    per_outer = {}
    for outer in relatives:
        scores = []
        for g in (g for g in relatives if g != outer):
            keep, test = (gpus != outer) & (gpus != g), gpus == g
            train = {k: f[keep] for k, f in (fit_frames or frames).items()}
            inner_own = {k: v for k, v in own.items() if k not in (outer, g)}
            scored = tier_matched({**inner_own, g: own[g]}, g) if matched else None
            choice = choose_source(
                train,
                "gpu",
                fit_pipeweave,
                predict_pipeweave,
                {"prefill": "prefill_ms", "decode": "decode_ms"},
                scored,
            )
            held = {k: predict_pipeweave(f[test], fit_pipeweave(train[k])) for k, f in frames.items()}
            p = _combine(held, choice, osl=True)
            scores.append([mape(p[f"{t}_ms"].to_numpy(), p[f"{t}_pred_ms"].to_numpy()) for t in TARGETS])
        per_outer[outer] = dict(zip(TARGETS, np.mean(scores, axis=0).round(4).tolist(), strict=True))
    mean = {t: round(float(np.mean([v[t] for v in per_outer.values()])), 4) for t in TARGETS}
    return {"mean": mean, "per_outer_fold": per_outer}


def main(out: str | None = None) -> None:
    from components.deployments.bench import bench_engine
    from components.deployments.bench_common import _aligned, op_sources
    from components.deployments.bench_pipeweave import compose_pipeweave, own_kernels
    from components.deployments.data import read_pipeweave_runs
    from components.deployments.ops import ENGINE_SOURCE
    from components.devices.catalog import load_catalog
    from components.platform.config import get_settings

    datasets, catalog = Path(get_settings().datasets_dir), load_catalog()
    runs = read_pipeweave_runs(datasets)
    runs = runs.assign(
        run_id=[f"{r.gpu}/tp{r.tp}/{r.model}/{r.workload}/{i}" for i, r in enumerate(runs.itertuples())]
    )
    engine = bench_engine()
    sources = op_sources(engine, unseen=False)
    if ENGINE_SOURCE not in sources:
        raise SystemExit("no op engine with data in the state folder: run `kernelcast train` first")
    frames = _aligned(
        {k: compose_pipeweave(runs, catalog, datasets, fn) for k, fn in sources.items()}, "run_id"
    )
    own = own_kernels(frames["roofline"], catalog, sources[ENGINE_SOURCE])
    asked = runs.set_index("run_id")

    def compose(part: pd.DataFrame, fn: Any) -> pd.DataFrame:
        return compose_pipeweave(asked.loc[part["run_id"]].reset_index(), catalog, datasets, fn)

    relatives = {**frames, "engine": relatives_frame(frames, own, compose, engine)}
    result = {
        "own_kernels": own,
        "every": nested(frames, own, matched=False),
        "tier-matched": nested(frames, own, matched=True),
        "relatives-fit": nested(frames, own, matched=False, fit_frames=relatives),
    }
    for rule in ("every", "tier-matched", "relatives-fit"):
        print(rule, "nested train-side MAPE (prefill/decode/total):", result[rule]["mean"])
    if out:
        Path(out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
