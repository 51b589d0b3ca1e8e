"""What a logged model carries (``components.registry.carried``) and how its deployment answers read it:
the engines' constants copied into the predictor folder, the state folder's calibrations merged into its op
engine, the copy preferred over the package's file, and a model that predates the copy said so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.deployments.engines.base import CONSTANTS_FILE


def _predictor_with_engine(folder: Path, calibrations: dict) -> Path:
    """A saved roofline predictor with an op engine folder holding ``calibrations``."""
    from components.models.roofline import RooflinePredictor
    from components.opmodel.engine import OpEngine

    RooflinePredictor().save(folder)
    OpEngine(calibrations=calibrations).save(folder / "opmodel")
    return folder


def test_carrying_copies_the_constants_and_merges_the_state_folders_calibrations(tmp_path: Path) -> None:
    from components.models.calibration import Correction, correction_path, load_corrections
    from components.opmodel.calibrated import save_calibration
    from components.registry.carried import MANIFEST, carry_components

    own = {
        "h100-sxm": {"*": {"log_shift": 0.1, "rows": 5}},
        "a100-sxm4": {"*": {"log_shift": 0.2, "rows": 5}},
    }
    folder = _predictor_with_engine(tmp_path / "model", own)
    newer = {"*": {"log_shift": -0.3, "rows": 9}}
    save_calibration(tmp_path / "home", "a100-sxm4", newer)
    save_calibration(tmp_path / "home", "l40s", newer)
    Correction("global", "l40s", 7, global_log=0.1).save(correction_path(tmp_path / "home", "l40s"))

    manifest = carry_components(folder, tmp_path / "home")

    assert (folder / "deployments" / "constants.json").read_text() == CONSTANTS_FILE.read_text()
    engines = json.loads(CONSTANTS_FILE.read_text())["engines"]
    assert manifest["deployment_constants"]["engines"] == sorted(engines)
    merged = json.loads((folder / "opmodel" / "calibrations.json").read_text())
    # the state folder's calibration of a GPU (the newer) replaces the engine's own; the others are kept
    assert merged == {"h100-sxm": own["h100-sxm"], "a100-sxm4": newer, "l40s": newer}
    assert manifest["calibrations"]["from_state_folder"] == ["a100-sxm4", "l40s"]
    assert "not carried" in manifest["calibrations"]["after_logging"]
    # the runtime corrections, in the state folder's layout inside the model folder
    assert manifest["calibrations"]["corrected_gpus"] == ["l40s"]
    assert load_corrections(folder)["l40s"].global_log == pytest.approx(0.1)
    assert json.loads((folder / MANIFEST).read_text()) == manifest


def test_a_model_without_an_op_engine_carries_the_constants_and_says_it_has_no_engine(tmp_path: Path) -> None:
    from components.models.roofline import RooflinePredictor
    from components.registry.carried import carry_components

    RooflinePredictor().save(tmp_path / "model")
    manifest = carry_components(tmp_path / "model", tmp_path / "home")
    assert (
        manifest["calibrations"]["op_engine"] is False and manifest["calibrations"]["calibrated_gpus"] == []
    )
    assert manifest["calibrations"]["corrected_gpus"] == []
    assert (tmp_path / "model" / "deployments" / "constants.json").is_file()


def test_the_engine_reads_the_models_constants_and_names_the_file(tmp_path: Path) -> None:
    from components.deployments.engines.registry import engine_for
    from components.devices import load_catalog

    spec = load_catalog().get("h100-sxm")
    data = json.loads(CONSTANTS_FILE.read_text())
    data["engines"]["vllm"]["cost"]["base_us"] = 123.0  # a copy that differs from the package's
    data["engines"]["vllm"]["provenance"]["fitted_on"] = "the model's own fit"
    copy = tmp_path / "constants.json"
    copy.write_text(json.dumps(data))

    carried = engine_for("vllm", spec, constants=copy)
    package = engine_for("vllm", spec)
    assert carried.cost.base_us == pytest.approx(123.0) and package.cost.base_us != pytest.approx(123.0)
    assert carried.provenance.startswith("constants fitted on the model's own fit")
    assert carried.provenance.endswith(f"read from {copy}")
    assert "read from" not in package.provenance


def test_model_parts_prefer_the_carried_copy_and_say_when_a_model_predates_it(tmp_path: Path) -> None:
    from components.models import load_predictor
    from components.registry.carried import carry_components
    from components.serving.deployment_questions import PREDATES_NOTE, model_parts

    old = load_predictor(_predictor_with_engine(tmp_path / "old", {}))  # logged before models carried them
    parts = model_parts(old)
    assert parts.constants is None and parts.notes == (PREDATES_NOTE,)

    carry_components(tmp_path / "old", tmp_path / "home")
    new = load_predictor(tmp_path / "old")
    parts = model_parts(new)
    assert parts.constants == tmp_path / "old" / "deployments" / "constants.json" and parts.notes == ()
    assert not hasattr(new, "corrections_home")  # none stored in that state folder: none carried


def test_a_registered_version_shows_what_it_carries_as_tags(tmp_path: Path, monkeypatch) -> None:
    """A real sqlite MLflow registry: the version's ``carried.*`` tags say what its artifact carries."""
    from components.opmodel.calibrated import save_calibration
    from components.registry.runs import experiment_id, log_training_run
    from mlflow import MlflowClient

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    save_calibration(tmp_path / "home", "l40s", {"*": {"log_shift": -0.3, "rows": 9}})
    folder = _predictor_with_engine(tmp_path / "model", {"h100-sxm": {"*": {"log_shift": 0.1, "rows": 5}}})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = log_training_run(
        folder,
        tracking_uri=uri,
        experiment=experiment_id("carried-test", uri, str(tmp_path / "artifacts")),
        registered_model="kernelcast-carried-test",
        params={},
        metrics={},
        tags={"split": "unseen-kernel"},
        artifacts=[],
        register=True,
        family="roofline",
    )
    tags = MlflowClient(uri).get_model_version("kernelcast-carried-test", run.version).tags
    engines = sorted(json.loads(CONSTANTS_FILE.read_text())["engines"])
    assert tags["carried.deployment_constants"] == "deployments/constants.json"
    assert tags["carried.deployment_engines"] == ",".join(engines)
    assert tags["carried.op_engine"] == "true"
    assert tags["carried.calibrated_gpus"] == "h100-sxm,l40s"  # the engine's own and the state folder's
    assert tags["carried.corrected_gpus"] == "none"
    assert {f"carried.fitted_on.{e}" for e in engines} <= set(tags)
    assert tags["split"] == "unseen-kernel"


def test_model_roofline_answers_deployments_with_the_roofline_not_the_state_folders_engine() -> None:
    """``--model roofline`` carries no op engine: its deployment op times are the training-free roofline's
    (None would hand the question to the state folder's champion engine)."""
    import numpy as np

    from components.deployments.ops import roofline_op_time
    from components.devices import load_catalog
    from components.serving.deployment_questions import model_parts
    from components.serving.models import load_model

    parts = model_parts(load_model("roofline").predictor)
    assert parts.op_time is not None
    spec = load_catalog().get("h100-sxm")
    shape = {"m": np.array([64.0, 4096.0]), "n": np.array([8192.0, 8192.0]), "k": np.array([8192.0, 8192.0])}
    np.testing.assert_array_equal(
        parts.op_time("gemm", "bf16", shape, spec), roofline_op_time("gemm", "bf16", shape, spec)
    )
