"""Saving and loading a fitted tabular predictor: LightGBM text models (or pickled MLPs, our own artifact),
the ids it was trained on, and ``predictor.json`` with its columns, categories, intervals and bounds."""

from __future__ import annotations

import gzip
import json
import pickle
from dataclasses import asdict
from pathlib import Path
from typing import Any

from components.models import PREDICTOR_FILE
from components.models.tabular_config import TabularConfig

TRAINED_ON_FILE = "trained_on.txt.gz"


def save(predictor: Any, directory: Path) -> None:
    """Write ``predictor`` (a ``TabularPredictor``) into ``directory``: one model file per target, the
    trained-on ids, and ``predictor.json`` describing the rest."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for target, model in predictor.models.items():
        if predictor.config.model == "lgbm":
            name = f"model_{target}.txt"
            model.save_model(str(directory / name))
        else:
            name = f"model_{target}.pkl"
            (directory / name).write_bytes(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
        files[target] = name
    with gzip.open(directory / TRAINED_ON_FILE, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(sorted(predictor._trained_on)))
    spec = {
        "family": predictor.family,
        "config": asdict(predictor.config),
        "feature_columns": predictor.feature_columns,
        "categories": predictor.categories,
        "classes": predictor.classes,
        "conformal": predictor.conformal,
        "floors": predictor.floors,
        "target_bounds": predictor.target_bounds,
        "ood": predictor.ood,
        "model_files": files,
        "trained_on_file": TRAINED_ON_FILE,
        "n_trained_on": len(predictor._trained_on),
    }
    if predictor.class_model is not None:
        predictor.class_model.save(directory / "roofline_class")
    if predictor.siblings is not None:
        predictor.siblings.save(directory)
    (directory / PREDICTOR_FILE).write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")


def load(cls: Any, directory: Path) -> Any:
    """The ``TabularPredictor`` (``cls``) that ``save`` wrote into ``directory``."""
    directory = Path(directory)
    spec = json.loads((directory / PREDICTOR_FILE).read_text())
    if spec.get("family") != "tabular":
        raise ValueError(f"{directory}: predictor.json is for family {spec.get('family')!r}, not 'tabular'")
    # A predictor saved before feature_set existed is the absolute model.
    config = TabularConfig(**{"feature_set": "absolute", **spec["config"]})
    models: dict[str, Any] = {}
    for target, name in spec["model_files"].items():
        if config.model == "lgbm":
            import lightgbm as lgb

            models[target] = lgb.Booster(model_file=str(directory / name))
        else:
            # Our own artifact, written by save(); never load one from an untrusted source.
            models[target] = pickle.loads((directory / name).read_bytes())
    with gzip.open(directory / spec["trained_on_file"], "rt", encoding="utf-8") as handle:
        trained_on = frozenset(line for line in handle.read().split("\n") if line)
    predictor = cls(
        config=config,
        feature_columns=list(spec["feature_columns"]),
        categories={k: list(v) for k, v in spec["categories"].items()},
        models=models,
        classes=list(spec["classes"]),
        conformal=dict(spec["conformal"]),
        floors=dict(spec.get("floors", {})),
        target_bounds=dict(spec.get("target_bounds", {})),
        ood=dict(spec.get("ood", {})),
    )
    predictor._trained_on = trained_on
    if (directory / "roofline_class").is_dir():
        from components.models.roofline_class import RooflineClassModel

        predictor.class_model = RooflineClassModel.load(directory / "roofline_class")
    from components.models.kernel_siblings import KernelSiblings

    predictor.siblings = KernelSiblings.load(directory)
    return predictor
