"""A tabular predictor without LightGBM at load time: its boosters flattened into numpy arrays.

When a registry version is copied locally (``components.serving.models``) each ``model_<target>.txt`` is
converted once into ``model_<target>.npz`` (``components.common.flat_trees``: why, and how the walk
matches ``Booster.predict``). The walk answers small batches (a CLI question) only: above ``BULK_ROWS``
rows, and every batch of a server that has loaded them (``load_compiled``), the trees run compiled by
lleaves (``components.serving.tree_compile``, compiled in the background once per model); bulk batches
before the compile is done go to LightGBM's own predictor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from components.common import flat_trees
from components.common.flat_trees import BULK_ROWS, NPZ_SUFFIX

__all__ = ["BULK_ROWS", "NPZ_SUFFIX", "FlatTrees", "flatten_folder", "load_compiled", "load_flat_predictor"]


class FlatTrees(flat_trees.FlatTrees):
    """Flat trees plus lleaves' compiled copy: every batch of a server that has loaded it, bulk once built."""

    def __init__(self, arrays: dict[str, np.ndarray], objective: str, n_classes: int) -> None:
        super().__init__(arrays, objective, n_classes)
        self._compiled: Any = None  # lleaves' compiled copy, once its background compile has finished
        self.compile_error: str | None = None  # why loading that copy failed (then LightGBM, never retried)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """``Booster.predict(x)``: the lleaves-compiled trees when loaded (any batch: a server loads them,
        ``load_compiled``) or for bulk once compiled; else the numpy walk for a few rows (no import: a CLI
        question) and LightGBM's predictor for bulk."""
        bulk = len(x) > BULK_ROWS
        compiled = self.compiled() if bulk else self._compiled
        if compiled is not None:
            raw = compiled.predict(np.asarray(x, dtype=np.float64), n_jobs=self.threads if bulk else 1)
            return self._link(np.asarray(raw, dtype=np.float64).reshape(len(x), -1))
        return super().predict(x)

    def compiled(self) -> Any | None:
        """lleaves' compiled copy of these trees, loaded once its cache file exists (None before, or when
        loading it failed: ``compile_error`` says why, and LightGBM answers bulk batches instead)."""
        if self._compiled is None and self.booster_file is not None and self.compile_error is None:
            from components.serving import tree_compile

            try:
                self._compiled = tree_compile.load(self.booster_file)
            except ImportError:
                return None
            except (OSError, RuntimeError, ValueError) as exc:  # a cache file lleaves cannot load
                self.compile_error = f"{type(exc).__name__}: {exc}"
        return self._compiled

    def engine(self) -> str:
        """What answers a bulk batch now: ``lleaves``, ``LightGBM`` (and why not lleaves, when loading its
        copy failed) or ``numpy`` (no model text)."""
        if self.booster_file is None:
            return "numpy"
        if self.compiled() is not None:
            return "lleaves"
        return (
            "LightGBM" if self.compile_error is None else f"LightGBM (lleaves failed: {self.compile_error})"
        )


def flatten_folder(folder: Path) -> list[Path]:
    """Write ``model_<target>.npz`` beside each LightGBM ``model_<target>.txt`` of a tabular predictor."""
    folder = Path(folder)
    spec = json.loads((folder / "predictor.json").read_text())
    written = _native_class_model(folder) if spec.get("family") == "tabular" else []
    if spec.get("family") != "tabular" or spec.get("config", {}).get("model") != "lgbm":
        return written
    from components.serving import tree_compile

    for name in spec["model_files"].values():
        written.append(flat_trees.flatten_booster(folder / name))
        tree_compile.start_background_compile(folder / name)  # once per model, into the state folder
    return written


def _native_class_model(folder: Path) -> list[Path]:
    """The numpy TF-IDF and flat trees of the roofline-class model saved beside the trees, when a folder
    saved before they existed lacks them (``components.models.roofline_class_native``)."""
    directory = folder / "roofline_class"
    try:
        from components.models.roofline_class import MODEL_FILE, RooflineClassModel
        from components.models.roofline_class_native import native_complete, save_native
    except ImportError:
        return []
    if not (directory / MODEL_FILE).is_file():
        return []
    model = RooflineClassModel.load(directory)
    return [] if native_complete(model, directory) else save_native(model, directory)


def load_compiled(predictor: Any) -> bool:
    """Load the lleaves-compiled copy of every flat tree model of ``predictor`` whose compile has finished,
    so that every batch, a single question too, runs compiled (a long-running server calls this; a CLI
    question does not: loading costs more than walking one row). True when all are loaded."""
    flats = [m for m in getattr(predictor, "models", {}).values() if isinstance(m, FlatTrees)]
    return all(m.compiled() is not None for m in flats)


def load_flat_predictor(folder: Path) -> Any | None:
    """The tabular predictor of ``folder`` on flat trees (no LightGBM import), or None when the folder
    has no complete set of ``.npz`` files (then load it the ordinary way)."""
    folder = Path(folder)
    spec = json.loads((folder / "predictor.json").read_text())
    if spec.get("family") != "tabular" or spec.get("config", {}).get("model") != "lgbm":
        return None
    files = {t: (folder / n).with_suffix(NPZ_SUFFIX) for t, n in spec["model_files"].items()}
    if not all(p.is_file() for p in files.values()):
        return None
    from components.models.tabular import TabularPredictor
    from components.models.tabular_config import TabularConfig

    config = TabularConfig(**{"feature_set": "absolute", **spec["config"]})
    # trained_on (the leakage guard's ids) is left out: serving never evaluates, and reading it costs.
    predictor = TabularPredictor(
        config=config,
        feature_columns=list(spec["feature_columns"]),
        categories={k: list(v) for k, v in spec["categories"].items()},
        models={t: FlatTrees.load(p) for t, p in files.items()},
        classes=list(spec["classes"]),
        conformal=dict(spec["conformal"]),
        floors=dict(spec.get("floors", {})),
        target_bounds=dict(spec.get("target_bounds", {})),
        ood=dict(spec.get("ood", {})),
    )
    if (folder / "roofline_class").is_dir():
        # The whole-program roofline-class model saved beside the trees: loaded as TabularPredictor.load does.
        try:
            from components.models.roofline_class import RooflineClassModel
        except ImportError:
            return None  # a model this code cannot fully load natively: the ordinary loader decides
        predictor.class_model = RooflineClassModel.load(folder / "roofline_class")
    from components.models import with_carried

    # the op engine, runtime corrections and deployment constants a logged model carries, as load_predictor
    return with_carried(predictor, folder)
