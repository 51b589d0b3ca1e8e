"""Device specs a user supplies (``kernelcast devices add``, a request's ``device_spec``, files under
``$KERNELCAST_HOME/devices``): validated like catalog entries, then checked for figures that are a typo or
a wrong unit rather than a GPU (``plausibility_problems``); ``SpecError`` names every problem at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from components.devices.catalog import Catalog, CatalogError, DeviceSpec, _describe, _entry_label, _read_yaml


class SpecError(CatalogError):
    """A user device spec is missing fields or has implausible ones; ``problems`` lists each."""

    def __init__(self, label: str, problems: list[str]) -> None:
        super().__init__(f"{label}: {'; '.join(problems)}")
        self.label = label
        self.problems = problems


# Ranges outside which a figure is a typo or a wrong unit, not a GPU (largest real values ~5x below).
_PLAUSIBLE: dict[str, tuple[float, float]] = {
    "sms": (1, 1024),
    "fp32_lanes_per_sm": (8, 512),
    "boost_clock_mhz": (100, 5000),
    "base_clock_mhz": (50, 5000),
    "memory_gb": (0.25, 2048),
    "dram_gbps": (10, 20000),
    "l2_mb": (0.0625, 1024),
    "llc_mb": (1, 4096),
    "l1_smem_per_sm_kb": (8, 2048),
    "max_smem_per_sm_kb": (8, 2048),
    "max_smem_per_block_kb": (8, 2048),
    "regs_per_sm": (4096, 1 << 20),
    "max_threads_per_sm": (256, 8192),
    "tdp_w": (5, 5000),
    "warp_size": (16, 64),
    "max_ctas_per_sm": (1, 128),
    "max_warps_per_sm": (4, 256),
    "l2_gbps": (10, 200000),
}
FP32_TOLERANCE = 0.25  # published FP32 peak vs sms x lanes x 2 x boost clock


def _number_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _figure_problems(values: dict[str, Any]) -> list[str]:
    """Range and consistency problems of whatever numeric spec figures ``values`` holds."""
    problems: list[str] = []
    for field, (low, high) in _PLAUSIBLE.items():
        value = _number_or_none(values.get(field))
        if value is not None and not (low <= value <= high):
            problems.append(f"{field} = {value:g} is implausible (expected {low:g}..{high:g})")
    sms, lanes, clock = (
        _number_or_none(values.get(k)) for k in ("sms", "fp32_lanes_per_sm", "boost_clock_mhz")
    )
    peaks = values.get("peak_tflops") if isinstance(values.get("peak_tflops"), dict) else {}
    published = _number_or_none(peaks.get("fp32"))
    if None not in (sms, lanes, clock, published) and sms * lanes * clock > 0:
        derived = sms * lanes * 2 * clock * 1e-6  # TFLOP/s
        if abs(published - derived) > FP32_TOLERANCE * derived:
            problems.append(
                f"peak_tflops.fp32 = {published:g} is inconsistent with sms x fp32_lanes_per_sm x 2 x "
                f"boost_clock_mhz = {sms:g} x {lanes:g} x 2 x {clock:g} MHz = {derived:.3g} TFLOP/s "
                f"(more than {FP32_TOLERANCE:.0%} apart)"
            )
    block, per_sm = (
        _number_or_none(values.get("max_smem_per_block_kb")),
        _number_or_none(values.get("max_smem_per_sm_kb")),
    )
    if block is not None and per_sm is not None and block > per_sm:
        problems.append(f"max_smem_per_block_kb ({block:g}) exceeds max_smem_per_sm_kb ({per_sm:g})")
    for key, value in peaks.items():
        number = _number_or_none(value)
        if number is not None and number > 100_000:
            problems.append(
                f"peak_tflops.{key} = {number:g} TFLOP/s is implausible (dense peaks are below 100000)"
            )
    return problems


def plausibility_problems(spec: DeviceSpec) -> list[str]:
    """Fields of a schema-valid spec that cannot describe a real GPU (each named with its range)."""
    return _figure_problems(spec.model_dump())


def spec_from_mapping(data: Any, label: str = "device spec") -> DeviceSpec:
    """A validated DeviceSpec from a full spec mapping (a parsed JSON/YAML object).

    Same fields as a catalog entry (see catalog.yaml's header); occupancy fields default per
    architecture. Raises SpecError naming every missing, unknown or implausible field.
    """
    if not isinstance(data, dict):
        raise SpecError(label, [f"expected a mapping of spec fields, got {type(data).__name__}"])
    try:
        spec = DeviceSpec.model_validate(data)
    except ValidationError as exc:
        flagged = {".".join(str(p) for p in err["loc"]) for err in exc.errors()}
        extra = [p for p in _figure_problems(data) if p.split(" ", 1)[0] not in flagged]
        raise SpecError(label, _occupancy_explained(_describe(exc), data, flagged) + extra) from None
    problems = plausibility_problems(spec)
    if problems:
        raise SpecError(label, problems)
    return spec


OCCUPANCY_FIELDS: tuple[str, ...] = ("warp_size", "max_ctas_per_sm", "max_warps_per_sm")


def _occupancy_explained(problems: list[str], data: dict[str, Any], flagged: set[str]) -> list[str]:
    """The optional occupancy fields are never reported as plainly missing: they default from the
    vendor and compute capability (``architecture_defaults``). Dropped where those are themselves
    missing or invalid (that is the problem to fix); otherwise the message says no default is known."""
    known_root = not ({"vendor", "compute_capability", "architecture", "max_threads_per_sm"} & flagged)
    out = []
    for problem in problems:
        field = next((f for f in OCCUPANCY_FIELDS if problem == f"missing field {f!r}"), None)
        if field is None:
            out.append(problem)
        elif known_root:
            out.append(
                f"{field}: optional where kernelcast knows the architecture, but no default is known for "
                f"vendor {data.get('vendor')!r} compute capability {data.get('compute_capability')!r} "
                f"architecture {data.get('architecture')!r}; give it (docs/devices.md)"
            )
    return out


def read_spec_file(path: Path) -> list[DeviceSpec]:
    """The device(s) of a user spec file: one mapping, or a ``devices:`` list like catalog.yaml."""
    path = Path(path)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise SpecError(str(path), ["expected a .yaml, .yml or .json spec file"])
    document = _read_yaml(path, "device spec")  # JSON is YAML
    entries = document["devices"] if isinstance(document, dict) and "devices" in document else [document]
    if not isinstance(entries, list) or not entries:
        raise SpecError(str(path), ["'devices:' must be a non-empty list of spec mappings"])
    return [
        spec_from_mapping(e, f"device spec {path}" + (f" {_entry_label(i, e)}" if len(entries) > 1 else ""))
        for i, e in enumerate(entries)
    ]


def default_user_devices_dir() -> Path:
    """``$KERNELCAST_HOME/devices``: where ``kernelcast devices add`` keeps user specs.

    Reads the one setting it needs directly (``Settings()`` costs ~4 ms, and ``load_catalog()``
    sits on the prediction path); ``components.platform.config.Settings.home`` supplies the default.
    """
    import os

    home = os.environ.get("KERNELCAST_HOME")
    if not home:
        from components.platform.config import Settings

        home = Settings.model_fields["home"].default
    return Path(home).resolve() / "devices"


def _user_fingerprint(user_dir: Path | None) -> tuple:
    if user_dir is None or not Path(user_dir).is_dir():
        return ()
    files = sorted(
        p
        for p in Path(user_dir).iterdir()
        if p.suffix.lower() in (".yaml", ".yml", ".json") and not p.name.startswith(".")
    )
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)


def merge_user_devices(base: Catalog, user_dir: Path | None) -> Catalog:
    """``base`` plus every device spec in ``user_dir`` (validated like ``spec_from_mapping``).

    A user device may not reuse a packaged id or spelling: the error names the file and the clash.
    """
    if user_dir is None or not Path(user_dir).is_dir():
        return base
    devices = base.all()
    user_files: dict[str, Path] = {}
    for name, _, _ in _user_fingerprint(user_dir):
        path = Path(user_dir) / name
        for spec in read_spec_file(path):
            if spec.id in user_files:
                raise CatalogError(
                    f"user device {path}: id {spec.id!r} is also defined in {user_files[spec.id]}"
                )
            devices.append(spec)
            user_files[spec.id] = path
    try:
        return Catalog(devices, base.path, user_files)
    except CatalogError as exc:
        raise CatalogError(f"user devices in {user_dir}: {exc}") from None


def resolve_spec(ref: Any, catalog: Catalog | None = None) -> DeviceSpec:
    """The DeviceSpec a prediction names: a catalog id/spelling, a full spec mapping (parsed
    JSON/YAML), or the path of a spec file holding one device. Errors name what is wrong."""
    if isinstance(ref, DeviceSpec):
        return ref
    if isinstance(ref, dict):
        return spec_from_mapping(ref)
    if isinstance(ref, Path) or (
        isinstance(ref, str) and ref.strip().lower().endswith((".yaml", ".yml", ".json"))
    ):
        specs = read_spec_file(Path(ref))
        if len(specs) != 1:
            raise SpecError(str(ref), [f"holds {len(specs)} devices; name one spec file per device"])
        return specs[0]
    if isinstance(ref, str) and ref.lstrip().startswith("{"):
        import json

        try:
            data = json.loads(ref)
        except json.JSONDecodeError as exc:
            raise SpecError(
                "device spec JSON", [f"not valid JSON ({exc.msg} at column {exc.colno})"]
            ) from None
        return spec_from_mapping(data, "device spec JSON")
    from components.devices.catalog import load_catalog

    return (catalog or load_catalog()).resolve(str(ref))


# Precisions whose ridge points become features; "best" = tensor where present, else vector.
