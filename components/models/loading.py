"""Load any predictor from what a user types: ``roofline``, a folder, ``models:/...`` or ``runs:/...``.

The one loader behind ``kernelcast evaluate``, ``predict``, ``serve`` and the HTTP app, so a model
reference means the same thing everywhere.
"""

from __future__ import annotations

from pathlib import Path

from components.models.base import Predictor

ROOFLINE = "roofline"
URI_SCHEMES: tuple[str, ...] = ("models:/", "runs:/")


class ModelLoadError(ValueError):
    """A model reference that names nothing loadable; the message names the reference."""


def load_any_predictor(model: str | Path, tracking_uri: str | None = None) -> Predictor:
    """``roofline`` (training-free), a saved predictor folder, or an MLflow ``models:/``/``runs:/``
    URI (the predictor inside its pyfunc wrapper, from ``tracking_uri`` or MLflow's current store)."""
    reference = str(model).strip()
    if not reference:
        raise ModelLoadError("model reference is empty: give 'roofline', a predictor folder, or a models:/ URI")
    if reference == ROOFLINE:
        from components.models.roofline import RooflinePredictor

        return RooflinePredictor()
    if reference.startswith(URI_SCHEMES):
        from components.registry.mlflow_registry import load_registered_predictor

        try:
            return load_registered_predictor(reference, tracking_uri)
        except (LookupError, TypeError) as exc:
            raise ModelLoadError(str(exc)) from exc
    path = Path(reference).expanduser()
    if not path.is_dir():
        raise ModelLoadError(f"model {reference!r} is neither 'roofline', a models:/ or runs:/ URI, "
                             "nor a predictor folder")
    from components.models import load_predictor

    try:
        return load_predictor(path)
    except (FileNotFoundError, ValueError) as exc:
        raise ModelLoadError(f"model {reference!r}: {exc}") from exc


__all__ = ["ROOFLINE", "URI_SCHEMES", "ModelLoadError", "load_any_predictor"]
