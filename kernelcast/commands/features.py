"""`kernelcast features` subcommands.

``build`` (analytical feature table) and ``static`` (CUDA static analysis).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import clean_errors, prepared_settings

app = typer.Typer(
    help="Build the feature table (analytical, device and static features).", no_args_is_help=True
)


@app.command("build")
@clean_errors
def build_command(
    in_dir: Annotated[
        Path | None,
        typer.Option("--in", help="folder with measurements.parquet (default: data_dir/validated)"),
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="feature table (default: data_dir/features/features.parquet)")
    ] = None,
    static_file: Annotated[
        Path | None,
        typer.Option(
            "--static",
            help="s_* static features by kernel_id (default: data_dir/features/static.parquet if present)",
        ),
    ] = None,
    chunks: Annotated[int, typer.Option(min=1, help="row chunks computed as Ray tasks (1 = in-process)")] = 1,
) -> None:
    """Join measurements with kernels and compute f_*/m_*/dev_*/s_* features, one row per measurement."""
    from components.features.stage import FeatureInputs, features_stage, locate_tables

    settings = prepared_settings()
    canonical = settings.data_dir / "canonical"
    hint = "" if in_dir else " -- run `kernelcast ingest` then `kernelcast validate` first, or pass --in DIR"
    measurements, kernels = locate_tables(in_dir or settings.data_dir / "validated", canonical, hint)
    default_static = settings.data_dir / "features" / "static.parquet"
    inputs = FeatureInputs(
        measurements_file=measurements,
        kernels_file=kernels,
        out_file=out_file or settings.data_dir / "features" / "features.parquet",
        static_file=static_file or (default_static if default_static.is_file() else None),
        chunks=chunks,
    )
    result = features_stage(inputs, settings=settings)
    typer.echo(result.coverage.to_string(index=False))
    typer.echo(f"wrote {result.rows} rows x {result.columns} columns -> {result.out_file}")


def _register_static() -> None:
    """``features static`` comes from another module; --help must work even where it is absent."""
    try:
        from kernelcast.commands.features_static import static_command
    except ImportError as exc:
        reason = str(exc)

        @app.command("static")
        def static_unavailable() -> None:
            """Static analysis of CUDA sources (unavailable in this build)."""
            typer.echo(f"kernelcast features static: not available ({reason})", err=True)
            raise typer.Exit(code=2)

        return
    app.command("static")(static_command)


_register_static()


@app.command("static-table")
@clean_errors
def static_table_command(
    kernels_file: Annotated[
        Path | None, typer.Option("--kernels", help="kernels.parquet (default: data_dir/canonical)")
    ] = None,
    from_datasets: Annotated[
        bool,
        typer.Option(
            "--from-datasets",
            help="read gpuFLOPBench's kernels and benchmark_hub's configurations (those of params.yaml "
            "ingest.sources) from datasets_dir with the ingest adapters instead of a kernels table: needs no "
            "ingest, so the pipeline runs it beside ingest",
        ),
    ] = False,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="default: data_dir/features/static.parquet")
    ] = None,
    arch: Annotated[str, typer.Option(help="target architecture for NVRTC")] = "sm_90",
) -> None:
    """Static features of every shipped CUDA kernel (NVRTC + nvdisasm, cached), keyed by kernel_id."""
    import json

    from components.features.stage import STATIC_SOURCES, StaticInputs, static_stage
    from kernelcast.commands._common import UserError

    settings = prepared_settings()
    if from_datasets and kernels_file is not None:
        raise UserError("--from-datasets reads the sources themselves: give it or --kernels, not both")
    sources = STATIC_SOURCES
    if from_datasets and settings.params_file.is_file():
        from components.platform.config import ingest_sources, load_params

        sources = tuple(ingest_sources(load_params(settings.params_file)) or STATIC_SOURCES)
    inputs = StaticInputs(
        kernels_file=None
        if from_datasets
        else kernels_file or settings.data_dir / "canonical" / "kernels.parquet",
        out_file=out_file or settings.data_dir / "features" / "static.parquet",
        datasets_dir=settings.datasets_dir,
        arch=arch,
        sources=sources,
    )
    result = static_stage(inputs)
    typer.echo(json.dumps(result.coverage, indent=1, sort_keys=True))
    typer.echo(f"wrote {result.kernels} kernels x {result.features} static features -> {result.out_file}")
