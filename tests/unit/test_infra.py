"""infra/: every manifest parses and says what the platform relies on.

No cluster here: these check the files' structure (the YAML parses; the GPU groups are labelled by
accelerator type and may read performance counters; the compose file wires MLflow to Postgres and
MinIO and gives DVC its bucket; the worker image installs the profilers and the project).
"""

from __future__ import annotations

import json

import pytest
import yaml

from components.platform.config import PROJECT_ROOT

INFRA = PROJECT_ROOT / "infra"


@pytest.mark.parametrize("name", sorted(p.name for p in INFRA.glob("*.yaml")))
def test_every_infra_yaml_parses(name: str) -> None:
    documents = list(yaml.safe_load_all((INFRA / name).read_text()))
    assert documents and all(isinstance(d, dict) and d for d in documents), name


def test_kuberay_cluster_has_cpu_and_gpu_groups_labelled_by_accelerator_type() -> None:
    cluster = yaml.safe_load((INFRA / "kuberay.yaml").read_text())
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert cluster["spec"]["rayVersion"] == _pinned("ray")
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    assert "cpu" in groups
    gpu_groups = [g for name, g in groups.items() if name.startswith("gpu-")]
    assert len(gpu_groups) >= 2
    for group in gpu_groups:
        labels = dict(item.split("=", 1) for item in group["rayStartParams"]["labels"].split(","))
        assert labels["ray.io/accelerator-type"], group["groupName"]
        container = group["template"]["spec"]["containers"][0]
        limits = container["resources"]["limits"]
        assert "nvidia.com/gpu" in limits or "amd.com/gpu" in limits, group["groupName"]
        if "nvidia.com/gpu" in limits:  # Nsight Compute reads the performance counters
            assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"], group["groupName"]
        resources = group["rayStartParams"].get("resources")
        if resources:  # KubeRay's format: a JSON object inside a quoted string
            assert any(k.startswith("accelerator_type:") for k in json.loads(json.loads(resources)))
    assert "NVreg_RestrictProfilingToAdminUsers=0" in (INFRA / "kuberay.yaml").read_text()


def test_compose_runs_mlflow_on_postgres_and_minio_with_a_dvc_bucket() -> None:
    compose = yaml.safe_load((INFRA / "docker-compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "minio", "minio-init", "mlflow", "prefect-server"} <= set(services)
    mlflow = services["mlflow"]
    assert "postgresql://" in mlflow["command"] and "s3://" in mlflow["command"]
    assert mlflow["image"].endswith(_pinned("mlflow"))
    assert services["prefect-server"]["image"].startswith(f"prefecthq/prefect:{_pinned('prefect')}")
    assert "kernelcast-dvc" in services["minio-init"]["entrypoint"]
    assert any(str(p).startswith("9000:") for p in services["minio"]["ports"])  # the S3 API, for DVC


def test_worker_image_installs_the_profilers_and_the_project() -> None:
    recipe = (INFRA / "worker.Dockerfile").read_text()
    assert "AS nvidia" in recipe and "AS rocm" in recipe
    assert "nsight-compute" in recipe and "rocprofiler-sdk" in recipe
    assert recipe.count("pip install --no-deps -e .") == 2
    install = (INFRA / "worker-install.sh").read_text()
    assert "requirements.lock" in install and "dvc-s3==" in install


def test_prefect_yaml_schedules_the_pipeline_and_the_new_gpu_check() -> None:
    from flows.deploy import read_deployments

    specs, pull = read_deployments(INFRA / "prefect.yaml")
    by_name = {s.name: s for s in specs}
    assert by_name["weekly-retrain"].schedules[0]["cron"] == "0 3 * * 1"
    assert by_name["new-gpu-check"].entrypoint == "flows/retrain_on_new_gpu.py:retrain_on_new_gpu_flow"
    assert by_name["new-gpu-check"].schedules and by_name["weekly-retrain"].concurrency_limit == 1
    assert "stages" not in by_name["weekly-retrain"].parameters  # the stage list is dvc.yaml's
    assert {s.work_pool for s in specs} == {"kernelcast-k8s"}
    assert pull and "set_working_directory" in next(iter(pull[0]))


def _pinned(package: str) -> str:
    for line in (PROJECT_ROOT / "requirements.lock").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    raise AssertionError(f"{package} not pinned in requirements.lock")
