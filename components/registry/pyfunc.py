"""The pyfunc contract every registered kernelcast model is logged with, whatever its family.

Input: the user's question, one row each (``docs/answers.md``; columns ``QUESTION_COLUMNS``,
all optional strings -- dicts as JSON object text): ``device`` (catalog name) or ``device_spec``,
``dtype``, and one kernel form: ``op`` + ``shape``, ``source`` + ``language`` + ``launch``, or
``module``. Featurisation happens inside the model (``components.serving.questions.answer_frame``),
so a caller never runs our feature builder. Output: the answer columns (``ANSWER_COLUMNS``), the same
for every family, None where a family does not know a figure.

The signature and an input example are logged with the model and MLflow enforces them before
``predict`` runs: a column of the wrong type is rejected, unknown columns are dropped, and a row
that is not a complete question is a ``QueryError`` naming the row and the field.

The container is generic: the loader that rebuilds the predictor and the module that answers
questions with it (``ANSWERER``: the serving floor's ``answer_frame`` and ``QueryError``) are named
in the model config and imported when the model is loaded -- the registry sits below serving, and
a registered model runs the serving code of the kernelcast that loads it.

A separate module because it imports mlflow at the top (a class must subclass ``PythonModel``);
import it only where a model is logged or loaded. Pickled by reference, so loading a model needs
kernelcast importable -- which any service that serves its predictions has anyway.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd

from components.registry.question_columns import KERNEL_QUESTION_FIELDS

PREDICTOR_ARTIFACT = "predictor"
# The module whose ``answer_frame(predictor, frame, model_version=, allow_modules=)`` answers question
# rows and whose ``QueryError`` names a bad one; recorded in each model's config (``answerer``).
ANSWERER = "components.serving.questions"
# Rows with a ``deployment`` (an LLM deployment) are answered by the composition through this module (serving
# floor, named like ANSWERER): ``has_deployments(frame)`` and ``answer_mixed_frame(predictor, frame, ...)``.
DEPLOYMENT_ANSWERER = "components.serving.deployment_questions"
# deployment: an LLM deployment question (serving.deployment_questions).
QUESTION_COLUMNS: tuple[str, ...] = (*KERNEL_QUESTION_FIELDS, "deployment")
# Answer columns and their MLflow types (docs/answers.md, "Every field of an answer").
ANSWER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("question", "long"),
    ("device", "string"),
    ("device_name", "string"),
    ("kind", "string"),
    ("duration_us", "double"),
    ("duration_us_lo", "double"),
    ("duration_us_hi", "double"),
    ("achieved_gbps", "double"),
    ("gflops", "double"),
    ("l1_hit_rate", "double"),
    ("l2_hit_rate", "double"),
    ("arith_intensity", "double"),
    ("roofline_class", "string"),
    ("bound_pipe", "string"),
    ("roofline_us", "double"),
    ("headroom", "double"),
    ("ood", "boolean"),
    ("note", "string"),
    ("model_version", "string"),
    ("breakdown", "string"),
)


def resolve_loader(spec: str) -> Any:
    """``"package.module:function"`` -> the function (the loader a model was logged with)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"loader must look like 'package.module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), attr)


def signature() -> Any:
    """Question columns in (all optional strings), answer columns out, ``allow_modules`` as a parameter."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

    inputs = Schema([ColSpec("string", name, required=False) for name in QUESTION_COLUMNS])
    outputs = Schema(
        [
            ColSpec(kind, name, required=name in ("question", "kind", "model_version"))
            for name, kind in ANSWER_COLUMNS
        ]
    )
    params = ParamSchema([ParamSpec("allow_modules", "boolean", True)])
    return ModelSignature(inputs=inputs, outputs=outputs, params=params)


def input_example() -> pd.DataFrame:
    """Two questions: a catalog GPU, and a GPU given by its full spec (JSON text)."""
    import json

    rows = [
        {
            "device": "H100",
            "dtype": "fp16",
            "op": "gemm",
            "shape": json.dumps({"M": 4096, "N": 4096, "K": 4096}),
        },
        {"device": "A100", "dtype": "fp32", "op": "add", "shape": json.dumps({"N": 16777216})},
    ]
    return pd.DataFrame(rows, columns=list(QUESTION_COLUMNS)).astype(object).where(lambda f: f.notna(), None)


class KernelcastPyfunc(mlflow.pyfunc.PythonModel):
    """Rebuilds a saved predictor directory with the loader recorded in the model's config, and
    answers question rows with it.

    ``model_version`` in the answers is the ``model_version`` of the model config when the loader
    passes one (``mlflow.pyfunc.load_model(uri, model_config={"model_version": uri})``), else the
    run that logged it (``runs:/<run id>/model``; the version's ``training_run`` tag names it).
    """

    def load_context(self, context: Any) -> None:
        config = context.model_config or {}
        loader = resolve_loader(config["loader"])
        self.predictor = loader(Path(context.artifacts[PREDICTOR_ARTIFACT]))
        self.model_version = str(config.get("model_version") or "unknown")
        self.answerer = str(config.get("answerer") or ANSWERER)  # models logged before it was recorded

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> Any:
        answers = importlib.import_module(getattr(self, "answerer", ANSWERER))
        answer_frame, query_error = answers.answer_frame, answers.QueryError

        if not isinstance(model_input, pd.DataFrame):
            model_input = pd.DataFrame(model_input)
        present = [c for c in model_input.columns if c in QUESTION_COLUMNS]
        if not present:
            # MLflow drops the columns the signature does not name (and with them the rows of a
            # frame that had only those): a feature-table caller would get an empty answer instead.
            raise query_error(
                f"model input has none of the question columns ({', '.join(QUESTION_COLUMNS)}); "
                "send one row per question, e.g. device, dtype, op, shape"
            )
        allow_modules = bool((params or {}).get("allow_modules", True))
        deployments = importlib.import_module(DEPLOYMENT_ANSWERER)
        if deployments.has_deployments(model_input):  # an LLM deployment: answered by the composition
            return deployments.answer_mixed_frame(
                self.predictor, model_input, model_version=self.model_version, allow_modules=allow_modules
            )
        model_input = model_input.drop(columns=["deployment"], errors="ignore")
        return answer_frame(
            self.predictor, model_input, model_version=self.model_version, allow_modules=allow_modules
        )
