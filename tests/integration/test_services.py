"""The embedded services, for real, on throw-away state: Prefect + Ray, DVC, Great Expectations.

Each test exercises the behaviour kernelcast relies on, so it fails if the service (or our
wiring of it) is broken -- on OUR code: our ingest-validate flow really runs its tasks in Ray
workers and reports to the session server, the loopback Prefect server really starts and stops,
``dvc repro`` of our dvc.yaml really skips unchanged stages, reruns a stage whose command changed
and a clone really reproduces the data, our GX suite really names the failing rows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from components.platform.config import Settings
from tests.conftest import H100_RUN

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- Prefect + Ray


def test_ingest_validate_flow_runs_on_ray_and_is_recorded_by_the_server(
    local_ray: None, kc_settings: Settings, prefect_harness: str, tmp_path: Path
) -> None:
    """Our ingest-validate flow through the real engine: its tasks run in Ray workers (RayTaskRunner),
    write the canonical and validated tables, and the session server records every run. On the tests'
    small real subset (``H100_RUN``, 662 rows): the whole profiled-data/ folder's count is
    tests/data/test_ingest_profiled.py's, in-process."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    from flows.ingest_validate import ingest_validate_flow
    from flows.runtime import ray_task_runner

    canonical, validated = tmp_path / "canonical", tmp_path / "validated"
    report = ingest_validate_flow.with_options(task_runner=ray_task_runner(kc_settings))(
        ["kernelcast"], str(canonical), str(validated), str(tmp_path / "summary.json"), str(H100_RUN)
    )

    # the first H100 run alone: 2 x 195 CUDA-event cases + 272 Nsight Compute kernels
    assert report["ingest"]["rows_in"] == {"kernelcast": 662} and report["ingest"]["rows"] == 662
    summary = report["validate"]
    assert summary["rows_in"] == 662 == summary["rows_valid"] + summary["rows_quarantined"]
    assert len(pd.read_parquet(canonical / "measurements.parquet")) == 662
    assert len(pd.read_parquet(validated / "measurements.parquet")) == summary["rows_valid"]
    pid = summary["worker_pid"]  # the validation ran as a Ray job, not in this process
    assert pid != os.getpid() and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"), pid

    with get_client(sync_client=True) as client:
        assert str(client.api_url).rstrip("/") == prefect_harness.rstrip("/")
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["ingest-validate"])))
        task_runs = client.read_task_runs()
    assert runs and all(run.state is not None and run.state.is_completed() for run in runs)
    # Task runs are reported from inside the Ray workers, so they reached this server too.
    completed = {
        tr.name.rsplit("-", 1)[0] for tr in task_runs if tr.state is not None and tr.state.is_completed()
    }
    assert {"ingest", "validate-measurements"} <= completed, completed


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


def _sh(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "kc",
        "GIT_AUTHOR_EMAIL": "kc@localhost",
        "GIT_COMMITTER_NAME": "kc",
        "GIT_COMMITTER_EMAIL": "kc@localhost",
        **(env or {}),
    }
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


# What a checkout of the project needs to run its own dvc.yaml (data and state stay out).
_PROJECT_FILES = (
    "dvc.yaml",
    "params.yaml",
    "pyproject.toml",
    "components",
    "kernelcast",
    "flows",
    "profiled-data",
)


def _project_copy(root: Path) -> Path:
    """This project's code, dvc.yaml and params.yaml in ``root/main``, with ``ingest.sources`` cut to
    our own profiled data (662 rows) and ``../shared/datasets`` a folder of empty sources."""
    import yaml

    from components.platform.config import PROJECT_ROOT

    repo = root / "main"
    repo.mkdir(parents=True)
    for name in _PROJECT_FILES:
        source = PROJECT_ROOT / name
        if name == "profiled-data":  # the first H100 run alone: the tests' small real subset
            shutil.copytree(H100_RUN, repo / name / H100_RUN.name)
        elif source.is_dir():
            shutil.copytree(source, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, repo / name)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["ingest"]["sources"] = ["kernelcast"]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for source in ("neusight", "gpuflopbench", "kernelbench", "benchmark_hub", "pipeweave", "aiconfigurator"):
        (root / "shared" / "datasets" / source).mkdir(parents=True)
    _empty_dataset_deps(repo / "dvc.yaml", root / "shared" / "datasets")
    return repo


def _empty_dataset_deps(dvc_yaml: Path, datasets: Path) -> None:
    """Every ``${datasets}/...`` path a stage depends on, empty (a folder, or a file where the name has a
    suffix): DVC refuses a missing dependency, and the splits that read them report "no data" on empty
    ones."""
    import yaml

    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    for stage in stages.values():
        for dep in stage.get("deps", []):
            if not str(dep).startswith("${datasets}/"):
                continue
            path = datasets / str(dep).removeprefix("${datasets}/")
            if path.suffix:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            else:
                path.mkdir(parents=True, exist_ok=True)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder directly under /tmp: the stages' local Ray keeps its AF_UNIX sockets under
    ``<project>/.kernelcast/ray``, and those paths must stay below 107 bytes."""
    root = Path(tempfile.mkdtemp(prefix="kcd-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_our_dvc_pipeline_reproduces_skips_and_reruns_on_code_changes(short_tmp: Path, kc_home: Path) -> None:
    """``dvc repro`` of OUR dvc.yaml (ingest -> validate -> static -> features) on a small subset:
    every stage runs, a second repro skips them all, pushing and pulling a clone restores the data
    byte for byte, and editing a CLI command module (a code dep) reruns exactly its stage and those
    downstream of it."""
    dvc = str(Path(sys.executable).with_name("dvc"))
    tmp_path = short_tmp
    repo = _project_copy(tmp_path)
    home = repo / ".kernelcast"  # dvc.yaml's paths are the default home's
    env = {  # the stage commands run the copy's code, on the copy's params, with throw-away state
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(repo),
        "KERNELCAST_HOME": str(home),
        "RAY_TMPDIR": str(home / "ray"),
        "KERNELCAST_DATASETS_DIR": str(tmp_path / "shared" / "datasets"),
    }
    _sh(["git", "init", "-q", "-b", "main"], repo, env)
    _sh([dvc, "init", "-q"], repo, env)
    _sh([dvc, "remote", "add", "-d", "local", str(tmp_path / "remote")], repo, env)
    state = ("ray", "mlflow", "prefect", "cache", "models", "reports")  # run state, not pipeline data
    (repo / ".gitignore").write_text("__pycache__/\n" + "".join(f"/.kernelcast/{name}\n" for name in state))

    first = _sh([dvc, "repro", "features"], repo, env)
    for stage in ("ingest", "validate", "static", "features"):
        assert f"Running stage '{stage}'" in first, first
    data = repo / ".kernelcast" / "data"
    assert len(pd.read_parquet(data / "canonical" / "measurements.parquet")) == 662
    features = pd.read_parquet(data / "features" / "features.parquet")
    assert len(features) == len(pd.read_parquet(data / "validated" / "measurements.parquet")) > 600
    _sh(["git", "add", "-A"], repo, env)
    _sh(["git", "commit", "-q", "-m", "pipeline"], repo, env)
    _sh([dvc, "push", "-q"], repo, env)

    second = _sh([dvc, "repro", "features"], repo, env)
    assert "Running stage" not in second, second

    clone = tmp_path / "clone"
    _sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    _sh([dvc, "pull", "-q", "features"], clone, env)
    assert (clone / ".kernelcast/data/features/features.parquet").read_bytes() == (
        data / "features" / "features.parquet"
    ).read_bytes()

    # A change to the validate command's module (not under components/) reruns validate and the
    # stages after it, not ingest; a change to the promote command touches none of these.
    command = repo / "kernelcast" / "commands" / "validate.py"
    command.write_text(command.read_text() + "\n# edited\n")
    (repo / "kernelcast" / "commands" / "promote.py").write_text(
        (repo / "kernelcast" / "commands" / "promote.py").read_text() + "\n# edited\n"
    )
    third = _sh([dvc, "repro", "features"], repo, env)
    assert "Running stage 'validate'" in third and "Running stage 'ingest'" not in third, third
    # validate writes the same rows again, so DVC sees its output unchanged and skips what follows.
    assert "Running stage 'static'" not in third


# --------------------------------------------------------------------------- Great Expectations


def test_our_gx_suite_names_the_bad_rows_of_real_measurements(kc_home: Path) -> None:
    """Our measurement suite (``components/validation/suites.py``) through GX on real rows: the
    clean excerpt passes; each planted defect comes back as its row under the expectation we named."""
    from components.devices import load_catalog
    from components.validation.run import run_suite
    from components.validation.suites import Tolerances, add_check_columns, measurement_expectations
    from tests.unit.test_validation import PARAMS, real_excerpt

    catalog = load_catalog()
    measurements, kernels = real_excerpt()
    device_ids = sorted(str(i) for i in catalog.ids())

    def expectations() -> list:  # a GX expectation belongs to one suite: a fresh set per run
        return measurement_expectations(device_ids, Tolerances.from_params(PARAMS))

    checked = add_check_columns(measurements, catalog, kernels)
    failing, outcomes = run_suite(checked, expectations(), "measurements")
    assert failing == {} and all(o.success for o in outcomes) and len(outcomes) == len(expectations())

    bad = measurements.copy()
    bad.loc[1, "duration_us"] = -4.0
    bad.loc[4, "l2_hit_rate"] = 1.7
    bad.loc[5, "device_id"] = "no-such-gpu"
    bad.loc[7, "measurement_id"] = bad.loc[8, "measurement_id"]
    failing, outcomes = run_suite(add_check_columns(bad, catalog, kernels), expectations(), "measurements")
    found = {name: sorted(int(r) for r in rows) for name, rows in failing.items()}
    assert found["duration_us_positive"] == [1]
    assert found["l2_hit_rate_in_0_1"] == [4]
    assert found["device_id_in_catalog"] == [5]
    assert found["unique_measurement_id"] == [7, 8]  # every copy of a duplicate key
    assert not any(o.table_level for o in outcomes)
