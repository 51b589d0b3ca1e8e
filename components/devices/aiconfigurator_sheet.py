"""A DeviceSpec from an AIConfigurator system sheet (``systems/<gpu>.yaml``, ai-dynamo/aiconfigurator).

Upstream ships one sheet per GPU beside its measured tables. A sheet gives memory bandwidth and
capacity, board power, the tensor-core peaks it models (``<dtype>_tc_flops`` in FLOP/s:
``bfloat16``, ``float16``, ``float32``, ``fp8``, ``int8``, ``fp4``), the GPU-to-GPU link
(``node.intra_node_bw``, bytes/s per direction) and, on NVIDIA sheets, ``sm_version`` (the compute
capability x 10). It does not give SM count, clocks, caches or the vector pipes.

So a sheet-derived spec takes every figure the sheet has from the sheet, and the structure it lacks
from a *template*: the catalog GPU of the same vendor and compute capability whose tensor peak is
closest (per-SM resources and ratios are fixed within one architecture), or from ``supplement`` (a
mapping of catalog fields, for a vendor or architecture the catalog lacks). Tensor pipes the sheet
omits (e.g. tf32) are the template's scaled by sheet/template tensor peak. The result is validated
like any user spec (``spec_from_mapping``) and its ``notes`` say where each figure came from.
Without a template or a supplement, the missing fields are named in a SpecError: no guesses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.devices.catalog import Catalog, DeviceSpec, _read_yaml, load_catalog
from components.devices.user_specs import SpecError, spec_from_mapping

# Sheet key (``gpu.<key>``) -> catalog tensor pipe. float32_tc_flops is the sheet's only FP32 figure
# (Intel's B60 sheet: 12.28 TFLOP/s, its vector FP32 rate): it bounds FP32, so it is the fp32 peak.
SHEET_PEAKS: dict[str, str] = {
    "bfloat16_tc_flops": "bf16_tensor",
    "float16_tc_flops": "fp16_tensor",
    "fp8_tc_flops": "fp8_tensor",
    "int8_tc_flops": "int8_tensor",
    "fp4_tc_flops": "fp4_tensor",
    "float32_tc_flops": "fp32",
}
# sm_version -> (architecture, compute capability) as the catalog spells them.
SM_ARCHITECTURES: dict[int, str] = {
    60: "pascal",
    61: "pascal",
    70: "volta",
    72: "volta",
    75: "turing",
    80: "ampere",
    86: "ampere",
    87: "ampere",
    89: "ada",
    90: "hopper",
    100: "blackwell",
    103: "blackwell",
    110: "blackwell",
    120: "blackwell",
    121: "blackwell",
}
# Tensor pipes a template lends (scaled) when the sheet omits them.
_SCALED_PIPES: tuple[str, ...] = (
    "fp64_tensor",
    "tf32_tensor",
    "fp16_tensor",
    "bf16_tensor",
    "fp8_tensor",
    "int8_tensor",
    "fp4_tensor",
)
# Structural fields a sheet never gives.
_STRUCTURE: tuple[str, ...] = (
    "sms",
    "fp32_lanes_per_sm",
    "boost_clock_mhz",
    "base_clock_mhz",
    "memory_type",
    "l2_mb",
    "llc_mb",
    "l1_smem_per_sm_kb",
    "max_smem_per_sm_kb",
    "max_smem_per_block_kb",
    "regs_per_sm",
    "max_threads_per_sm",
    "warp_size",
    "max_ctas_per_sm",
    "max_warps_per_sm",
    "l2_gbps",
)
_VECTOR_PIPES: tuple[str, ...] = ("fp64", "fp32", "fp16", "bf16", "int8", "fp32_tensor")


def read_sheet(path: Path) -> dict[str, Any]:
    """The sheet's ``gpu:`` and ``node:`` mappings, checked to hold a bandwidth and a peak."""
    path = Path(path)
    document = _read_yaml(path, "aiconfigurator system sheet")
    if not isinstance(document, dict) or not isinstance(document.get("gpu"), dict):
        raise SpecError(f"aiconfigurator sheet {path}", ["expected a mapping with a 'gpu:' section"])
    gpu = document["gpu"]
    problems = []
    if not _positive(gpu.get("mem_bw")):
        problems.append("gpu.mem_bw (bytes/s) is missing or not a positive number")
    if not any(_positive(gpu.get(key)) for key in SHEET_PEAKS):
        problems.append(f"no peak: expected one of gpu.{', gpu.'.join(SHEET_PEAKS)}")
    if problems:
        raise SpecError(f"aiconfigurator sheet {path}", problems)
    node = document.get("node") if isinstance(document.get("node"), dict) else {}
    return {"gpu": gpu, "node": node}


def _positive(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def sheet_figures(sheet: Mapping[str, Any]) -> dict[str, Any]:
    """What the sheet itself says, in catalog fields and units (TFLOP/s, GB/s, W)."""
    gpu, node = sheet["gpu"], sheet["node"]
    out: dict[str, Any] = {
        "dram_gbps": float(gpu["mem_bw"]) / 1e9,
        "peak_tflops": {
            pipe: float(gpu[key]) / 1e12 for key, pipe in SHEET_PEAKS.items() if _positive(gpu.get(key))
        },
    }
    if _positive(gpu.get("mem_capacity")):
        out["memory_gb"] = round(float(gpu["mem_capacity"]) / 2**30, 2)  # GiB: the catalog's "80 GB" parts
    if _positive(gpu.get("power")):
        out["tdp_w"] = float(gpu["power"])
    if _positive(gpu.get("sm_version")):
        sm = int(gpu["sm_version"])
        out["vendor"] = "nvidia"
        out["compute_capability"] = f"{sm // 10}.{sm % 10}"
        if sm in SM_ARCHITECTURES:
            out["architecture"] = SM_ARCHITECTURES[sm]
    if _positive(node.get("intra_node_bw")):
        out["link_gbps"] = float(node["intra_node_bw"]) / 1e9
    if _positive(node.get("inter_node_bw")):  # bytes/s per GPU per direction (CX7 NDR 400 Gb/s: 50e9)
        out["network_gbps"] = float(node["inter_node_bw"]) / 1e9
    return out


def _headline(peaks: Mapping[str, Any]) -> tuple[str, float] | None:
    """The tensor pipe used to compare a sheet with a template (bf16 first: every NVIDIA sheet has it)."""
    for pipe in ("bf16_tensor", "fp16_tensor", "int8_tensor", "fp8_tensor"):
        value = peaks.get(pipe)
        if value:
            return pipe, float(value)
    return None


def pick_template(figures: Mapping[str, Any], catalog: Catalog) -> DeviceSpec | None:
    """The catalog GPU of the sheet's vendor + compute capability with the closest headline tensor peak."""
    vendor, cc = figures.get("vendor"), figures.get("compute_capability")
    headline = _headline(figures["peak_tflops"])
    if vendor is None or cc is None or headline is None:
        return None
    pipe, value = headline
    same = [
        d
        for d in catalog.all()
        if d.vendor == vendor and d.compute_capability == cc and getattr(d.peak_tflops, pipe) is not None
    ]
    if not same:
        return None
    dram = float(figures.get("dram_gbps") or 0.0)

    def distance(d: DeviceSpec) -> tuple[float, float, str]:  # tensor peak first, then DRAM bandwidth
        return (
            abs(math.log(getattr(d.peak_tflops, pipe) / value)),
            abs(math.log(d.dram_gbps / dram)) if dram > 0 else 0.0,
            d.id,
        )

    return min(same, key=distance)


def spec_from_aiconfigurator_sheet(
    path: Path,
    catalog: Catalog | None = None,
    *,
    device_id: str | None = None,
    name: str | None = None,
    supplement: Mapping[str, Any] | None = None,
) -> DeviceSpec:
    """A validated DeviceSpec for the GPU of sheet ``path`` (see the module doc for the rules).

    ``device_id``/``name`` default to the sheet's file stem (``h20_sxm`` -> ``h20-sxm``);
    ``supplement`` fills (and overrides the template's) structural fields, e.g. for a vendor the
    catalog has no GPU of. Raises SpecError naming the sheet and every missing/implausible field.
    """
    path = Path(path)
    label = f"aiconfigurator sheet {path}"
    figures = sheet_figures(read_sheet(path))
    supplement = dict(supplement or {})
    if catalog is None:
        catalog = load_catalog(user_dir=None)
    stem = path.stem
    entry: dict[str, Any] = {
        "id": device_id or stem.lower().replace("_", "-"),
        "name": name or f"{stem} (aiconfigurator sheet)",
        "aliases": [stem],
    }
    origin: list[str] = [
        f"from the sheet: {', '.join(sorted(k for k in figures if k != 'peak_tflops'))}, "
        f"peaks {', '.join(sorted(figures['peak_tflops']))}"
    ]
    peaks: dict[str, float] = {}
    template = pick_template(
        {**figures, **{k: supplement[k] for k in ("vendor", "compute_capability") if k in supplement}},
        catalog,
    )
    if template is not None:
        base = template.model_dump()
        for key in ("vendor", "architecture", "compute_capability", *_STRUCTURE):
            if base.get(key) is not None:
                entry[key] = base[key]
        pipe, value = _headline(figures["peak_tflops"])  # type: ignore[misc] -- a template implies a headline
        scale = value / float(getattr(template.peak_tflops, pipe))
        for key in _VECTOR_PIPES:
            if base["peak_tflops"].get(key) is not None:
                peaks[key] = base["peak_tflops"][key]
        lent = []
        for key in _SCALED_PIPES:
            if base["peak_tflops"].get(key) is not None and key not in figures["peak_tflops"]:
                peaks[key] = round(base["peak_tflops"][key] * scale, 3)
                lent.append(key)
        origin.append(
            f"structure, clocks, caches and vector pipes from catalog {template.id!r} (same vendor "
            f"and compute capability {template.compute_capability})"
            + (
                f"; {', '.join(lent)} = {template.id}'s x {scale:.3g} (sheet/{template.id} {pipe})"
                if lent
                else ""
            )
        )
    peaks.update(figures["peak_tflops"])
    entry.update({k: v for k, v in figures.items() if k != "peak_tflops"})
    if supplement:
        supplied_peaks = supplement.pop("peak_tflops", None) or {}
        entry.update(supplement)
        peaks.update(supplied_peaks)
        origin.append(f"supplied: {', '.join(sorted([*supplement, *(f'peak {p}' for p in supplied_peaks)]))}")
    entry["peak_tflops"] = peaks
    if "link_gbps" not in DeviceSpec.model_fields:
        entry.pop("link_gbps", None)
    entry["notes"] = "; ".join(origin)
    entry["source"] = f"aiconfigurator system sheet {path.name} (ai-dynamo/aiconfigurator systems/)"
    missing = [
        k
        for k in (
            "vendor",
            "architecture",
            "compute_capability",
            "sms",
            "fp32_lanes_per_sm",
            "boost_clock_mhz",
            "memory_gb",
            "memory_type",
            "l2_mb",
            "l1_smem_per_sm_kb",
            "max_smem_per_sm_kb",
            "max_smem_per_block_kb",
            "regs_per_sm",
            "max_threads_per_sm",
            "tdp_w",
        )
        if entry.get(k) is None
    ]
    if "fp32" not in peaks:
        missing.append("peak_tflops.fp32")
    if missing:
        raise SpecError(
            label,
            [
                f"the sheet does not give {', '.join(missing)} and the catalog has no GPU of "
                "its vendor and compute capability to take them from: pass them as a supplement"
            ],
        )
    return spec_from_mapping(entry, label)


# Sheet figure -> the DeviceSpec attribute ``compare_with_catalog`` holds it against.
_COMPARED: dict[str, str] = {
    "dram_gbps": "dram_gbps",
    "memory_gb": "memory_gb",
    "tdp_w": "tdp_w",
    "link_gbps": "link_gbps",
    "network_gbps": "network_gbps",
    "compute_capability": "compute_capability",
}


def compare_with_catalog(path: Path, spec: DeviceSpec, rel_tol: float = 0.01) -> list[str]:
    """Each figure of sheet ``path`` that differs from catalog entry ``spec`` by more than ``rel_tol``
    (one line each: field, sheet value, catalog value); [] when they agree."""
    figures = sheet_figures(read_sheet(Path(path)))
    lines: list[str] = []
    pairs: list[tuple[str, Any, Any]] = [
        (field, figures.get(field), getattr(spec, attr, None))
        for field, attr in _COMPARED.items()
        if field in figures
    ]
    pairs += [
        (f"peak_tflops.{pipe}", value, getattr(spec.peak_tflops, pipe))
        for pipe, value in figures["peak_tflops"].items()
    ]
    for field, sheet, ours in pairs:
        if isinstance(sheet, str) or isinstance(ours, str) or sheet is None or ours is None:
            if sheet != ours:
                shown = f"{sheet:g}" if isinstance(sheet, float) else sheet
                lines.append(f"{spec.id}: {field}: sheet {shown} vs catalog {ours}")
            continue
        if abs(float(sheet) - float(ours)) > rel_tol * max(abs(float(ours)), 1e-12):
            lines.append(
                f"{spec.id}: {field}: sheet {float(sheet):g} vs catalog {float(ours):g} "
                f"({(float(sheet) / float(ours) - 1) * 100:+.1f}%)"
            )
    return lines


# AIConfigurator's system names: its ``systems/<name>.yaml`` sheets and data folders, ``silicon_sample.csv``'s
# ``system`` column and its collector's ``--gpu`` (the names its README and design notes use: b200_sxm, gb200,
# b300, gb300; the ``_sxm`` spellings of the rack parts too). Each reaches its catalog GPU through the
# catalog's own spellings (``Catalog.resolve``): the CLI, the bench readers and the server accept them alike.
AICONFIGURATOR_SYSTEMS: tuple[str, ...] = (
    "a100_sxm",
    "h100_sxm",
    "h200_sxm",
    "l40s",
    "b200_sxm",
    "b300_sxm",
    "gb200_sxm",
    "gb300_sxm",
    "gb200",
    "gb300",
    "rtx_pro_6000_server",
    "b60",
)


def aiconfigurator_device_id(system: str, catalog: Catalog | None = None) -> str | None:
    """The catalog id of AIConfigurator system ``system`` (``h200_sxm`` -> ``h200``, ``gb300_sxm`` ->
    ``gb300``); None where the catalog has no such GPU (the caller keeps the name and refuses with it)."""
    catalog = catalog or load_catalog(user_dir=None)
    return catalog.resolve(system).id if system in catalog else None


def aiconfigurator_device_ids(catalog: Catalog | None = None) -> frozenset[str]:
    """The catalog ids of every known AIConfigurator system."""
    found = (aiconfigurator_device_id(name, catalog) for name in AICONFIGURATOR_SYSTEMS)
    return frozenset(d for d in found if d is not None)
