"""The new-GPU flow on a real multi-node Ray cluster on one machine -- the host backend stands in
for the GPU (no GPU here), so the "GPU" node is a CPU node that declares an accelerator resource.

Cluster: a head with no CPUs (it schedules, like infra/kuberay.yaml's), a node declaring
``accelerator_type:L4`` (a catalog GPU with no measurements: the stand-in for a new GPU), and a
node declaring ``accelerator_type:FAKEGPU`` (unknown to the catalog). ``retrain_on_new_gpu`` must
find L4 in the fleet, profile it on the L4 node only (the profiling task records its node id), leave
FAKEGPU alone as unknown, report spec-only quality for MI300X (on the operator's list, no node), and
then -- in a copy of the project with our 662 H100 rows as its data -- rerun the DVC data stages,
retrain, evaluate (the gate's folds as Ray tasks on the cluster) and judge the new version.
Every Ray process of this cluster is stopped by PID at the end (never ``ray stop``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.platform.config import PROJECT_ROOT
from tests.integration.test_services import _project_copy, _sh

pytestmark = pytest.mark.slow

_DRIVER = """
import json, sys
from components.platform.config import get_settings
from flows.runtime import prefect_server
from flows.retrain_on_new_gpu import retrain_on_new_gpu_flow
with prefect_server(get_settings()):
    report = retrain_on_new_gpu_flow(fleet_file=sys.argv[1], backend="host", suite="smoke", retrain=True)
print("REPORT=" + json.dumps(report, default=str))
"""


def _ray(args: list[str], env: dict[str, str]) -> str:
    ray = str(Path(sys.executable).with_name("ray"))
    done = subprocess.run([ray, *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"ray {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _stop_cluster(temp_dir: Path) -> None:
    """Stop the processes of THIS cluster only: those whose command line names its temp dir."""
    import psutil

    ours = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(temp_dir) in part for part in proc.info["cmdline"] or []):
                ours.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in ours:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(ours, timeout=15)
    for proc in alive:
        proc.kill()


@pytest.fixture
def cluster() -> Iterator[tuple[str, dict[str, str], Path]]:
    from flows.runtime import free_port

    root = Path(tempfile.mkdtemp(prefix="kcm-", dir="/tmp"))  # short: Ray's socket paths
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_TMPDIR": str(root / "ray"),
    }
    for var in ("RAY_ADDRESS", "KERNELCAST_RAY_ADDRESS", "PREFECT_API_URL", "KERNELCAST_PREFECT_API_URL"):
        env.pop(var, None)
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--temp-dir", str(root / "ray"), "--disable-usage-stats"]
    try:
        _ray(
            [
                "start",
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                "0",
                "--include-dashboard",
                "false",
                *common,
            ],
            env,
        )
        _ray(
            [
                "start",
                "--address",
                address,
                "--num-cpus",
                "2",
                "--resources",
                json.dumps({"accelerator_type:L4": 1}),
                "--node-name",
                "fake-l4",
            ],
            env,
        )
        _ray(
            [
                "start",
                "--address",
                address,
                "--num-cpus",
                "0",
                "--resources",
                json.dumps({"accelerator_type:FAKEGPU": 1}),
                "--node-name",
                "fake-unknown",
            ],
            env,
        )
        yield address, env, root
    finally:
        _stop_cluster(root)
        shutil.rmtree(root, ignore_errors=True)


def _node_ids(address: str, env: dict[str, str]) -> dict[str, str]:
    """Node name -> node id, as the cluster reports them (read in a separate driver)."""
    code = (
        f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
        "print(json.dumps({n['NodeName'] if n['NodeName'] in ('fake-l4', 'fake-unknown') else 'head': "
        "n['NodeID'] for n in ray.nodes() if n['Alive']}))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_new_gpu_flow_profiles_only_on_the_matching_node_host_backend_stands_in_for_the_gpu(
    cluster: tuple[str, dict[str, str], Path],
) -> None:
    address, ray_env, root = cluster
    nodes = _node_ids(address, ray_env)
    assert set(nodes) == {"head", "fake-l4", "fake-unknown"}
    repo = _project_copy(root / "project")  # ingest.sources cut to our own 662 H100 rows
    # The last measured unseen-GPU accuracy the flow quotes for a GPU nobody can profile.
    shutil.copytree(PROJECT_ROOT / "benchmarks" / "results", repo / "benchmarks" / "results")
    home = repo / ".kernelcast"  # dvc.yaml's paths are the default home's
    fleet_file = root / "fleet.txt"
    fleet_file.write_text("# GPUs we own but have no node for yet\nMI300X\n")
    env = {
        **ray_env,
        "KERNELCAST_HOME": str(home),
        "KERNELCAST_RAY_ADDRESS": address,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(repo),
        "PREFECT_HOME": str(home / "prefect"),
        "KERNELCAST_DATASETS_DIR": str(root / "project" / "shared" / "datasets"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow' / 'mlflow.db'}",
    }
    dvc = str(Path(sys.executable).with_name("dvc"))
    _sh(["git", "init", "-q", "-b", "main"], repo, env)
    _sh([dvc, "init", "-q"], repo, env)
    (repo / ".gitignore").write_text("__pycache__/\n/.kernelcast/\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(fleet_file)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.split("REPORT=", 1)[1])

    assert report["plan"]["to_profile"] == {"l4": [nodes["fake-l4"]]}
    assert report["plan"]["unknown"] == ["FAKEGPU"] and report["plan"]["unprofilable"] == ["mi300x"]
    [profiled] = report["profiled"]
    assert profiled["device"] == "l4" and profiled["profiled_as"] == "host"
    assert profiled["node_id"] == nodes["fake-l4"]  # recorded by the profiling task itself
    assert profiled["node_id"] not in (nodes["head"], nodes["fake-unknown"])
    assert profiled["rows"] > 0 and profiled["validation"]["rows_valid"] > 0
    run_dir = Path(profiled["run_dir"])
    assert run_dir.is_relative_to(home) and (run_dir / "manifest.json").is_file()
    quality = report["spec_only"]["mi300x"]  # what the last evaluation measured on unseen GPUs
    assert quality["source"].endswith("bench_accuracy.json") and 0 < quality["mape"] < 1
    assert "mi300x: no node to profile it on; predicted from its spec alone" in done.stdout + done.stderr

    chain = report["retrain"]  # then validate (DVC data stages), retrain, evaluate, promote
    assert [(d["stage"], d["action"]) for d in chain["data_stages"]] == [
        ("ingest", "ran"),
        ("validate", "ran"),
        ("static", "ran"),
        ("features", "ran"),
    ]
    assert chain["data_stages"][-1]["rows"] == 662
    trained = chain["trained"]["tabular"]
    assert trained["action"] == "trained" and trained["model_uri"] == "models:/kernelcast/1"
    judged = chain["evaluate_and_promote"]["tabular"]
    assert judged["evaluation"]["n"] == trained["n_test"] > 50
    promotion = judged["promotion"]
    assert promotion["version"] == "1"
    # Our H100 rows alone cannot fill the gate's other splits: the version stays challenger, and says why.
    assert not promotion["promoted"] and any("evaluation complete" in f for f in promotion["failures"])
    print(f"new-GPU flow on the 3-node cluster, end to end: {seconds:.0f} s")
