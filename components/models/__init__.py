"""Predictors behind one interface (``base.Predictor``), loaded by the family in ``predictor.json``."""

from __future__ import annotations

import contextlib
import importlib
import json
from pathlib import Path

from components.models.base import Predictor

PREDICTOR_FILE = "predictor.json"
# The serving engines' constants a logged model carries (``components.registry.carried``): deployment
# answers of this predictor read them from here, not from the installed package.
DEPLOYMENT_CONSTANTS = Path("deployments") / "constants.json"
# ... and the per-GPU runtime corrections (``components.models.calibration.CALIBRATION_DIR``, the same layout
# as the state folder's): the predictor's ``corrections_home``.
CORRECTIONS_DIR = "calibration"
# ... and the program model fitted on this predictor's op answers (``components.programs.overheads``): a
# module question answered by this predictor reads it from here before the state folder's models/programs/.
PROGRAM_MODEL_FILE = "program_model.json"

# family -> "module:Class" whose ``load(directory)`` classmethod restores a saved predictor.
# Imported lazily: the tabular and llm families pull in heavy libraries.
LOADERS: dict[str, str] = {
    "roofline": "components.models.roofline:RooflinePredictor",
    "tabular": "components.models.tabular:TabularPredictor",
    "llm": "components.models.llm.model:LLMPredictor",
}


def register_loader(family: str, target: str) -> None:
    """Add a family (``"module:Class"``); its class must provide ``load(directory) -> Predictor``."""
    LOADERS[family] = target


def load_predictor(directory: Path) -> Predictor:
    """Restore any saved predictor from ``directory`` by the family named in its predictor.json."""
    path = Path(directory) / PREDICTOR_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {PREDICTOR_FILE} in {directory}")
    family = json.loads(path.read_text()).get("family")
    if family not in LOADERS:
        raise ValueError(f"{path}: unknown predictor family {family!r}; known: {sorted(LOADERS)}")
    module_name, _, class_name = LOADERS[family].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return with_carried(cls.load(Path(directory)), Path(directory))


def with_carried(predictor: Predictor, folder: Path) -> Predictor:
    """``predictor`` (loaded from ``folder`` by any loader) naming what ``folder`` carries beside it."""
    carried = {
        # the op engine trained with it (components/opmodel)
        "opmodel_dir": (folder / "opmodel", (folder / "opmodel" / "engine.json").is_file()),
        # what a logged model carries (components.registry.carried; models logged before it have neither)
        "deployment_constants": (folder / DEPLOYMENT_CONSTANTS, (folder / DEPLOYMENT_CONSTANTS).is_file()),
        "corrections_home": (folder, (folder / CORRECTIONS_DIR).is_dir()),
        # the program model fitted on its op answers (components/programs/module_predict.py reads it)
        "program_model_file": (folder / PROGRAM_MODEL_FILE, (folder / PROGRAM_MODEL_FILE).is_file()),
    }
    for attribute, (value, present) in carried.items():
        if present:  # a frozen predictor takes none: serving falls back to the state folder's
            with contextlib.suppress(AttributeError, TypeError):
                setattr(predictor, attribute, value)
    return predictor


__all__ = [
    "CORRECTIONS_DIR",
    "DEPLOYMENT_CONSTANTS",
    "LOADERS",
    "PREDICTOR_FILE",
    "PROGRAM_MODEL_FILE",
    "Predictor",
    "load_predictor",
    "register_loader",
    "with_carried",
]
