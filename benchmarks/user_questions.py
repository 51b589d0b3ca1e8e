"""The questions users ask, scored as a user would ask them: measured bf16 GEMMs and a physics sweep of the
catalog.

1. ``gemm``: 1,000 measured bf16 GEMMs (cuBLAS through vLLM's ``torch.nn.functional.linear``/default kernels
   in AIConfigurator's tables), 250 each on H100 SXM, H200, A100-SXM4-80GB and L40S, chosen by a hash of the
   shape (the same 1,000 every run; no shape of size 0). Truth: the median over the shape's repeated
   measurements. Scored through the one question schema (``parse_questions`` -> ``answer_questions``),
   beside the roofline.
2. ``sweep``: every catalog GPU x a grid of GEMM (every dtype) and attention shapes: counts answers that
   break physics (a rate above the GPU's peak, a runtime below the roofline time, a class disagreeing with
   the pipe).

    .venv/bin/python benchmarks/user_questions.py --model models:/kernelcast@champion
    .venv/bin/python benchmarks/user_questions.py --model roofline --only sweep
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

GPUS: tuple[str, ...] = ("h100-sxm", "h200", "a100-sxm4-80gb", "l40s")
PER_GPU = 250
VLLM_SOURCES = ("vllm_default", "torch.nn.functional.linear")


def _hash_rank(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    keys = frame[columns].astype(str).agg("|".join, axis=1)
    return np.array([int(hashlib.sha256(k.encode()).hexdigest()[:12], 16) for k in keys])


def measured_bf16_gemms(datasets: Path) -> pd.DataFrame:
    """The 1,000 questions with their measured median runtime (us)."""
    from components.ingest.aiconfigurator import medians, read_gemm

    gemm = read_gemm(datasets / "aiconfigurator")
    gemm = gemm[
        (gemm["dtype"] == "bf16") & gemm["device_id"].isin(GPUS) & (gemm[["M", "N", "K"]] > 0).all(axis=1)
    ]
    truth = medians(gemm, ["device_id", "M", "N", "K"])
    vllm = gemm[gemm["kernel_source"].isin(VLLM_SOURCES)][["device_id", "M", "N", "K"]].drop_duplicates()
    chosen = truth.merge(vllm, on=["device_id", "M", "N", "K"])
    chosen = chosen.assign(rank=_hash_rank(chosen, ["device_id", "M", "N", "K"]))
    return chosen.sort_values("rank").groupby("device_id", sort=True).head(PER_GPU).reset_index(drop=True)


def _answers(predictor, version: str, rows: list[dict]) -> pd.DataFrame:
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    return pd.DataFrame(answer_questions(predictor, parse_questions(rows), model_version=version))


def _physics_breaks(answers: pd.DataFrame, specs: dict) -> pd.Series:
    """Per answer: which physics rule it breaks ('' when none). Tolerance 0.1% for float rounding."""
    reasons = []
    for a in answers.to_dict("records"):
        spec, broken = specs[a["device"]], []
        duration, roof = a.get("duration_us"), a.get("roofline_us")
        if duration is not None and roof is not None and duration < roof * 0.999:
            broken.append("runtime below roofline")
        if a.get("achieved_gbps") is not None and a["achieved_gbps"] > spec.dram_gbps * 1.001:
            broken.append("bandwidth above peak")
        peaks = [v for v in spec.peak_tflops.model_dump(exclude_none=True).values()]
        if a.get("gflops") is not None and a["gflops"] > max(peaks) * 1e3 * 1.001:
            broken.append("FLOP/s above every peak")
        pipe, klass = a.get("bound_pipe"), a.get("roofline_class")
        if (pipe in ("dram", "l2", "link") and klass == "compute") or (
            pipe in ("tensor", "fp32", "fp64") and klass == "bandwidth"
        ):
            broken.append(f"class {klass} with pipe {pipe}")
        reasons.append("; ".join(broken))
    return pd.Series(reasons, index=answers.index)


def score_gemms(predictor, version: str, datasets: Path) -> dict:
    from components.devices import load_catalog

    chosen = measured_bf16_gemms(datasets)
    rows = [
        {
            "op": "gemm",
            "shape": {"M": int(r.M), "N": int(r.N), "K": int(r.K)},
            "dtype": "bf16",
            "device": r.device_id,
        }
        for r in chosen.itertuples()
    ]
    start = time.perf_counter()
    answers = _answers(predictor, version, rows)
    seconds = time.perf_counter() - start
    catalog = load_catalog()
    breaks = _physics_breaks(answers, {g: catalog.get(g) for g in GPUS})
    truth = chosen["latency_us"].to_numpy()
    pred = pd.to_numeric(answers["duration_us"], errors="coerce").to_numpy()
    roof = pd.to_numeric(answers["roofline_us"], errors="coerce").to_numpy()
    out = {
        "questions": len(rows),
        "answered": int(np.isfinite(pred).sum()),
        "seconds": round(seconds, 2),
        "impossible_answers": int((breaks != "").sum()),
        "per_gpu": {},
    }
    tiers = answers["tier"] if "tier" in answers else pd.Series([None] * len(answers))
    for gpu in (*GPUS, "all"):
        k = np.ones(len(truth), bool) if gpu == "all" else (chosen["device_id"] == gpu).to_numpy()
        ape, roof_ape = np.abs(pred[k] - truth[k]) / truth[k], np.abs(roof[k] - truth[k]) / truth[k]
        out["per_gpu"][gpu] = {
            "n": int(k.sum()),
            "mape": float(np.nanmean(ape)),
            "median_ape": float(np.nanmedian(ape)),
            "median_pred_over_measured": float(np.nanmedian(pred[k] / truth[k])),
            "roofline_mape": float(np.nanmean(roof_ape)),
            "tiers": {str(t): int(n) for t, n in tiers[k].value_counts(dropna=False).items()},
        }
    return out


def sweep(predictor, version: str) -> dict:
    from components.devices import load_catalog
    from components.serving.query import DTYPES

    catalog = load_catalog()
    sizes = [1, 16, 256, 4096, 16384]
    rows = []
    for spec in catalog.all():
        for dtype in DTYPES:
            for m in sizes:
                for n in (1024, 8192):
                    rows.append(
                        {
                            "op": "gemm",
                            "shape": {"M": m, "N": n, "K": 4096},
                            "dtype": dtype,
                            "device": spec.id,
                        }
                    )
        for b, s, kv in ((1, 4096, 4096), (32, 1, 4096), (8, 512, 8192)):
            rows.append(
                {
                    "op": "attention",
                    "shape": {"B": b, "S": s, "KV": kv, "H": 32, "HKV": 8, "D": 128},
                    "dtype": "bf16",
                    "device": spec.id,
                }
            )
    start = time.perf_counter()
    answers = _answers(predictor, version, rows)
    seconds = time.perf_counter() - start
    breaks = _physics_breaks(answers, {s.id: s for s in catalog.all()})
    kinds = breaks[breaks != ""].value_counts().to_dict()
    return {
        "questions": len(rows),
        "seconds": round(seconds, 2),
        "impossible_answers": int((breaks != "").sum()),
        "by_rule": {str(k): int(v) for k, v in kinds.items()},
        "unanswered": int(pd.to_numeric(answers["duration_us"], errors="coerce").isna().sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models:/kernelcast@champion")
    parser.add_argument("--only", choices=("gemm", "sweep"), default=None)
    parser.add_argument("--datasets", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    args = parser.parse_args()

    from components.platform.config import get_settings
    from components.platform.runtime import configure_environment
    from components.serving.query import load_any_predictor

    settings = get_settings()
    configure_environment(settings)
    predictor = load_any_predictor(args.model)
    datasets = args.datasets or settings.datasets_dir
    result: dict = {"model": args.model}
    if args.only in (None, "gemm"):
        result["gemm"] = score_gemms(predictor, args.model, datasets)
    if args.only in (None, "sweep"):
        result["sweep"] = sweep(predictor, args.model)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        from components.common.atomic import atomic_write_text

        atomic_write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
