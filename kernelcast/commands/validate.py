"""`kernelcast validate`: GX suites on the canonical tables -> valid rows, quarantine, summary, report.

Exit codes: 0 passed; 1 more than ``validate.max_failure_share`` of the rows quarantined; 2 bad
input (missing folder/table, unreadable params). Drift (``--drift-against``) is reported in the
summary and printed, but does not change the exit code: a new GPU or suite is *meant* to shift
distributions, so the flow that ingests it decides what drift means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


def load_params(path: Path) -> dict[str, Any]:
    """params.yaml as a dict; it must have the ``validate:`` keys the suites read."""
    from components.platform.config import load_params as read_params
    from components.platform.config import validate_params

    params = read_params(path)
    validate_params(params, source=str(path))
    return params


def format_summary(summary: dict[str, Any]) -> str:
    """A compact text table: one line per source, then the top expectations that failed."""
    lines = [f"{'source':<16}{'rows_in':>10}{'quarantined':>13}{'share':>8}  top failures"]
    for source, s in summary["by_source"].items():
        share = s["rows_quarantined"] / s["rows_in"] if s["rows_in"] else 0.0
        top = ", ".join(f"{k}={n}" for k, n in list(s["by_expectation"].items())[:3])
        lines.append(f"{source:<16}{s['rows_in']:>10}{s['rows_quarantined']:>13}{share:>8.3f}  {top}")
    lines.append(
        f"{'total':<16}{summary['rows_in']:>10}{summary['rows_quarantined']:>13}"
        f"{summary['failure_share']:>8.3f}  (max {summary['max_failure_share']})"
    )
    if summary.get("table_failures"):
        lines.append(f"table-level failures (quarantine every row): {', '.join(summary['table_failures'])}")
    kernels = summary.get("kernels")
    if kernels:
        lines.append(
            f"kernels: {kernels['rows_in']} rows, {kernels['rows_quarantined']} failing "
            f"{dict(list(kernels['by_expectation'].items())[:3])}"
        )
    drift = summary.get("drift")
    if drift:
        flagged = ", ".join(drift["drifted_pairs"][:8]) or "none"
        lines.append(f"drift (PSI > {drift['threshold']}): {flagged}")
    return "\n".join(lines)


@clean_errors
def validate_command(
    in_dir: Annotated[
        Path | None, typer.Option("--in", help="canonical tables folder [data_dir/canonical]")
    ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output folder [data_dir/validated]")] = None,
    summary_file: Annotated[
        Path | None, typer.Option("--summary", help="also write the summary JSON here")
    ] = None,
    drift_against: Annotated[
        Path | None, typer.Option("--drift-against", help="validated folder to compare distributions with")
    ] = None,
) -> None:
    """Validate canonical measurements (GX): write valid rows, quarantine, summary.json and report.html."""
    settings = prepared_settings()
    in_dir = in_dir or settings.data_dir / "canonical"
    out_dir = out_dir or settings.data_dir / "validated"
    if not (in_dir / "measurements.parquet").is_file():
        raise UserError(f"no measurements.parquet in {in_dir} (run `kernelcast ingest` first, or pass --in)")
    if drift_against is not None and not (drift_against / "measurements.parquet").is_file():
        raise UserError(f"--drift-against {drift_against}: no measurements.parquet there")
    params = load_params(settings.params_file)

    from components.devices import load_catalog
    from components.validation.run import validate_dir

    summary = validate_dir(in_dir, out_dir, load_catalog(), params, summary_file, drift_against)
    typer.echo(format_summary(summary))
    typer.echo(f"wrote {out_dir} (measurements.parquet, quarantine.parquet, summary.json, report.html)")
    if not summary["passed"]:
        typer.echo(
            f"error: validation failed: {summary['failure_share']:.1%} of rows quarantined, more than "
            f"validate.max_failure_share = {summary['max_failure_share']:.1%}",
            err=True,
        )
        raise typer.Exit(code=1)
