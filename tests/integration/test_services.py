"""The embedded services, for real, on throw-away state: Prefect + Ray, DVC, Great Expectations.

Each test exercises the behaviour kernelcast relies on, so it fails if the service (or our
wiring of it) is broken: tasks really run in Ray workers, the loopback Prefect server really
starts and stops, ``dvc repro`` really skips unchanged stages and a clone really reproduces the
data, GX really reports the failing rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from kernelcast.settings import Settings

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- Prefect + Ray


def test_square_sum_flow_runs_its_tasks_in_ray_workers(local_ray: None, kc_settings: Settings) -> None:
    from flows.smoke import run_square_sum

    values = [1, 2, 3, 4, 5, 6]
    report = run_square_sum(values, kc_settings)

    assert report["squares"] == [v * v for v in values]
    assert report["total"] == 91
    assert report["flow_pid"] == os.getpid()  # the flow itself runs in this process...
    assert os.getpid() not in report["task_pids"]  # ...its tasks do not
    for pid in set(report["task_pids"]):  # and the processes they ran in are Ray workers
        assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"), pid


def test_square_sum_flow_run_is_recorded_by_the_session_server(
    local_ray: None, kc_settings: Settings, prefect_harness: str
) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    from flows.smoke import run_square_sum

    run_square_sum([7], kc_settings)
    with get_client(sync_client=True) as client:
        assert str(client.api_url).rstrip("/") == prefect_harness.rstrip("/")
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["square-sum"])))
        task_runs = client.read_task_runs()
    assert runs and all(run.state is not None and run.state.is_completed() for run in runs)
    # Task runs are reported from inside the Ray workers, so they reached this server too.
    assert any(tr.name.startswith("square") for tr in task_runs)


def test_prefect_server_starts_on_loopback_and_stops(kc_settings: Settings) -> None:
    from prefect import flow
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.runtime import prefect_server, server_is_healthy

    @flow(name="hello-loopback")
    def hello() -> str:
        return "hello"

    # Pretend no server is configured, even when the session harness is already running.
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        with prefect_server(kc_settings) as api_url:
            assert api_url.startswith("http://127.0.0.1:")
            assert os.environ["PREFECT_API_URL"] == api_url
            assert PREFECT_API_URL.value() == api_url
            assert server_is_healthy(api_url)
            assert hello() == "hello"
        assert not server_is_healthy(api_url, timeout_s=1.0)
    assert (kc_settings.prefect_home / "prefect.db").exists()  # its state lives under KERNELCAST_HOME


# --------------------------------------------------------------------------- DVC

_PREPARE = """\
import json, sys, yaml
n = yaml.safe_load(open("params.yaml"))["prepare"]["n"]
open("raw.csv", "w").write("x\\n" + "".join(f"{i}\\n" for i in range(n)))
"""
_FEATURIZE = """\
import yaml
scale = yaml.safe_load(open("params.yaml"))["featurize"]["scale"]
rows = open("raw.csv").read().split()[1:]
open("features.csv", "w").write("x2\\n" + "".join(f"{int(r) * scale}\\n" for r in rows))
"""


def _dvc_yaml(python: str) -> str:
    return textwrap.dedent(f"""\
        stages:
          prepare:
            cmd: {python} prepare.py
            deps: [prepare.py]
            params: [prepare.n]
            outs: [raw.csv]
          featurize:
            cmd: {python} featurize.py
            deps: [featurize.py, raw.csv]
            params: [featurize.scale]
            outs: [features.csv]
        """)


def _sh(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "kc", "GIT_AUTHOR_EMAIL": "kc@localhost",
           "GIT_COMMITTER_NAME": "kc", "GIT_COMMITTER_EMAIL": "kc@localhost"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_dvc_repro_push_clone_pull_reproduces_and_skips_unchanged(tmp_path: Path, kc_home: Path) -> None:
    dvc = str(Path(sys.executable).with_name("dvc"))
    repo, remote, clone = tmp_path / "repo", tmp_path / "remote", tmp_path / "clone"
    repo.mkdir()
    _sh(["git", "init", "-q", "-b", "main"], repo)
    _sh([dvc, "init", "-q"], repo)
    _sh([dvc, "remote", "add", "-d", "local", str(remote)], repo)
    (repo / "prepare.py").write_text(_PREPARE)
    (repo / "featurize.py").write_text(_FEATURIZE)
    (repo / "params.yaml").write_text("prepare:\n  n: 50\nfeaturize:\n  scale: 3\n")
    (repo / "dvc.yaml").write_text(_dvc_yaml(sys.executable))

    first = _sh([dvc, "repro"], repo)
    assert "Running stage 'prepare'" in first and "Running stage 'featurize'" in first
    assert (repo / "features.csv").read_text().splitlines()[:3] == ["x2", "0", "3"]
    _sh(["git", "add", "-A"], repo)
    _sh(["git", "commit", "-q", "-m", "pipeline"], repo)
    _sh([dvc, "push", "-q"], repo)

    # A fresh clone has no data until `dvc pull`, which restores it byte for byte.
    _sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    assert not (clone / "features.csv").exists()
    _sh([dvc, "pull", "-q"], clone)
    for name in ("raw.csv", "features.csv"):
        assert (clone / name).read_bytes() == (repo / name).read_bytes()

    # Unchanged deps and params: nothing reruns.
    second = _sh([dvc, "repro"], repo)
    assert "Running stage" not in second
    assert "didn't change, skipping" in second

    # A changed param reruns only the stage that declares it.
    (repo / "params.yaml").write_text("prepare:\n  n: 50\nfeaturize:\n  scale: 5\n")
    third = _sh([dvc, "repro"], repo)
    assert "Running stage 'featurize'" in third and "Running stage 'prepare'" not in third
    assert (repo / "features.csv").read_text().splitlines()[:3] == ["x2", "0", "5"]


# --------------------------------------------------------------------------- Great Expectations


def _measurement_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "measurement_id": [f"m{i}" for i in range(6)],
        "device_id": ["h100-sxm"] * 3 + ["a100-sxm4-40gb"] * 3,
        "duration_us": [12.5, 3.0, 480.0, 7.25, 19.0, 1.5],
        "l2_hit_rate": [0.5, 0.9, 0.1, 0.0, 1.0, 0.75],
    })


def _validate(frame: pd.DataFrame) -> object:
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context = gx.get_context(mode="ephemeral")
    asset = context.data_sources.add_pandas("frames").add_dataframe_asset("measurements")
    batch = asset.add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(gx.ExpectationSuite(name="measurements"))
    suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="device_id"))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="duration_us", min_value=0, strict_min=True))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="l2_hit_rate", min_value=0, max_value=1))
    suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="measurement_id"))
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name="measurements", data=batch, suite=suite)
    )
    return validation.run(batch_parameters={"dataframe": frame}, result_format={"result_format": "COMPLETE"})


def test_gx_suite_passes_clean_rows_and_names_the_bad_ones(kc_home: Path) -> None:
    clean = _measurement_frame()
    assert _validate(clean).success

    bad = clean.copy()
    bad.loc[1, "duration_us"] = -4.0
    bad.loc[4, "l2_hit_rate"] = 1.7
    bad.loc[5, "device_id"] = None
    result = _validate(bad)

    assert not result.success
    failing = {
        r.expectation_config.kwargs["column"]: sorted(r.result["unexpected_index_list"])
        for r in result.results
        if not r.success
    }
    assert failing == {"duration_us": [1], "l2_hit_rate": [4], "device_id": [5]}
