"""A Hugging Face transformer's GEMMs inside the module answer beside the same ops asked alone: per GPU the
total, the ops' time per (kind, tier), and per ``linear``/``bmm`` op the module's runtime and tier next to
``predict``'s single-op answer (``components.serving.questions.answer_questions``).

Usage (from the repository root, ``KERNELCAST_HOME`` set):
  PYTHONPATH=. python benchmarks/hf_gemm_routing.py [--model REF] [--gpus v100-pcie-32gb,...]
      [--name bert-large] [--fallback data|learned]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from hf_whole_models import module_text

    from components.devices import load_catalog
    from components.programs import engine_ops
    from components.programs.module_predict import answer_ops, program_frames, resolve_program_model
    from components.programs.ops import program_ops
    from components.programs.trace import trace_module
    from components.serving.models import load_model
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="models:/kernelcast@champion")
    parser.add_argument("--gpus", default="v100-pcie-32gb,a100-pcie-40gb")
    parser.add_argument("--name", default="bert-large")
    parser.add_argument("--fallback", choices=("data", "learned"), default=engine_ops.FP32_FALLBACK)
    ns = parser.parse_args()
    engine_ops.FP32_FALLBACK = ns.fallback
    catalog = load_catalog()
    predictor = load_model(ns.model).predictor
    program = program_ops(trace_module(module_text(ns.name)).ops)
    model, matches = resolve_program_model(predictor)
    gpus = ns.gpus.split(",")
    times, frame = program_frames([program], [catalog.get(g) for g in gpus], predictor, model, matches)
    for gpu in gpus:
        ops = answer_ops(times[times["device_id"] == gpu], model, matches)
        total = float(frame.loc[frame["device_id"] == gpu, "predicted_us"].iloc[0])
        print(
            f"== {gpu}: total {total / 1e3:.1f} ms, ops {ops['total_us'].sum() / 1e3:.1f} ms, "
            f"roof {ops['roof_total'].sum() / 1e3:.1f} ms"
        )
        print(ops.groupby(["kind", "tier"])["total_us"].sum().div(1e3).round(1).to_string())
        gemms = ops[ops["family"].isin(["linear", "bmm"])]
        shapes = [dict(program.questions[int(q)].shape) for q in gemms["question"]]
        asked = [
            {"op": f, "shape": {k: int(v) for k, v in s.items()}, "dtype": d, "device": gpu}
            for f, s, d in zip(gemms["family"], shapes, gemms["dtype"], strict=True)
        ]
        alone = answer_questions(predictor, parse_questions(asked), model_version="alone") if asked else []
        for row, shape, answer in zip(gemms.itertuples(), shapes, alone, strict=True):
            print(
                f"  {row.family} {shape} x{int(row.count)}: module {row.pred_us:.1f} us [{row.tier}], "
                f"alone {answer['duration_us']:.1f} us [{answer['tier']}], roofline {row.roof_us:.1f} us"
            )


if __name__ == "__main__":
    main()
