"""Load any predictor from what a user types: ``roofline``, a folder, ``models:/...`` or ``runs:/...``.

The one loader behind ``kernelcast evaluate``, ``predict``, ``serve``, ``calibrate`` and the HTTP app,
so a model reference means the same thing everywhere. The registry's branch lives here; the local
references (``roofline``, a folder) are the models' own (``components.models.loading``).
"""

from __future__ import annotations

from pathlib import Path

from components.models.base import Predictor
from components.models.loading import ROOFLINE, URI_SCHEMES, ModelLoadError, load_local_predictor


def load_any_predictor(model: str | Path, tracking_uri: str | None = None) -> Predictor:
    """``roofline`` (training-free), a saved predictor folder, or an MLflow ``models:/``/``runs:/``
    URI (the predictor inside its pyfunc wrapper, from ``tracking_uri`` or MLflow's current store)."""
    reference = str(model).strip()
    if reference.startswith(URI_SCHEMES):
        from components.registry.mlflow_registry import load_registered_predictor

        try:
            return load_registered_predictor(reference, tracking_uri)
        except (LookupError, TypeError) as exc:
            raise ModelLoadError(str(exc)) from exc
    return load_local_predictor(reference)


__all__ = ["ROOFLINE", "URI_SCHEMES", "ModelLoadError", "load_any_predictor"]
