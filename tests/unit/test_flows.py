"""Every flow's tasks through ``task.fn()``: the stage functions on a small real input, no Prefect server.

The input is our first H100 run (``profiled-data/h100-sxm-2026-11-22``, 662 rows) and one gpuFLOPBench CUDA
program; each stage's output feeds the next (ingest -> validate -> static -> features -> train ->
evaluate -> promote), on a throw-away KERNELCAST_HOME with a sqlite MLflow store. No Ray: the
tabular fit runs in-process (``use_ray=False``) and the feature table in one chunk. The run through
the real Prefect engine (and Ray) is in ``tests/integration/test_services.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from components.platform.config import PROJECT_ROOT, Settings, load_params
from tests.conftest import H100_RUN

DATASETS = PROJECT_ROOT.parent / "shared" / "datasets"


@dataclass
class Chain:
    settings: Settings
    params: dict
    root: Path

    @property
    def validated(self) -> Path:
        return self.settings.data_dir / "validated"


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    root = tmp_path_factory.mktemp("flows")
    patch = pytest.MonkeyPatch()
    patch.setenv("KERNELCAST_HOME", str(root / "home"))
    patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    patch.setenv("KERNELCAST_DATASETS_DIR", str(DATASETS))
    for var in ("KERNELCAST_RAY_ADDRESS", "KERNELCAST_MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        patch.delenv(var, raising=False)
    try:
        from components.platform.runtime import configure_environment

        settings = Settings()
        configure_environment(settings)
        yield Chain(settings, load_params(settings.params_file), root)
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def ingested(chain: Chain):
    from flows.ingest_validate import ingest_inputs, ingest_task

    inputs = ingest_inputs(chain.settings, ["kernelcast"])
    return ingest_task.fn(dataclasses.replace(inputs, from_location=str(H100_RUN)))


@pytest.fixture(scope="module")
def validated(chain: Chain, ingested) -> dict:
    from flows.validate import validation_job

    return validation_job(
        str(ingested.out_dir),
        str(chain.validated),
        str(chain.settings.params_file),
        str(chain.root / "validation-summary.json"),
        None,
    )


@pytest.fixture(scope="module")
def features(chain: Chain, validated: dict):
    from flows.features import feature_inputs, features_task

    inputs = feature_inputs(
        chain.validated, chain.settings.data_dir / "canonical", None, chain.root / "features.parquet", 1
    )
    return features_task.fn(inputs, chain.settings)


@pytest.fixture(scope="module")
def trained(chain: Chain, features):
    from components.training.stage import TrainInputs
    from flows.train import train_task

    inputs = TrainInputs(
        features_file=features.out_file,
        family="tabular",
        split="unseen-kernel",
        out_dir=chain.root / "predictor",
        use_ray=False,
    )
    return train_task.fn(inputs, chain.settings, chain.params)


def test_ingest_task_writes_the_canonical_tables(chain: Chain, ingested) -> None:
    assert ingested.rows_in == {"kernelcast": 662} and ingested.rows == 662
    assert ingested.out_dir == chain.settings.data_dir / "canonical"  # the default under KERNELCAST_HOME
    assert ingested.unknown_devices == []
    measurements = pd.read_parquet(ingested.out_dir / "measurements.parquet")
    assert len(measurements) == 662 and measurements["measurement_id"].is_unique
    assert json.loads((ingested.out_dir / "summary.json").read_text())["by_source"]["kernelcast"]


def test_ingest_task_names_a_missing_source_directory(chain: Chain, tmp_path: Path) -> None:
    from components.ingest.stage import IngestInputs
    from flows.ingest_validate import ingest_task

    inputs = IngestInputs(("neusight",), tmp_path / "out", tmp_path / "no-datasets", tmp_path / "cache")
    with pytest.raises(ValueError, match=r"neusight: source directory not found: .*no-datasets/neusight"):
        ingest_task.fn(inputs)
    assert not (tmp_path / "out").exists()


def test_validation_job_is_the_validate_stage(chain: Chain, validated: dict) -> None:
    assert validated["rows_in"] == 662 == validated["rows_valid"] + validated["rows_quarantined"]
    assert validated["passed"] and validated["expectations_evaluated"] > 10
    assert json.loads((chain.root / "validation-summary.json").read_text())["rows_in"] == 662


def test_static_task_compiles_a_real_cuda_program(tmp_path: Path) -> None:
    from components.features.stage import StaticInputs
    from flows.features import static_task

    kernels = pd.DataFrame(
        {
            "kernel_id": ["k-adam"],
            "source": ["gpuflopbench"],
            "language": ["cuda"],
            "program": ["adam-cuda"],
            "op": ["adam"],
        }
    )
    kernels.to_parquet(tmp_path / "kernels.parquet")
    result = static_task.fn(
        StaticInputs(tmp_path / "kernels.parquet", tmp_path / "static" / "static.parquet", DATASETS, "sm_90")
    )
    table = pd.read_parquet(result.out_file)
    assert result.kernels == 1 and table["kernel_id"].tolist() == ["k-adam"]
    assert result.features == table.shape[1] - 1 > 5
    assert table.filter(like="s_").notna().any(axis=None)


def test_features_task_builds_one_row_per_valid_measurement(features, validated: dict) -> None:
    table = pd.read_parquet(features.out_file)
    assert features.rows == len(table) == validated["rows_valid"]
    assert features.columns == table.shape[1] and any(c.startswith("f_") for c in table.columns)
    assert int(features.coverage["rows"].sum()) == features.rows


def test_train_task_logs_registers_and_writes_one_registration(chain: Chain, trained) -> None:
    from components.registry.runs import read_registration
    from flows.train import summary

    assert trained.version is not None and trained.model_uri == f"models:/kernelcast/{trained.version}"
    registration = read_registration(trained.registration_file)
    assert registration.version == trained.version and registration.run_id == trained.run_id
    assert Path(registration.predictor_dir) == chain.root / "predictor" and registration.family == "tabular"
    assert trained.report["n"] > 50 and 0 < trained.metrics["runtime_mape"] < 1
    assert summary(trained)["runtime_mape"] == trained.metrics["runtime_mape"]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=chain.settings.tracking_uri())
    version = client.get_model_version("kernelcast", trained.version)
    assert version.tags["family"] == "tabular" and version.tags["split"] == "unseen-kernel"
    assert client.get_run(trained.run_id).data.metrics["runtime_mape"] == pytest.approx(
        trained.metrics["runtime_mape"]
    )


def test_evaluate_task_scores_the_trained_predictor_like_training_did(chain: Chain, trained) -> None:
    from components.evaluation.stage import EvaluateInputs
    from flows.evaluate_and_promote import evaluate_task

    out = chain.root / "eval" / "tabular.json"
    result = evaluate_task.fn(
        EvaluateInputs(
            model=str(trained.predictor_dir),
            out_file=out,
            split="unseen-kernel",
            features_file=trained_features(chain),
            log=False,
        ),
        chain.settings,
        chain.params,
    )
    assert result.run_id is None and json.loads(out.read_text()) == result.report
    assert result.report["targets"]["duration_us"]["mape"] == pytest.approx(trained.metrics["runtime_mape"])


def test_evaluate_task_ingests_a_source_through_the_stage_functions(chain: Chain, trained) -> None:
    from components.evaluation.stage import EvaluateInputs
    from flows.evaluate_and_promote import evaluate_task

    inputs = EvaluateInputs(
        model=str(trained.predictor_dir),
        out_file=chain.root / "eval" / "fresh.json",
        source="profiled",
        from_dir=H100_RUN,
        log=False,
    )
    result = evaluate_task.fn(inputs, chain.settings, chain.params)
    assert result.ingested_rows == 662 and result.quarantined == 0
    # Every row it trained on is excluded; the rest are the unseen-kernel test side again.
    assert result.report["split"] == "all" and result.report["excluded_seen"] == len(trained_rows(trained))
    assert result.report["n"] == trained.report["n"]


def test_promote_task_gates_the_registered_version(chain: Chain, trained) -> None:
    import copy

    from components.evaluation.stage import EvaluateInputs
    from components.registry.promote import PromoteInputs, gate_thresholds
    from flows.evaluate_and_promote import evaluate_task, promote_task

    report = chain.root / "eval" / "promotion.json"
    inputs = PromoteInputs(
        tracking_uri=chain.settings.tracking_uri(), registration=trained.registration_file, report=report
    )
    # The project's gate names splits this one-GPU table cannot build: a partial evaluation never promotes.
    gate = EvaluateInputs(
        model="",
        out_file=chain.root / "eval" / "gate.json",
        gate=True,
        registration=trained.registration_file,
        features_file=trained_features(chain),
    )
    partial = evaluate_task.fn(gate, chain.settings, chain.params)
    assert partial.report["complete"] is False and partial.report["splits"]["unseen-kernel"]["status"] == "ok"
    result = promote_task.fn(inputs, gate_thresholds(chain.params))
    assert not result.promoted and not result.rules[1].passed  # [identity, completeness, ...]
    assert json.loads(report.read_text()) == result.to_json()

    # The same version under a gate of the unseen-kernel split alone (the project's bounds for it).
    params = copy.deepcopy(chain.params)
    params["register"]["splits"] = {"unseen-kernel": chain.params["register"]["splits"]["unseen-kernel"]}
    params["register"]["guarded"] = []
    evaluate_task.fn(gate, chain.settings, params)
    result = promote_task.fn(inputs, gate_thresholds(params))
    bounds = params["register"]["splits"]["unseen-kernel"]
    passes = (
        trained.metrics["runtime_mape"] <= bounds["max_runtime_mape"]
        and trained.metrics["within_10"] >= bounds["min_within_10"]
        and trained.metrics["duration_us_coverage"] >= bounds["min_duration_us_coverage"]
    )
    assert result.version == trained.version and result.promoted == passes, [r.line() for r in result.rules]
    again = promote_task.fn(inputs, gate_thresholds(params))
    assert not again.promoted and (again.reason == "already champion") == passes


def test_promote_stage_refuses_conflicting_or_missing_inputs(chain: Chain, tmp_path: Path) -> None:
    from components.registry.promote import PromoteInputs, gate_thresholds, promote_stage

    uri = chain.settings.tracking_uri()
    with pytest.raises(ValueError, match="exactly one of"):
        promote_stage(PromoteInputs(tracking_uri=uri), {"max_runtime_mape": 0.3})
    with pytest.raises(FileNotFoundError, match="registration file not found"):
        promote_stage(
            PromoteInputs(tracking_uri=uri, registration=tmp_path / "none.json"), {"max_runtime_mape": 0.3}
        )
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON"):
        promote_stage(
            PromoteInputs(tracking_uri=uri, registration=tmp_path / "bad.json"), {"max_runtime_mape": 0.3}
        )
    with pytest.raises(ValueError, match="refusing to promote without a gate"):
        gate_thresholds({"train": {}})


def test_io_retry_policy_retries_transient_errors_only() -> None:
    from prefect.states import Completed, Failed

    from flows.retry import transient_only

    assert transient_only(None, None, Failed(data=ConnectionResetError("peer reset")))
    assert transient_only(None, None, Failed(data=TimeoutError("slow disk")))
    assert not transient_only(None, None, Failed(data=FileNotFoundError("no such file")))
    assert not transient_only(None, None, Failed(data=ValueError("unknown source 'x'")))
    assert not transient_only(None, None, Completed(data=1))


def trained_features(chain: Chain) -> Path:
    return chain.root / "features.parquet"


def trained_rows(trained) -> set[str]:
    from components.models import load_predictor

    return set(load_predictor(trained.predictor_dir).trained_on)


def test_every_deployment_entrypoint_is_a_flow_of_ours() -> None:
    """infra/prefect.yaml names flows that exist (a removed flow must take its deployment with it)."""
    import importlib

    import yaml
    from prefect import Flow

    deployments = yaml.safe_load((PROJECT_ROOT / "infra" / "prefect.yaml").read_text())["deployments"]
    assert len(deployments) >= 5
    for deployment in deployments:
        path, _, name = deployment["entrypoint"].partition(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert isinstance(getattr(module, name), Flow), deployment["entrypoint"]


# --------------------------------------------------------------------------- orchestration


def test_stage_graph_is_read_from_dvc_yaml_in_dependency_order(tmp_path: Path) -> None:
    from components.pipeline.graph import StageGraphError, read_stages, select_stages

    stages = read_stages(PROJECT_ROOT / "dvc.yaml")
    names = [s.name for s in stages]
    assert names == ["ingest", "validate", "static", "features", "train", "evaluate", "register"]
    by_name = {s.name: s for s in stages}
    assert set(by_name["features"].upstream) == {"ingest", "validate", "static"}
    assert ".kernelcast/data/eval/promotion.json" in by_name["register"].outs
    assert select_stages(PROJECT_ROOT / "dvc.yaml", "train") == ["train", "evaluate", "register"]
    assert select_stages(PROJECT_ROOT / "dvc.yaml", only=["register", "ingest"]) == ["ingest", "register"]
    with pytest.raises(ValueError, match=r"--from-stage trian: unknown stage; dvc.yaml has ingest, "):
        select_stages(PROJECT_ROOT / "dvc.yaml", "trian")
    # A stage added to dvc.yaml is placed after what it reads, whatever its position in the file.
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  b:\n    cmd: x\n    deps: [out/a]\n    outs: [out/b]\n"
        "  a:\n    cmd: y\n    outs: [out/a]\n"
    )
    assert [s.name for s in read_stages(tmp_path / "dvc.yaml")] == ["a", "b"]
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  b:\n    cmd: x\n    deps: [out/a]\n    outs: [out/b]\n"
        "  a:\n    cmd: y\n    deps: [out/b]\n    outs: [out/a]\n"
    )
    with pytest.raises(StageGraphError, match="stages a, b depend on each other in a cycle"):
        read_stages(tmp_path / "dvc.yaml")


def test_new_gpu_flow_reruns_exactly_the_data_stages_train_reads() -> None:
    from flows.retrain_on_new_gpu import data_stages

    assert data_stages(PROJECT_ROOT) == ["ingest", "validate", "static", "features"]


_CRASH_AFTER_FEATURES = """
import sys, threading
from flows.pipeline import _inject_fault

def answer():
    sys.stdin.readline()
    print("alive", flush=True)

threading.Thread(target=answer, daemon=True).start()
print("at the crash point", flush=True)
_inject_fault("features")
print("survived", flush=True)
"""


def test_an_injected_crash_waits_for_its_release_file(tmp_path: Path) -> None:
    """The e2e crash test's explicit event: the run dies (SIGKILL) right after the stage, but only once
    the release file exists, so a second run started meanwhile always meets a live lock holder."""
    import os
    import signal
    import subprocess
    import sys

    from flows.pipeline import FAULT_ENV, HOLD_CRASH_ENV

    release = tmp_path / "crash.release"
    env = {**os.environ, FAULT_ENV: "features", HOLD_CRASH_ENV: str(release), "PYTHONPATH": str(PROJECT_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASH_AFTER_FEATURES],
        cwd=PROJECT_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "at the crash point"
        child.stdin.write("ping\n")
        child.stdin.flush()
        # Held at the crash point (no release file yet): still alive to answer; a killed run answers nothing.
        assert child.stdout.readline().strip() == "alive"
    finally:
        release.touch()
    out, _ = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL and "simulate a crash" in out and "survived" not in out


def test_fleet_plan_profiles_gpus_with_a_node_and_reports_the_rest() -> None:
    from components.devices import load_catalog
    from components.pipeline.fleet import FleetNode, nodes_from_ray, plan_new_gpus

    # ray.nodes() entries as Ray 2.60 returns them (the keys the plan reads).
    nodes = nodes_from_ray(
        [
            {"NodeID": "n-head", "Alive": True, "Resources": {"CPU": 2.0}},
            {
                "NodeID": "n-l4",
                "Alive": True,
                "Resources": {"CPU": 1.0, "GPU": 1.0, "accelerator_type:L4": 1.0},
            },
            {"NodeID": "n-dead", "Alive": False, "Resources": {"accelerator_type:A10G": 1.0}},
            {
                "NodeID": "n-h100",
                "Alive": True,
                "Resources": {"accelerator_type:H100": 1.0},
                "Labels": {"ray.io/accelerator-type": "H100"},
            },
            {"NodeID": "n-odd", "Alive": True, "Resources": {"accelerator_type:FAKEGPU": 1.0}},
        ]
    )
    assert [(n.accelerator, n.node_id) for n in nodes] == [
        ("L4", "n-l4"),
        ("H100", "n-h100"),
        ("FAKEGPU", "n-odd"),
    ]
    plan = plan_new_gpus(load_catalog(), [*nodes, FleetNode("MI300X", None)], {"h100-sxm"}, ["H200"])
    assert list(plan.to_profile) == ["l4"] and plan.to_profile["l4"][0].node_id == "n-l4"
    assert plan.unprofilable == ["mi300x", "h200"]  # listed, no node of that type, no data
    assert plan.unknown == ["FAKEGPU"] and plan.measured == ["h100-sxm"]


def test_family_inputs_hash_changes_with_the_features_or_the_familys_params(tmp_path: Path) -> None:
    from components.pipeline.inputs import family_inputs_hash, is_current, write_stamp

    features = tmp_path / "features.parquet"
    pd.DataFrame({"x": [1, 2]}).to_parquet(features)
    params = {"train": {"seed": 1, "tabular": {"num_leaves": 31}, "llm": {"lr": 0.1}}}
    base = family_inputs_hash(features, params, "tabular", "unseen-kernel")
    other_family = {"train": {**params["train"], "llm": {"lr": 0.2}}}
    assert family_inputs_hash(features, other_family, "tabular", "unseen-kernel") == base  # not its keys
    assert family_inputs_hash(features, other_family, "llm", "unseen-kernel") != family_inputs_hash(
        features, params, "llm", "unseen-kernel"
    )
    changed = {"train": {**params["train"], "tabular": {"num_leaves": 15}}}
    assert family_inputs_hash(features, changed, "tabular", "unseen-kernel") != base
    assert family_inputs_hash(features, params, "tabular", "random") != base
    out = tmp_path / "model"
    out.mkdir()
    write_stamp(out, base, version="models:/kernelcast/3")
    assert not is_current(out, base)  # no registration.json: the training did not finish
    (out / "registration.json").write_text("{}")
    assert is_current(out, base)
    pd.DataFrame({"x": [1, 3]}).to_parquet(features)
    assert not is_current(out, family_inputs_hash(features, params, "tabular", "unseen-kernel"))


def test_spec_only_quality_quotes_the_last_unseen_gpu_evaluation(tmp_path: Path) -> None:
    from flows.retrain_on_new_gpu import BENCH_REPORT, spec_only_quality

    settings = Settings(home=tmp_path)
    committed = json.loads(BENCH_REPORT.read_text())
    expected = next(
        r["ours"]
        for r in committed["rows"]
        if r["split"] == "unseen-gpu"
        and r["family"] == "tabular"
        and r["target"] == "duration_us"
        and r["metric"] == "mape"
    )
    quality = spec_only_quality(settings)
    assert quality is not None and quality["source"] == str(BENCH_REPORT)
    assert quality["family"] == "tabular" and quality["mape"] == expected  # the best family's figure
    # A later fold evaluation in the state folder takes precedence over the committed benchmark.
    rows = [
        {
            "split": "unseen-gpu",
            "family": "tabular",
            "target": "duration_us",
            "scope": "",
            "metric": m,
            "ours": v,
            "n": 40,
        }
        for m, v in (("mape", 0.5), ("within_10", 0.1))
    ]
    settings.reports_dir.mkdir(parents=True)
    (settings.reports_dir / "evaluation-folds.json").write_text(json.dumps({"rows": rows}))
    assert spec_only_quality(settings) == {
        "family": "tabular",
        "n": 40,
        "mape": 0.5,
        "within_10": 0.1,
        "source": str(settings.reports_dir / "evaluation-folds.json"),
    }


def test_a_failing_stage_stops_the_chain_with_its_name(tmp_path: Path) -> None:
    from flows.pipeline import StageFailed, reproduce_stage

    (tmp_path / "dvc.yaml").write_text('stages:\n  broken:\n    cmd: python -c "raise SystemExit(3)"\n')
    import subprocess

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(
        [str(Path(__import__("sys").executable).with_name("dvc")), "init", "-q"], cwd=tmp_path, check=True
    )
    with pytest.raises(
        StageFailed, match=r"stage 'broken' failed \(exit \d+\); later stages not run"
    ) as caught:
        reproduce_stage.fn("broken", str(tmp_path))
    assert caught.value.stage == "broken" and "exited with 3" in caught.value.tail, caught.value.tail


def test_retrain_trains_changed_families_once_and_skips_them_after(chain: Chain, features) -> None:
    from flows.retrain import family_out_dir, retrain_families
    from flows.train import train_task

    def run(params: dict) -> dict:
        return retrain_families(
            chain.settings,
            params,
            ["tabular"],
            "unseen-kernel",
            features.out_file,
            False,
            False,
            train_task.fn,
        )

    first = run(chain.params)
    assert first["tabular"]["action"] == "trained" and first["tabular"]["model_uri"].startswith(
        "models:/kernelcast/"
    )
    assert (family_out_dir(chain.settings, "tabular", "unseen-kernel") / "inputs.json").is_file()
    assert run(chain.params)["tabular"]["action"] == "skipped"  # nothing changed: no second version
    changed = {
        **chain.params,
        "train": {
            **chain.params["train"],
            "tabular": {**chain.params["train"]["tabular"], "n_estimators": 50},
        },
    }
    again = run(changed)
    assert (
        again["tabular"]["action"] == "trained"
        and again["tabular"]["model_uri"] != first["tabular"]["model_uri"]
    )


def test_deploy_and_pipeline_commands_fail_in_one_clear_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from flows.runtime import free_port

    kernelcast = str(Path(sys.executable).with_name("kernelcast"))
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home")}
    env.pop("PREFECT_API_URL", None)
    env.pop("KERNELCAST_PREFECT_API_URL", None)
    port = free_port()  # nothing listens there
    deploy = subprocess.run(
        [kernelcast, "deploy", "--api-url", f"http://127.0.0.1:{port}/api"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deploy.returncode == 2 and "Traceback" not in deploy.stderr
    assert (
        deploy.stderr.strip()
        == f"error: --api-url http://127.0.0.1:{port}/api: no Prefect server answers there"
    )
    pipeline = subprocess.run(
        [kernelcast, "pipeline", "--from-stage", "trian"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pipeline.returncode == 2 and pipeline.stderr.startswith(
        "error: --from-stage trian: unknown stage;"
    )
