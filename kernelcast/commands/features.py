"""`kernelcast features` subcommands: ``build`` (analytical feature table) and ``static`` (CUDA static analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

app = typer.Typer(help="Build the feature table (analytical, device and static features).", no_args_is_help=True)


def _tables(in_dir: Path | None, data_dir: Path) -> tuple[Path, Path]:
    """measurements from the validated folder (or --in), kernels from the same folder or canonical/."""
    folder = in_dir or data_dir / "validated"
    measurements = folder / "measurements.parquet"
    if not measurements.is_file():
        hint = "" if in_dir else " -- run `kernelcast ingest` then `kernelcast validate` first, or pass --in DIR"
        raise UserError(f"validated measurements not found: {measurements}{hint}")
    for candidate in (folder / "kernels.parquet", data_dir / "canonical" / "kernels.parquet"):
        if candidate.is_file():
            return measurements, candidate
    raise UserError(f"kernels table not found in {folder} or {data_dir / 'canonical'}")


@app.command("build")
@clean_errors
def build_command(
    in_dir: Annotated[Path | None, typer.Option("--in", help="folder with measurements.parquet (default: data_dir/validated)")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="feature table (default: data_dir/features/features.parquet)")] = None,
    static_file: Annotated[
        Path | None, typer.Option("--static", help="s_* static features by kernel_id (default: data_dir/features/static.parquet if present)")
    ] = None,
    chunks: Annotated[int, typer.Option(min=1, help="row chunks computed as Ray tasks (1 = in-process)")] = 1,
) -> None:
    """Join measurements with kernels and compute f_*/m_*/dev_*/s_* features, one row per measurement."""
    import pandas as pd

    from components.devices import load_catalog
    from components.features.build import (
        build_feature_table,
        build_features_parallel,
        coverage_summary,
        write_features,
    )

    settings = prepared_settings()
    measurements_path, kernels_path = _tables(in_dir, settings.data_dir)
    default_static = settings.data_dir / "features" / "static.parquet"
    if static_file is not None and not static_file.is_file():
        raise UserError(f"static features file not found: {static_file}")
    static_path = static_file or (default_static if default_static.is_file() else None)
    measurements = pd.read_parquet(measurements_path)
    kernels = pd.read_parquet(kernels_path)
    static = pd.read_parquet(static_path) if static_path else None
    catalog = load_catalog()
    if chunks > 1:
        table = build_features_parallel(measurements, kernels, catalog, static, n_chunks=chunks, settings=settings)
    else:
        table = build_feature_table(measurements, kernels, catalog, static)
    out = write_features(table, out_file or settings.data_dir / "features" / "features.parquet")
    typer.echo(coverage_summary(table).to_string(index=False))
    typer.echo(f"wrote {len(table)} rows x {table.shape[1]} columns -> {out}")


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
    kernels_file: Annotated[Path | None, typer.Option("--kernels", help="kernels.parquet (default: data_dir/canonical)")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="default: data_dir/features/static.parquet")] = None,
    arch: Annotated[str, typer.Option(help="target architecture for NVRTC")] = "sm_90",
) -> None:
    """Static features of every shipped CUDA kernel (NVRTC + nvdisasm, cached), keyed by kernel_id."""
    import json
    import os

    import pandas as pd

    from components.features.static_table import build_static_table

    settings = prepared_settings()
    kernels_path = kernels_file or settings.data_dir / "canonical" / "kernels.parquet"
    if not kernels_path.is_file():
        raise UserError(f"kernels table not found: {kernels_path} -- run `kernelcast ingest` first")
    table, coverage = build_static_table(pd.read_parquet(kernels_path), settings.datasets_dir, arch)
    out = out_file or settings.data_dir / "features" / "static.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.parquet")
    table.to_parquet(tmp, index=False)
    os.replace(tmp, out)
    typer.echo(json.dumps(coverage, indent=1, sort_keys=True))
    typer.echo(f"wrote {len(table)} kernels x {table.shape[1] - 1} static features -> {out}")
