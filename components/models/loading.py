"""Load a predictor that lives on this machine: ``roofline`` (training-free) or a saved folder.

A registered model (``models:/...``, ``runs:/...``) is the registry's to load:
``components.registry.loading.load_any_predictor`` reads every reference a user types and hands the
local ones to ``load_local_predictor`` -- a model does not know where it is registered.
"""

from __future__ import annotations

from pathlib import Path

from components.models.base import Predictor

ROOFLINE = "roofline"
URI_SCHEMES: tuple[str, ...] = ("models:/", "runs:/")


class ModelLoadError(ValueError):
    """A model reference that names nothing loadable; the message names the reference."""


def load_local_predictor(model: str | Path) -> Predictor:
    """``roofline`` or a saved predictor folder; a ``ModelLoadError`` naming the reference otherwise."""
    reference = str(model).strip()
    if not reference:
        raise ModelLoadError(
            "model reference is empty: give 'roofline', a predictor folder, or a models:/ URI"
        )
    if reference == ROOFLINE:
        from components.models.roofline import RooflinePredictor

        return RooflinePredictor()
    path = Path(reference).expanduser()
    if not path.is_dir():
        raise ModelLoadError(
            f"model {reference!r} is neither 'roofline', a models:/ or runs:/ URI, nor a predictor folder"
        )
    from components.models import load_predictor

    try:
        return load_predictor(path)
    except (FileNotFoundError, ValueError) as exc:
        raise ModelLoadError(f"model {reference!r}: {exc}") from exc


__all__ = ["ROOFLINE", "URI_SCHEMES", "ModelLoadError", "load_local_predictor"]
