"""`kernelcast deploy`'s registration against a real local Prefect server: the deployments of
infra/prefect.yaml with their cron schedules, on a work pool it creates; rerunning updates in place."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_deployments_register_with_their_schedules_on_a_real_server(prefect_harness: str) -> None:
    from prefect import get_client

    from flows.deploy import read_deployments, register

    specs, pull_steps = read_deployments(only=["weekly-retrain", "new-gpu-check"])
    first = register(specs, pull_steps, work_pool="kc-test-vm", path="/tmp/kc-checkout")
    again = register(specs, pull_steps, work_pool="kc-test-vm", path="/tmp/kc-checkout")

    assert [e["name"] for e in first] == [
        "kernelcast-pipeline/weekly-retrain",
        "retrain-on-new-gpu/new-gpu-check",
    ]
    assert first[0]["work_pool_created"] and not again[0]["work_pool_created"]
    assert [e["id"] for e in first] == [e["id"] for e in again]  # updated in place, not duplicated
    with get_client(sync_client=True) as client:
        assert client.read_work_pool("kc-test-vm").type == "process"
        weekly = client.read_deployment_by_name("kernelcast-pipeline/weekly-retrain")
        hourly = client.read_deployment_by_name("retrain-on-new-gpu/new-gpu-check")
    assert weekly.work_pool_name == "kc-test-vm" and weekly.entrypoint == "flows/pipeline.py:pipeline_flow"
    assert [s.schedule.cron for s in weekly.schedules] == [
        "0 3 * * 1"
    ]  # one schedule after two registrations
    assert weekly.schedules[0].schedule.timezone == "UTC" and weekly.schedules[0].active
    assert weekly.global_concurrency_limit is not None and weekly.global_concurrency_limit.limit == 1
    assert weekly.pull_steps == [
        {"prefect.deployments.steps.set_working_directory": {"directory": "/tmp/kc-checkout"}}
    ]
    assert [s.schedule.cron for s in hourly.schedules] == ["0 * * * *"]
    assert hourly.parameters["fold_splits"] == ["unseen-gpu"]
    assert "gpus" in hourly.parameter_openapi_schema["properties"]


def test_deploy_refuses_an_unknown_deployment_name() -> None:
    from flows.deploy import read_deployments

    with pytest.raises(ValueError, match=r"--name nightly: no such deployment .*weekly-retrain"):
        read_deployments(only=["nightly"])
