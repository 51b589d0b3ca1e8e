"""What a logged model carries besides its predictor, so ``models:/kernelcast@champion`` answers every
question form from its artifact alone, with no state folder beside it.

Written into the predictor folder just before it is logged (``mlflow_registry.log_predictor``), so the
folder served locally and the registered artifact answer alike:

- ``deployments/constants.json``: the serving engines' fitted constants (a copy of
  ``components/deployments/engines/constants.json``, with its provenance); deployment answers read this copy
  (``components.models.load_predictor`` names it on the predictor as ``deployment_constants``);
- ``opmodel/calibrations.json``: the op engine's per-GPU calibrations, merged with those ``kernelcast
  calibrate`` stored in the state folder before the model was logged (a GPU's state-folder calibration,
  the newer, replaces the engine's own);
- ``calibration/<device>.json``: the per-GPU runtime corrections ``kernelcast calibrate`` stored in the state
  folder before the model was logged (``components.models.calibration``; serving applies them, a service's
  own state folder's over them);
- a calibration made after the model was logged is in neither: it reaches a champion as a new model version
  (the next ``kernelcast train`` logs one carrying it), through the gate like any other change of answers;
- ``carried.json``: what the two above hold (file, provenance, calibrated GPUs), for a reviewer and a test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write_text

MANIFEST = "carried.json"
ENGINE_DIR = "opmodel"
CALIBRATIONS_FILE = "calibrations.json"
AFTER_LOGGING = (
    "calibrations made after this model was logged are not carried: they reach a champion as a new version "
    "(kernelcast train, then the gate)"
)


def _carry_constants(predictor_dir: Path, source: Path) -> dict[str, Any]:
    """Copy the engines' constants file into the predictor folder; its provenance per engine."""
    from components.models import DEPLOYMENT_CONSTANTS

    if not source.is_file():
        return {"file": None, "note": f"no constants file at {source}: engines answer with their defaults"}
    text = source.read_text()
    data = json.loads(text)
    atomic_write_text(predictor_dir / DEPLOYMENT_CONSTANTS, text)
    fitted = {name: e.get("provenance", {}).get("fitted_on") for name, e in data.get("engines", {}).items()}
    return {"file": str(DEPLOYMENT_CONSTANTS), "engines": sorted(fitted), "fitted_on": fitted}


def _carry_calibrations(predictor_dir: Path, state_dir: Path) -> dict[str, Any]:
    """Merge the state folder's op-engine calibrations into the predictor's op engine; the GPUs it holds."""
    from components.opmodel.calibrated import load_calibrations

    engine = predictor_dir / ENGINE_DIR
    if not (engine / "engine.json").is_file():
        return {"op_engine": False, "calibrated_gpus": [], "note": "no op engine in this model"}
    path = engine / CALIBRATIONS_FILE
    own = json.loads(path.read_text()) if path.is_file() else {}
    from_state = load_calibrations(state_dir)
    merged = {**own, **from_state}
    atomic_write_text(path, json.dumps(merged, indent=1, sort_keys=True))
    return {
        "op_engine": True,
        "calibrated_gpus": sorted(merged),
        "from_state_folder": sorted(from_state),
    }


def _carry_corrections(predictor_dir: Path, state_dir: Path) -> list[str]:
    """Copy the state folder's per-GPU runtime corrections into the predictor folder; their GPUs."""
    from components.models import CORRECTIONS_DIR

    folder = Path(state_dir) / CORRECTIONS_DIR
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in files:
        atomic_write_text(predictor_dir / CORRECTIONS_DIR / path.name, path.read_text())
    return [path.stem for path in files]


def carry_components(predictor_dir: Path, state_dir: Path, constants: Path | None = None) -> dict[str, Any]:
    """Write the deployment constants and the calibrations into ``predictor_dir`` and the manifest saying
    what they are; return the manifest. ``constants``: the engines' constants file (the package's)."""
    from components.deployments.engines.base import CONSTANTS_FILE

    predictor_dir = Path(predictor_dir)
    manifest = {
        "deployment_constants": _carry_constants(predictor_dir, Path(constants or CONSTANTS_FILE)),
        "calibrations": {
            **_carry_calibrations(predictor_dir, Path(state_dir)),
            "corrected_gpus": _carry_corrections(predictor_dir, Path(state_dir)),
            "after_logging": AFTER_LOGGING,
        },
    }
    atomic_write_text(predictor_dir / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def version_tags(predictor_dir: Path) -> dict[str, str]:
    """The manifest of ``predictor_dir`` (written by :func:`carry_components` when it was logged) as registry
    model-version tags, ``carried.*``: what a reviewer sees on ``models:/kernelcast@champion`` in the UI
    without opening the artifact; nothing when there is no manifest."""
    path = Path(predictor_dir) / MANIFEST
    if not path.is_file():
        return {}
    manifest = json.loads(path.read_text())
    constants = manifest.get("deployment_constants", {})
    calibrations = manifest.get("calibrations", {})

    def listed(values: Any) -> str:
        return ",".join(values) if values else "none"

    tags = {
        "carried.deployment_constants": str(constants.get("file") or constants.get("note") or "none"),
        "carried.deployment_engines": listed(constants.get("engines")),
        "carried.op_engine": str(bool(calibrations.get("op_engine"))).lower(),
        "carried.calibrated_gpus": listed(calibrations.get("calibrated_gpus")),
        "carried.corrected_gpus": listed(calibrations.get("corrected_gpus")),
    }
    for engine, fitted_on in sorted((constants.get("fitted_on") or {}).items()):
        tags[f"carried.fitted_on.{engine}"] = str(fitted_on)
    return tags
