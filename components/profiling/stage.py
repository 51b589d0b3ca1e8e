"""The profile stage: run a kernel suite on this machine's GPU (or CPU) into a run folder.

``profile_stage`` is the one function behind ``kernelcast profile`` (and the profiling jobs the
orchestration builds on it). The folder (``manifest.json`` + raw runner/ncu output) is what
``components/ingest/profiled.py`` reads; ``profiled-data/`` holds the runs we measured on lent GPUs.
Each step runs in its own process (``python -m components.profiling.runner`` / ``...ncu``), so a
crashing kernel cannot take the caller down.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from components.atomic import atomic_write

BACKENDS: tuple[str, ...] = ("cuda_event", "ncu", "host")


class ProfilingError(RuntimeError):
    """A profiling step (runner or Nsight Compute) exited non-zero; the message names the command."""


@dataclass(frozen=True)
class ProfileInputs:
    out_dir: Path  # run folder to create (must not exist)
    backend: str = "cuda_event"  # cuda_event | ncu (runs cuda_event first) | host
    suite: str = "default"
    case_filter: str = ""  # only cases whose id contains this
    trials: int = 25
    cwd: Path | None = None  # where the step processes run (the project root, so ``components`` imports)


@dataclass(frozen=True)
class ProfileResult:
    out_dir: Path
    manifest: dict[str, object]


def check_inputs(inputs: ProfileInputs) -> None:
    """A ValueError naming the input that cannot work on this machine."""
    if inputs.backend not in BACKENDS:
        raise ValueError(f"--backend {inputs.backend!r}: choose one of {', '.join(BACKENDS)}")
    if Path(inputs.out_dir).exists():
        raise ValueError(f"--out {inputs.out_dir}: already exists; a run folder is written once")
    if inputs.backend != "host":
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if not has_gpu:
            raise ValueError(f"--backend {inputs.backend}: no CUDA GPU on this machine (use --backend host)")
    if inputs.backend == "ncu" and shutil.which("ncu") is None:
        raise ValueError("--backend ncu: Nsight Compute (`ncu`) is not on PATH")


def _run(command: list[str], cwd: Path | None) -> None:
    result = subprocess.run(command, cwd=cwd)
    if result.returncode != 0:
        raise ProfilingError(f"profiling step failed (exit {result.returncode}): {' '.join(command)}")


def profile_stage(inputs: ProfileInputs) -> ProfileResult:
    """Time the suite (and, with ``ncu``, collect Nsight Compute counters); write ``manifest.json`` last."""
    check_inputs(inputs)
    out = Path(inputs.out_dir)
    out.mkdir(parents=True)
    runner = [sys.executable, "-m", "components.profiling.runner", "--suite", inputs.suite,
              "--trials", str(inputs.trials), "--filter", inputs.case_filter]
    timing_backend = "host" if inputs.backend == "host" else "cuda_event"
    _run(runner + ["--backend", timing_backend, "--out", str(out / f"{timing_backend}.jsonl")], inputs.cwd)
    first = json.loads((out / f"{timing_backend}.jsonl").read_text().splitlines()[0])
    run_id = out.name
    manifest: dict[str, object] = {
        "device_name": first["device_name"], "date": dt.date.today().isoformat(), "suite": inputs.suite,
        "timing": [{"file": f"{timing_backend}.jsonl", "run_id": f"{run_id}-timing",
                    "clock_mode": "host" if inputs.backend == "host" else "boost"}],
        "ncu": [],
    }
    if inputs.backend == "ncu":
        _run([sys.executable, "-m", "components.profiling.ncu", "--suite", inputs.suite,
              "--filter", inputs.case_filter, "--out", str(out / "ncu_full")], inputs.cwd)
        manifest["ncu"] = [{"folder": "ncu_full", "timing": f"{timing_backend}.jsonl",
                            "filter": inputs.case_filter, "run_id": f"{run_id}-ncu", "clock_mode": "locked",
                            "tensor_counters_complete": True}]
    text = json.dumps(manifest, indent=2)
    atomic_write(out / "manifest.json", lambda tmp: tmp.write_text(text))
    return ProfileResult(out, manifest)
