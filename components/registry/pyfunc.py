"""The pyfunc wrapper every registered kernelcast model is logged with.

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

PREDICTOR_ARTIFACT = "predictor"


def resolve_loader(spec: str) -> Any:
    """``"package.module:function"`` -> the function (the loader a model was logged with)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"loader must look like 'package.module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), attr)


class KernelcastPyfunc(mlflow.pyfunc.PythonModel):
    """Rebuilds a saved predictor directory with the loader recorded in the model's config."""

    def load_context(self, context: Any) -> None:
        loader = resolve_loader(context.model_config["loader"])
        self.predictor = loader(Path(context.artifacts[PREDICTOR_ARTIFACT]))

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> Any:
        return self.predictor.predict(model_input)
