"""`kernelcast profile`: run a kernel suite on this machine's GPU (or CPU) into a run folder.

The folder (manifest.json + raw runner/ncu output) is what ``components/ingest/profiled.py``
reads; ``profiled-data/`` holds the runs we measured on lent GPUs.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors
from kernelcast.settings import PROJECT_ROOT

BACKENDS = ("cuda_event", "ncu", "host")


def _run(command: list[str]) -> None:
    result = subprocess.run(command, cwd=PROJECT_ROOT)
    if result.returncode != 0:
        raise UserError(f"profiling step failed (exit {result.returncode}): {' '.join(command)}")


@clean_errors
def profile_command(
    out: Annotated[Path, typer.Option("--out", help="run folder to create (must not exist)")],
    backend: Annotated[str, typer.Option(help="cuda_event | ncu (runs cuda_event first) | host")] = "cuda_event",
    suite: Annotated[str, typer.Option(help="kernel suite: default | tiny")] = "default",
    case_filter: Annotated[str, typer.Option("--filter", help="only cases whose id contains this")] = "",
    trials: Annotated[int, typer.Option(help="timed trials per case")] = 25,
) -> None:
    """Profile a PyTorch op suite and write a run folder that `kernelcast ingest` can read."""
    if backend not in BACKENDS:
        raise UserError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if out.exists():
        raise UserError(f"--out {out}: already exists; a run folder is written once")
    if backend != "host":
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if not has_gpu:
            raise UserError(f"--backend {backend}: no CUDA GPU on this machine (use --backend host)")
    if backend == "ncu" and shutil.which("ncu") is None:
        raise UserError("--backend ncu: Nsight Compute (`ncu`) is not on PATH")
    out.mkdir(parents=True)
    runner = [sys.executable, "-m", "components.profiling.runner", "--suite", suite, "--trials", str(trials),
              "--filter", case_filter]
    timing_backend = "host" if backend == "host" else "cuda_event"
    _run(runner + ["--backend", timing_backend, "--out", str(out / f"{timing_backend}.jsonl")])
    first = json.loads((out / f"{timing_backend}.jsonl").read_text().splitlines()[0])
    run_id = f"{out.name}"
    manifest: dict[str, object] = {
        "device_name": first["device_name"], "date": dt.date.today().isoformat(), "suite": suite,
        "timing": [{"file": f"{timing_backend}.jsonl", "run_id": f"{run_id}-timing",
                    "clock_mode": "host" if backend == "host" else "boost"}],
        "ncu": [],
    }
    if backend == "ncu":
        _run([sys.executable, "-m", "components.profiling.ncu", "--suite", suite, "--filter", case_filter,
              "--out", str(out / "ncu_full")])
        manifest["ncu"] = [{"folder": "ncu_full", "timing": f"{timing_backend}.jsonl", "filter": case_filter,
                            "run_id": f"{run_id}-ncu", "clock_mode": "locked", "tensor_counters_complete": True}]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    typer.echo(f"wrote {out} ({backend}, suite {suite}); ingest with: kernelcast ingest --source kernelcast --from {out.parent}")
