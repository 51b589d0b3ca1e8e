"""`kernelcast devices`: list the GPU catalog and show one device's spec.

The catalog module (yaml + pydantic) is imported inside each command so `kernelcast --help`
does not pay for it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors

if TYPE_CHECKING:
    from components.devices import DeviceSpec

app = typer.Typer(help="The GPU catalog: specs every prediction uses.", no_args_is_help=True)

VENDORS = ("nvidia", "amd")
# (header, width, cell) for `devices list`; cells are pre-formatted strings.
_COLUMNS: tuple[tuple[str, int], ...] = (
    ("id", 17), ("name", 45), ("vendor", 6), ("arch", 9), ("SMs", 4), ("boost MHz", 9),
    ("FP32 TFLOP/s", 12), ("FP16 tensor TFLOP/s", 19), ("DRAM GB/s", 9), ("L2 MB", 5),
)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if value < 1e4 else f"{value:.0f}"


def _row(spec: DeviceSpec) -> list[str]:
    return [
        spec.id, spec.name, spec.vendor, spec.architecture, str(spec.sms), _number(spec.boost_clock_mhz),
        _number(spec.peak_tflops.fp32), _number(spec.peak_tflops.fp16_tensor), _number(spec.dram_gbps),
        _number(spec.l2_mb),
    ]


def _summary(spec: DeviceSpec) -> dict[str, object]:
    return {
        "id": spec.id, "name": spec.name, "vendor": spec.vendor, "architecture": spec.architecture,
        "sms": spec.sms, "boost_clock_mhz": spec.boost_clock_mhz, "fp32_tflops": spec.peak_tflops.fp32,
        "fp16_tensor_tflops": spec.peak_tflops.fp16_tensor, "dram_gbps": spec.dram_gbps, "l2_mb": spec.l2_mb,
    }


def format_table(specs: list[DeviceSpec]) -> str:
    """Fixed-width text table; numeric columns right-aligned."""
    lines = ["  ".join(h.ljust(w) if i < 4 else h.rjust(w) for i, (h, w) in enumerate(_COLUMNS))]
    for spec in specs:
        cells = _row(spec)
        lines.append("  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS))))
    return "\n".join(line.rstrip() for line in lines)


@app.command("list")
@clean_errors
def list_command(
    vendor: Annotated[str | None, typer.Option(help="only this vendor: nvidia | amd")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List every GPU in the catalog."""
    from components.devices import load_catalog

    if vendor is not None and vendor.lower() not in VENDORS:
        raise UserError(f"--vendor {vendor!r}: choose one of {', '.join(VENDORS)}")
    specs = [s for s in load_catalog().all() if vendor is None or s.vendor == vendor.lower()]
    if as_json:
        typer.echo(json.dumps([_summary(s) for s in specs], indent=2))
    else:
        typer.echo(format_table(specs))


@app.command("show")
@clean_errors
def show_command(
    name: Annotated[str, typer.Argument(help="catalog id or any spelling, e.g. 'NVIDIA H100 80GB HBM3', 'Tesla T4'")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of text")] = False,
) -> None:
    """Show every spec of one GPU, its derived ridge points, and the spec sheet it comes from."""
    from components.devices import PRECISIONS, load_catalog

    spec = load_catalog().resolve(name)
    record = spec.model_dump(mode="json")
    # Ridge points are derived, but they are what a user asks `show` for: where compute-bound starts.
    record["ridge_flop_per_byte"] = {
        p: round(spec.ridge_point(p, tensor=None), 2) for p in PRECISIONS if spec.has_pipe(p, tensor=None)
    }
    if as_json:
        typer.echo(json.dumps(record, indent=2))
        return
    peaks = record.pop("peak_tflops")
    ridges = record.pop("ridge_flop_per_byte")
    width = max(len(k) for k in record)
    for key, value in record.items():
        if key == "aliases":
            value = ", ".join(value) or "-"
        typer.echo(f"{key.ljust(width)}  {'-' if value is None else value}")
    typer.echo("peak TFLOP/s (dense):")
    for key, value in peaks.items():
        if value is not None:
            typer.echo(f"  {key.ljust(12)}  {value:g}")
    typer.echo("ridge point, FLOP/B (fastest pipe per precision):")
    for key, value in ridges.items():
        typer.echo(f"  {key.ljust(12)}  {value:g}")
