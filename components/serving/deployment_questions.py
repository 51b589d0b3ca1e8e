"""The deployment form of a question row (the registered pyfunc): an LLM deployment on one GPU.

A row whose ``deployment`` column holds a JSON object -- ``model`` (a bundled name or an HF config object;
never a path: the model may be served), ``isl``, ``osl`` and optionally ``concurrency``, ``tp``, ``pp``,
``ep``, ``dtype``, ``kv_dtype``, ``mode``, ``prefill_gpus``, ``decode_gpus``, ``workload``, ``framework``
(vllm | sglang | trtllm; default vllm) -- and a ``device`` (or ``device_spec``) is answered
by the composition (``components.deployments``), not by the op model: ``kind`` "deployment",
``duration_us`` the end-to-end latency of one request, its interval from the TTFT/TPOT intervals,
``ttft_ms``/``tpot_ms``/``tokens_per_s`` beside, the whole answer (breakdown, memory, notes) as JSON text
in ``breakdown``. A deployment that does not fit answers with no duration and the refusal as its note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.deployments.service import DEPLOYMENT_PARAMS

DEPLOYMENT_COLUMN = "deployment"
DEPLOYMENT_VERSION = "deployment-composition"
# A disaggregated deployment also says how many GPUs serve prefill and decode.
DEPLOYMENT_FIELDS = ("model", *DEPLOYMENT_PARAMS, "prefill_gpus", "decode_gpus")


# Said on a deployment answer of a model logged before models carried their engines' constants.
PREDATES_NOTE = (
    "this model predates carrying its serving engines' constants: read from the installed kernelcast "
    "(components/deployments/engines/constants.json)"
)


@dataclass(frozen=True)
class ModelParts:
    """What a model's deployment answers are made of: the op times of its op engine (None: the state
    folder's, ``deployments.ops.production_op_time``) and the engines' constants file it carries (None: the
    package's, with ``notes`` saying so)."""

    op_time: Any = None
    constants: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def model_parts(predictor: Any) -> ModelParts:
    """The op engine and the constants ``predictor`` carries (``components.models.load_predictor`` names
    them); a bare predictor (no op engine, no constants) answers as the state folder and package do."""
    from components.deployments.op_limits import limited, production_limits
    from components.deployments.ops import engine_op_time, has_data, roofline_op_time, with_step_cache
    from components.opmodel.loading import engine_for

    constants = getattr(predictor, "deployment_constants", None)
    path = Path(constants) if constants is not None else None
    carried = getattr(predictor, "opmodel_dir", None)
    if getattr(predictor, "family", None) == "roofline" and carried is None:  # `--model roofline`: its op
        # times are the training-free roofline's, never the state folder's champion engine
        return ModelParts(op_time=limited(roofline_op_time, production_limits(path)), constants=path)
    engine = engine_for(predictor) if carried is not None else None
    return ModelParts(
        op_time=with_step_cache(
            limited(engine_op_time(engine), production_limits(path)), predictor.opmodel_dir, path
        )
        if has_data(engine)
        else None,
        constants=path,
        notes=(PREDATES_NOTE,) if constants is None and engine is not None else (),
    )


def has_deployments(frame: Any) -> bool:
    return DEPLOYMENT_COLUMN in frame.columns and bool(frame[DEPLOYMENT_COLUMN].notna().any())


def _fields(value: Any, where: str) -> dict[str, Any]:
    from components.common.json_object import json_object
    from components.serving.query import QueryError

    expected = f"expected an object with fields {', '.join(DEPLOYMENT_FIELDS)}"
    value = json_object(value, where, QueryError, DEPLOYMENT_FIELDS, expected)
    if "model" not in value:
        raise QueryError(f"{where}.model: required (a bundled model name or an HF config object)")
    return value


def answer_deployment_row(
    index: int, row: dict[str, Any], resolve: Any, parts: ModelParts | None = None
) -> dict[str, Any]:
    """One question row with a deployment -> one answer row (QueryError naming the row otherwise), from
    the model's ``parts`` (:func:`model_parts`) where given."""
    from components.deployments.config import DeploymentError
    from components.serving.disagg import predict_split_deployment
    from components.serving.query import QueryError

    where = f"question {index}"
    fields = _fields(row[DEPLOYMENT_COLUMN], f"{where}.{DEPLOYMENT_COLUMN}")
    spec = resolve(row.get("device"), row.get("device_spec"), where)
    params = {k: v for k, v in fields.items() if k != "model"}
    try:
        result = predict_split_deployment(
            fields["model"], [spec], params, allow_paths=False, where="", carried=parts
        )[0]
    except DeploymentError as exc:
        raise QueryError(f"{where}.{DEPLOYMENT_COLUMN}: {exc}") from None
    out: dict[str, Any] = {
        "question": index,
        "device": spec.id,
        "device_name": spec.name,
        "kind": "deployment",
        "model_version": DEPLOYMENT_VERSION,
    }
    if "refused" in result:
        return {**out, "note": result["refused"]}
    if parts is not None and parts.notes:
        result["notes"] = [*result["notes"], *parts.notes]
    osl = int(result["deployment"]["osl"])
    (ttft_lo, ttft_hi), (tpot_lo, tpot_hi) = result["interval"]["ttft_ms"], result["interval"]["tpot_ms"]
    steps = max(osl - 1, 0)
    return {
        **out,
        "duration_us": result["e2e_ms"] * 1e3,
        "duration_us_lo": (ttft_lo + tpot_lo * steps) * 1e3,
        "duration_us_hi": (ttft_hi + tpot_hi * steps) * 1e3,
        "note": "; ".join(result["notes"]),
        "breakdown": json.dumps(result, default=str),
        "ttft_ms": result["ttft_ms"],
        "tpot_ms": result["tpot_ms"],
        "tokens_per_s": result["tokens_per_s"],
    }


def answer_mixed_frame(predictor: Any, frame: Any, *, model_version: str, allow_modules: bool = True) -> Any:
    """Question rows where some carry a deployment: those through the composition, the others through
    ``questions.answer_frame``; answers in the rows' order, ``question`` the row's position."""
    import pandas as pd

    from components.serving.answer_fields import ANSWER_KEYS
    from components.serving.question_forms import _DeviceResolver
    from components.serving.questions import answer_frame

    frame = frame.reset_index(drop=True)
    mask = frame[DEPLOYMENT_COLUMN].notna()
    resolve = _DeviceResolver()
    parts = model_parts(predictor)
    answers = [
        answer_deployment_row(int(i), frame.loc[i].to_dict(), resolve, parts) for i in frame.index[mask]
    ]
    parts = [pd.DataFrame(answers)]
    if (~mask).any():
        ops = frame.loc[~mask].drop(columns=[DEPLOYMENT_COLUMN])
        other = answer_frame(
            predictor, ops.reset_index(drop=True), model_version=model_version, allow_modules=allow_modules
        )
        other["question"] = ops.index.to_numpy()[other["question"].to_numpy(int)]
        parts.append(other)
    out = pd.concat(parts, ignore_index=True).sort_values("question", kind="stable").reset_index(drop=True)
    columns = list(ANSWER_KEYS) + sorted(set(out.columns) - set(ANSWER_KEYS))
    return out.reindex(columns=columns)
