"""Which inner folds choose the op source of the ``llm-serving-pipeweave`` bench, measured on TRAIN sides.

Per outer fold (a PipeWeave GPU the op engine answers through its relatives' kernels; never read here), each
other such training GPU g is left out in turn and the bench's procedure runs on the remaining GPUs: the op
source per phase (roofline ops or the engine) chosen by inner leave-one-GPU-out, the framework cost fitted,
g scored. Rules compared: ``every`` (the inner folds of every training GPU, the bench before) and
``tier-matched`` (``bench_common.tier_matched``: the inner folds of training GPUs answered like the held-out
one). Prints and writes the mean over outer folds of g's mean MAPE per target.

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


def nested(frames: dict[str, pd.DataFrame], own: dict[str, bool], matched: bool) -> dict[str, Any]:
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
            train = {k: f[keep] for k, f in frames.items()}
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
    sources = op_sources(bench_engine(), unseen=False)
    if ENGINE_SOURCE not in sources:
        raise SystemExit("no op engine with data in the state folder: run `kernelcast train` first")
    frames = _aligned(
        {k: compose_pipeweave(runs, catalog, datasets, fn) for k, fn in sources.items()}, "run_id"
    )
    own = own_kernels(frames["roofline"], catalog, sources[ENGINE_SOURCE])
    result = {
        "own_kernels": own,
        "every": nested(frames, own, matched=False),
        "tier-matched": nested(frames, own, matched=True),
    }
    for rule in ("every", "tier-matched"):
        print(rule, "nested train-side MAPE (prefill/decode/total):", result[rule]["mean"])
    if out:
        Path(out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
