"""Prefect flow: profile a kernel suite on the machine the task runs on into a run folder.

The task wraps ``components.profiling.stage.profile_stage`` -- the call behind ``kernelcast
profile``. On a cluster the task is placed on a node of the GPU type to measure; the folder it
writes is what ``kernelcast ingest --source kernelcast --from <parent>`` reads.

    python -m flows.profile OUT_DIR [BACKEND] [SUITE]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.config import PROJECT_ROOT, get_settings
from components.profiling.stage import ProfileInputs, ProfileResult, profile_stage


@task(name="profile")
def profile_task(inputs: ProfileInputs) -> ProfileResult:
    """``profile_stage``: time the suite (and collect ncu counters) into ``inputs.out_dir``."""
    return profile_stage(inputs)


@flow(name="profile", log_prints=True)
def profile_flow(
    out_dir: str, backend: str = "cuda_event", suite: str = "default", case_filter: str = "", trials: int = 25
) -> dict[str, Any]:
    """Profile ``suite`` with ``backend`` into ``out_dir`` (a new folder); returns its manifest."""
    inputs = ProfileInputs(
        out_dir=Path(out_dir),
        backend=backend,
        suite=suite,
        case_filter=case_filter,
        trials=trials,
        cwd=PROJECT_ROOT,
    )
    result = profile_task(inputs)
    return {"out_dir": str(result.out_dir), "manifest": result.manifest}


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    if not argv:
        raise SystemExit("usage: python -m flows.profile OUT_DIR [BACKEND] [SUITE]")
    with prefect_server(get_settings()):
        print(profile_flow(*argv[:3]))


if __name__ == "__main__":
    main(sys.argv[1:])
