"""Opt-in: a screenshot of the MLflow UI, as a reviewer opens it, in a real (headless) browser.

Starts ``kernelcast mlflow-ui`` on a state folder (default ``$KERNELCAST_HOME``: run ``make pipeline`` or
``kernelcast pipeline`` there first), waits for it to serve, asks the tracking API which runs it holds, and
has headless Chromium load the page and save a PNG (default ``docs/img/mlflow-ui.png``):

- ``--page runs`` (default): the experiment ``kernelcast``'s run list, nested runs under their pipeline;
- ``--page run``: the newest pipeline parent run that trained (its params, tags, child runs);
- ``--page train``: the newest train stage run (datasets it read, params, metrics, its component runs);
- ``--page model``: the registered model ``kernelcast`` (versions, the champion alias).

Needs ``chromium`` (Debian: ``apt-get install -y chromium``); the test suite never does. Usage::

    KERNELCAST_HOME=.kernelcast python benchmarks/mlflow_ui_screenshot.py --out docs/img/mlflow-ui.png
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "kernelcast"
# The run a page shows: pipeline parents carry the stage list (kc.stages), stage runs their stage (kc.stage).
RUN_FILTERS = {"run": "tags.`kc.stages` LIKE '%train%'", "train": "tags.`kc.stage` = 'train'"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, timeout: float = 5.0, body: dict | None = None) -> dict:
    """GET ``url`` (POST ``body`` as JSON when given) on the loopback tracking server."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _wait_ready(base: str, server: subprocess.Popen, limit_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if server.poll() is not None:
            raise SystemExit(f"kernelcast mlflow-ui exited ({server.returncode}) before serving")
        try:
            _get(f"{base}/api/2.0/mlflow/experiments/search?max_results=1", timeout=2)
            return time.monotonic() - started
        except OSError:
            time.sleep(0.25)
    raise SystemExit(f"kernelcast mlflow-ui did not serve within {limit_s:.0f} s")


def _page_url(base: str, page: str) -> str:
    """The UI route of ``page``, from what the tracking API says exists (one clear error when it does not)."""
    name = urllib.parse.quote(EXPERIMENT)
    try:
        found = _get(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}")
    except OSError:
        raise SystemExit(f"no experiment {EXPERIMENT!r} in this store: run the pipeline first") from None
    eid = found["experiment"]["experiment_id"]
    if page == "runs":
        return f"{base}/#/experiments/{eid}/runs"
    if page == "model":
        return f"{base}/#/models/{EXPERIMENT}"
    query = {
        "experiment_ids": [eid],
        "filter": RUN_FILTERS[page],
        "order_by": ["attributes.start_time DESC"],
        "max_results": 1,
    }
    runs = _get(f"{base}/api/2.0/mlflow/runs/search", body=query).get("runs") or []
    if not runs:
        raise SystemExit(f"no run matches {RUN_FILTERS[page]} in this store: run `kernelcast pipeline` first")
    return f"{base}/#/experiments/{eid}/runs/{runs[0]['info']['run_id']}"


def screenshot(url: str, out: Path, size: str, wait_ms: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install -y chromium)")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [
        browser,
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for Chromium's sandbox
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={size}",
        f"--virtual-time-budget={wait_ms}",  # let the single-page app fetch and render its runs
        f"--screenshot={out}",
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0 or not out.is_file():
        raise SystemExit(f"chromium failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "mlflow-ui.png")
    parser.add_argument("--page", choices=("runs", "run", "train", "model"), default="runs")
    parser.add_argument("--size", default="1920,1200", help="browser window WIDTH,HEIGHT")
    parser.add_argument("--wait-ms", type=int, default=20000, help="virtual time the page gets to render")
    parser.add_argument("--start-limit-s", type=float, default=180.0)
    args = parser.parse_args()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "kernelcast.cli", "mlflow-ui", "--port", str(port)],
        cwd=ROOT,
        env=os.environ.copy(),
        start_new_session=True,
    )
    try:
        ready = _wait_ready(base, server, args.start_limit_s)
        print(f"kernelcast mlflow-ui served after {ready:.1f} s")
        url = _page_url(base, args.page)
        screenshot(url, args.out, args.size, args.wait_ms)
        print(f"{url} -> {args.out}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
