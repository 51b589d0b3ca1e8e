"""`kernelcast devices`: list the GPU catalog, show one device's spec, add a GPU from a spec file.

The catalog module (yaml + pydantic) is imported inside each command so `kernelcast --help`
does not pay for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors

if TYPE_CHECKING:
    from components.devices import Catalog, DeviceSpec

app = typer.Typer(help="The GPU catalog: specs every prediction uses.", no_args_is_help=True)

VENDORS = ("nvidia", "amd", "intel")
# (header, width, cell) for `devices list`; cells are pre-formatted strings.
_COLUMNS: tuple[tuple[str, int], ...] = (
    ("id", 17),
    ("name", 50),
    ("vendor", 6),
    ("arch", 9),
    ("SMs", 4),
    ("boost MHz", 9),
    ("FP32 TFLOP/s", 12),
    ("FP16 tensor TFLOP/s", 19),
    ("DRAM GB/s", 9),
    ("L2 MB", 5),
    ("origin", 7),
)
_LEFT = {0, 1, 2, 3, 10}  # text columns, left-aligned


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if value < 1e4 else f"{value:.0f}"


def _row(spec: DeviceSpec, user: bool = False) -> list[str]:
    return [
        spec.id,
        spec.name,
        spec.vendor,
        spec.architecture,
        str(spec.sms),
        _number(spec.boost_clock_mhz),
        _number(spec.peak_tflops.fp32),
        _number(spec.peak_tflops.fp16_tensor),
        _number(spec.dram_gbps),
        _number(spec.l2_mb),
        "user" if user else "catalog",
    ]


def _summary(spec: DeviceSpec, user: bool = False) -> dict[str, object]:
    return {
        "id": spec.id,
        "name": spec.name,
        "vendor": spec.vendor,
        "architecture": spec.architecture,
        "sms": spec.sms,
        "boost_clock_mhz": spec.boost_clock_mhz,
        "fp32_tflops": spec.peak_tflops.fp32,
        "fp16_tensor_tflops": spec.peak_tflops.fp16_tensor,
        "dram_gbps": spec.dram_gbps,
        "l2_mb": spec.l2_mb,
        "user": user,
    }


def format_table(specs: list[DeviceSpec], user_ids: set[str] | frozenset[str] = frozenset()) -> str:
    """Fixed-width text table; numeric columns right-aligned; origin = catalog | user (devices add)."""

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in _LEFT else c.rjust(w)
            for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS, strict=False))
        )

    lines = [line([h for h, _ in _COLUMNS])]
    lines += [line(_row(spec, spec.id in user_ids)) for spec in specs]
    return "\n".join(text.rstrip() for text in lines)


@app.command("list")
@clean_errors
def list_command(
    vendor: Annotated[str | None, typer.Option(help="only this vendor: nvidia | amd | intel")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List every GPU in the catalog."""
    from components.devices import load_catalog

    if vendor is not None and vendor.lower() not in VENDORS:
        raise UserError(f"--vendor {vendor!r}: choose one of {', '.join(VENDORS)}")
    catalog = load_catalog()
    specs = [s for s in catalog.all() if vendor is None or s.vendor == vendor.lower()]
    if as_json:
        typer.echo(json.dumps([_summary(s, catalog.is_user(s.id)) for s in specs], indent=2))
    else:
        typer.echo(format_table(specs, set(catalog.user_files)))


@app.command("show")
@clean_errors
def show_command(
    name: Annotated[
        str,
        typer.Argument(
            help="catalog id or any spelling, e.g. 'NVIDIA H100 80GB HBM3', 'Tesla T4'; "
            "or a spec file (.yaml/.json) to check it without adding it"
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of text")] = False,
) -> None:
    """Show every spec of one GPU, its derived ridge points, and the spec sheet it comes from."""
    from components.devices import PRECISIONS, load_catalog, resolve_spec

    catalog = load_catalog()
    spec = resolve_spec(name, catalog)
    record = spec.model_dump(mode="json")
    record["origin"] = (
        "spec file"
        if spec.id not in catalog.ids() or catalog.get(spec.id) != spec
        else "user"
        if catalog.is_user(spec.id)
        else "catalog"
    )
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


def _user_dir(home: Path | None) -> Path:
    from components.devices import default_user_devices_dir

    return Path(home) / "devices" if home is not None else default_user_devices_dir()


def add_devices(spec_file: Path, user_dir: Path, replace: bool = False) -> list[tuple[DeviceSpec, Path]]:
    """Validate the spec file's device(s) against the catalog and keep each as ``<user_dir>/<id>.yaml``.

    A device may not reuse a packaged catalog id or spelling; re-adding a user device needs
    ``replace``. Nothing is written unless every device in the file is valid.
    """
    import yaml

    from components.common.atomic import atomic_write
    from components.devices import Catalog, CatalogError, load_catalog, read_spec_file

    new = read_spec_file(spec_file)
    catalog: Catalog = load_catalog(user_dir=user_dir)
    kept = []
    for spec in new:
        if spec.id in catalog.ids() and not catalog.is_user(spec.id):
            raise UserError(
                f"{spec_file}: id {spec.id!r} is a packaged catalog device ({catalog.get(spec.id).name}); "
                "choose another id"
            )
        if catalog.is_user(spec.id) and not replace:
            raise UserError(
                f"{spec_file}: user device {spec.id!r} already exists ({catalog.user_files[spec.id]}); "
                "pass --replace to overwrite it"
            )
    replaced = {s.id for s in new}
    try:  # every spelling must stay unambiguous across the packaged and user devices
        Catalog([s for s in catalog.all() if s.id not in replaced] + new)
    except CatalogError as exc:
        raise UserError(f"{spec_file}: {exc}") from None
    for spec in new:
        old = catalog.user_files.get(spec.id)
        path = user_dir / f"{spec.id}.yaml"
        record = spec.model_dump(mode="json", exclude_none=True)
        record["aliases"] = list(spec.aliases)
        text = yaml.safe_dump(record, sort_keys=False, allow_unicode=True)
        atomic_write(path, lambda tmp, text=text: tmp.write_text(text, encoding="utf-8"))
        if old is not None and old != path:
            old.unlink(missing_ok=True)
        kept.append((spec, path))
    return kept


@app.command("add")
@clean_errors
def add_command(
    spec_file: Annotated[
        Path,
        typer.Argument(
            help=(
                "YAML/JSON spec (one mapping, or a 'devices:' list); "
                "every field, optional ones marked: docs/devices.md"
            )
        ),
    ],
    replace: Annotated[
        bool, typer.Option("--replace", help="overwrite a user device with the same id")
    ] = False,
    home: Annotated[Path | None, typer.Option(help="state folder (default: KERNELCAST_HOME)")] = None,
) -> None:
    """Add a GPU the catalog lacks from its spec sheet figures; kept in $KERNELCAST_HOME/devices."""
    from components.devices import CatalogError

    if not spec_file.is_file():
        raise UserError(f"spec file {spec_file}: not found")
    try:
        added = add_devices(spec_file, _user_dir(home), replace)
    except CatalogError as exc:
        raise UserError(str(exc)) from None
    for spec, path in added:
        typer.echo(f"added {spec.id} ({spec.name}) -> {path}")


@app.command("remove")
@clean_errors
def remove_command(
    device_id: Annotated[str, typer.Argument(help="id of a user-added device")],
    home: Annotated[Path | None, typer.Option(help="state folder (default: KERNELCAST_HOME)")] = None,
) -> None:
    """Remove a device added with `kernelcast devices add` (packaged entries cannot be removed)."""
    from components.devices import load_catalog

    catalog = load_catalog(user_dir=_user_dir(home))
    if not catalog.is_user(device_id):
        kind = "a packaged catalog device" if device_id in catalog.ids() else "not a device"
        raise UserError(f"{device_id!r} is {kind}; only user-added devices can be removed")
    path = catalog.user_files[device_id]
    others = sorted(i for i, p in catalog.user_files.items() if p == path and i != device_id)
    if others:
        raise UserError(f"{path} also defines {', '.join(others)}: edit that file instead")
    path.unlink()
    typer.echo(f"removed {device_id} ({path})")
