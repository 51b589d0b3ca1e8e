"""Source and module questions answered by their program predictors (``components.programs``): one
call per kernel for all the devices asked about it, the predictor's errors restated about the question.
"""

from __future__ import annotations

import json
from typing import Any

from components.serving.answer_fields import _blank, _plain
from components.serving.query import QueryError
from components.serving.question_forms import Question


def _program_answers(
    kind: str, predictor: Any, group: list[Question], model_version: str
) -> list[dict[str, Any]]:
    """Source or module questions sharing one kernel: one program-predictor call for all their devices."""
    from components.programs.errors import ProgramError

    first = group[0]
    specs = [q.device for q in group]
    try:
        if kind == "source":
            try:
                from components.programs.source_predict import predict_source
            except ImportError as exc:
                raise QueryError(
                    f"question {first.index}: source questions are not available in this install "
                    f"(components.programs.source_predict: {exc})"
                ) from None
            results = predict_source(
                first.source, first.language, dict(first.launch or {}), first.dtype, specs, predictor
            )
        else:
            try:
                from components.programs.module_predict import predict_module
            except ImportError as exc:
                raise QueryError(
                    f"question {first.index}: module questions are not available in this install "
                    f"(components.programs.module_predict: {exc})"
                ) from None
            results = predict_module(first.module, first.dtype, specs, predictor, train=first.train)
    except ProgramError as exc:
        message = str(exc)
        if message.startswith(f"{kind}:"):  # the predictor names the field itself
            message = message[len(kind) + 1 :].lstrip()
        raise QueryError(f"question {first.index}.{kind}: {message}") from None
    if len(results) != len(group):
        raise RuntimeError(f"{kind} predictor returned {len(results)} answers for {len(group)} devices")
    answers = []
    for question, result in zip(group, results, strict=True):
        answer = _blank(question, model_version)
        for key, value in dict(result).items():
            if key in ("question", "device", "device_name", "kind", "model_version"):
                continue
            if key == "breakdown" and isinstance(value, str):
                value = json.loads(value)  # nested in every answer; answer_frame writes it as text for MLflow
            answer[key] = (
                value if key in ("breakdown", "note", "roofline_class", "bound_pipe") else _plain(value)
            )
        if answer.get("ood") is not None:
            answer["ood"] = bool(answer["ood"])
        if answer.get("headroom") is None and answer.get("duration_us") and answer.get("roofline_us"):
            answer["headroom"] = answer["duration_us"] / answer["roofline_us"]
        answers.append(answer)
    return answers
