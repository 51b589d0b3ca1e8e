"""`kernelcast profile`: run a kernel suite on this machine's GPU (or CPU) into a run folder.

The folder (manifest.json + raw runner/ncu output) is what ``components/ingest/profiled.py``
reads; ``profiled-data/`` holds the runs we measured on lent GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors


@clean_errors
def profile_command(
    out: Annotated[Path, typer.Option("--out", help="run folder to create (must not exist)")],
    backend: Annotated[str, typer.Option(help="cuda_event | ncu (runs cuda_event first) | host")] = "cuda_event",
    suite: Annotated[str, typer.Option(help="kernel suite: default | tiny")] = "default",
    case_filter: Annotated[str, typer.Option("--filter", help="only cases whose id contains this")] = "",
    trials: Annotated[int, typer.Option(help="timed trials per case")] = 25,
) -> None:
    """Profile a PyTorch op suite and write a run folder that `kernelcast ingest` can read."""
    from components.config import PROJECT_ROOT
    from components.profiling.stage import ProfileInputs, ProfilingError, profile_stage

    inputs = ProfileInputs(out_dir=out, backend=backend, suite=suite, case_filter=case_filter, trials=trials,
                           cwd=PROJECT_ROOT)
    try:
        profile_stage(inputs)
    except ProfilingError as exc:
        raise UserError(str(exc)) from None
    typer.echo(f"wrote {out} ({backend}, suite {suite}); "
               f"ingest with: kernelcast ingest --source kernelcast --from {out.parent}")
