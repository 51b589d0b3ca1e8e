"""`kernelcast profile`: measure a kernel suite on one device (as Ray jobs) into a run folder.

The folder (manifest.json + chunks/*.jsonl rows + raw tool output) is what ``kernelcast ingest
--source kernelcast --from <parent folder>`` reads; ``profiled-data/`` holds the runs measured on
lent GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


@clean_errors
def profile_command(
    device: Annotated[
        str, typer.Option(help="catalog GPU name/alias (H100, mi300x, ...) or 'host' for the CPU")
    ],
    backend: Annotated[str, typer.Option(help="events | ncu | rocprofv3 | host")] = "events",
    suite: Annotated[
        str, typer.Option(help="smoke | ops | active | source | triton | kernelbench, or a suite YAML")
    ] = "smoke",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="run folder (default: <state>/data/profiles/<run id>); "
            "an existing run of the same device/backend/suite resumes",
        ),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: KERNELCAST_RAY_ADDRESS or a local Ray)")
    ] = None,
    no_ray: Annotated[
        bool, typer.Option("--no-ray", help="measure in this process instead of Ray jobs")
    ] = False,
    chunk_size: Annotated[
        int | None, typer.Option(help="cases per Ray job (default: params.yaml profile.chunk_size)")
    ] = None,
    warmup: Annotated[int | None, typer.Option(help="warm-up calls per case (default: the suite's)")] = None,
    repeats: Annotated[int | None, typer.Option(help="timed calls per case (default: the suite's)")] = None,
    no_l2_flush: Annotated[
        bool, typer.Option("--no-l2-flush", help="do not evict the L2 between timed calls")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="seconds to wait for the device's jobs before reporting it "
            "busy/absent (default: params.yaml profile.timeout_s)"
        ),
    ] = None,
    case_filter: Annotated[str, typer.Option("--filter", help="only cases whose id contains this")] = "",
    limit: Annotated[int, typer.Option(help="only the first N cases (0 = all)")] = 0,
    model: Annotated[
        str | None, typer.Option(help="active suite: model whose widest intervals choose the cases")
    ] = None,
) -> None:
    """Profile a kernel suite on DEVICE and write a run folder that `kernelcast ingest` can read."""
    from components.profiling.backends import BackendUnavailable
    from components.profiling.cases import SuiteError
    from components.profiling.run import ProfileInputs, ProfilingError, profile_params, profile_run
    from components.profiling.schedule import DeviceUnavailable
    from components.serving.active import interval_selector

    prepared_settings()
    defaults = profile_params()
    inputs = ProfileInputs(
        device=device,
        backend=backend,
        suite=suite,
        out_dir=out,
        chunk_size=chunk_size or int(defaults.get("chunk_size", 8)),
        warmup=warmup,
        repeats=repeats,
        l2_flush=not no_l2_flush and bool(defaults.get("l2_flush", True)),
        use_ray=not no_ray,
        ray_address=ray_address,
        timeout_s=timeout or float(defaults.get("timeout_s", 3600)),
        max_retries=int(defaults.get("max_retries", 3)),
        case_filter=case_filter,
        limit=limit,
        model=model,
        chooser=interval_selector if model else None,
    )
    try:
        result = profile_run(inputs)
    except (ProfilingError, DeviceUnavailable, BackendUnavailable, SuiteError) as exc:
        raise UserError(str(exc)) from None
    m = result.manifest
    report = m["report"]
    typer.echo(
        f"wrote {result.run_dir}: {m['rows']} rows ({m['rows_failed']} failed cases) on {m['device_name']} "
        f"with {m['tool']} {m['tool_version']}; chunks done {len(report['done'])}, "
        f"reused {len(report['reused'])}, "
        f"failed {len(report['failed'])}, timed out {len(report['timed_out'])}"
    )
    for chunk, why in report["failed"].items():
        typer.echo(f"  chunk {chunk} failed: {why}", err=True)
    typer.echo(f"ingest with: kernelcast ingest --source kernelcast --from {result.run_dir.parent}")
