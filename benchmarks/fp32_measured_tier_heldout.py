"""The op engine's measured tier vs its learned tier on FP32 GEMMs of the GPUs it holds kernels of
(docs/answers.md, "Which tier answers an op question").

NeuSight's FP32 ``linear`` rows (the store's ``measured_only/gemm.parquet``: P4, P100, T4, V100,
A100-PCIE-40GB) with 20% of each GPU's (N, K) sites held out of an engine built from the rest; up to 150
held-out rows per GPU answered by that engine's measured tier (``routing.measured_answers``) and by the
learned tier (the promoted champion, as ``predict`` answered every FP32 GEMM before the one op path). The
champion may have trained on the held-out rows (they are NeuSight's training side): the comparison favours it.

    KERNELCAST_HOME=<a copy of a pipeline state> PYTHONPATH=. python benchmarks/fp32_measured_tier_heldout.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.devices.catalog import load_catalog
from components.opmodel.engine import OpEngine
from components.opmodel.routing import measured_answers
from components.opmodel.spec import hash_fraction
from components.platform.config import get_settings
from components.serving.models import load_model
from components.serving.op_answers import _answer_learned_ops
from components.serving.question_forms import parse_questions

HELD_SHARE = 0.2
PER_GPU = 150


def main() -> None:
    frame = pd.read_parquet(get_settings().data_dir / "opmodel/store/measured_only/gemm.parquet")
    held = hash_fraction(frame, ["N", "K"]) < HELD_SHARE
    engine = OpEngine.from_frames({"gemm": frame[~held]})
    catalog, model = load_catalog(), load_model("models:/kernelcast@champion")
    parts = []
    for device, rows in frame[held].groupby("device_id"):
        rows = rows.sample(min(len(rows), PER_GPU), random_state=0)
        shape = {k: rows[k].to_numpy("float64") for k in ("M", "N", "K")}
        measured = measured_answers(engine, "gemm", "fp32", shape, catalog.get(device)).duration_us
        questions = parse_questions(
            [
                {
                    "op": "gemm",
                    "shape": {k: int(r[k]) for k in ("M", "N", "K")},
                    "dtype": "fp32",
                    "device": device,
                }
                for _, r in rows.iterrows()
            ]
        )
        learned = [a["duration_us"] for a in _answer_learned_ops(model.predictor, questions, model.version)]
        parts.append(rows.assign(measured=measured, learned=np.asarray(learned, dtype="float64")))
    out = pd.concat(parts)
    for tier in ("measured", "learned"):
        out[f"ape_{tier}"] = 100 * np.abs(out[tier] - out["latency_us"]) / out["latency_us"]
    answered = np.isfinite(out["measured"])
    print(
        out[answered].groupby("device_id")[["ape_measured", "ape_learned"]].agg(["mean", "median"]).round(1)
    )
    ape = {t: out[f"ape_{t}"][answered] for t in ("measured", "learned")}
    print(
        f"{answered.sum()} of {len(out)} held-out rows answered by the measured tier: MAPE "
        + ", ".join(f"{t} {a.mean():.1f}% (median {a.median():.1f}%)" for t, a in ape.items())
    )


if __name__ == "__main__":
    main()
