"""The VS Code extension (extensions/vscode) builds and passes its own tests, run from pytest so CI
exercises them: `npm ci && npm run build && npm test` (Node's test runner). Its integration tests
spawn a real `kernelcast serve --model roofline` from this venv and stop its process group.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "extensions" / "vscode"
# npm ci (cached) ~5 s, tsc ~5 s, tests ~30 s on a loaded 2-core box; a hang must not stall CI.
STEP_TIMEOUT_S = 240


def _run(cmd: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        cmd, cwd=EXTENSION, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, (
        f"`{' '.join(cmd)}` in {EXTENSION} exited {result.returncode}:\n{output[-6000:]}"
    )
    return output


@pytest.mark.slow
def test_vscode_extension_builds_and_its_node_tests_pass_against_a_real_server() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(
            "node/npm are not installed on this machine: "
            "the VS Code extension (extensions/vscode) is built and tested with them"
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= 20, (
        f"the extension's tests need Node >= 20 (fetch, node --test); found {version}"
    )
    kernelcast = Path(sys.executable).parent / "kernelcast"
    assert kernelcast.exists(), f"{kernelcast} missing: install the project (pip install -e .) into this venv"
    env = {
        **os.environ,
        "KERNELCAST_BIN": str(kernelcast),
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        "npm_config_update_notifier": "false",
    }

    _run([npm, "ci"], env)
    _run([npm, "run", "build"], env)
    output = _run([npm, "test"], env)

    summary = re.findall(r"^# (pass|fail|skipped|cancelled) (\d+)$", output, re.M)
    counts = {key: int(value) for key, value in summary}
    assert counts.get("fail") == 0 and counts.get("cancelled") == 0, output[-6000:]
    assert counts.get("skipped") == 0, f"no extension test may be skipped:\n{output[-6000:]}"
    assert counts.get("pass", 0) >= 40, f"fewer extension tests ran than exist:\n{output[-6000:]}"
    assert "against a real kernelcast server" in output, "the real-server tests did not run"
