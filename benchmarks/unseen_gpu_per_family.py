"""The gate's ``unseen-gpu`` split at its caps (the same folds, refit and scoring as ``evaluate --gate``),
with each held-out GPU's runtime MAPE per op family. Run it from main's checkout too for a before/after on
the same table.

    PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/unseen_gpu_per_family.py FEATURES CANONICAL [GPU ...]

GPU ...: the GPUs held out (default: the gate's two, drawn by hash).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(features: str, canonical: str, *gpus: str) -> None:
    import yaml

    from components.evaluation.harness import read_feature_table
    from components.evaluation.report import evaluate_split
    from components.models.tabular import TabularPredictor
    from components.models.tabular_config import TabularConfig
    from components.registry.gate import EvaluationCaps

    started = time.perf_counter()
    params = yaml.safe_load(Path("params.yaml").read_text())
    table = read_feature_table(Path(features), Path(canonical))
    caps = EvaluationCaps(gpu_folds=tuple(gpus))
    predictor = TabularPredictor(TabularConfig.from_params(params, max_train_rows=caps.max_train_rows))
    frames = []
    entry = evaluate_split(
        predictor,
        table,
        "unseen-gpu",
        mode="refit",
        caps=caps,
        model="tabular",
        canonical_dir=Path(canonical),
        on_frame=lambda _s, f: frames.append(f),
    )
    out = {"metrics": {k: v for k, v in entry["metrics"].items() if "gpu" in k or k == "runtime_mape"}}
    frame = frames[0]
    frame = frame[frame["pred_duration_us"].notna()]
    ape = (frame["pred_duration_us"] / frame["duration_us"] - 1).abs()
    per = ape.groupby([frame["device_id"].astype(str), frame["family"].astype(str)]).agg(["size", "mean"])
    out["per_gpu_family"] = {
        f"{d}/{f}": [int(r["size"]), round(float(r["mean"]), 4)] for (d, f), r in per.iterrows()
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
