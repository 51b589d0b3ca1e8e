"""The device catalog: GPU specs as data (``catalog.yaml``), looked up by any spelling.

Every dataset names GPUs its own way ("Tesla T4", "NVIDIA H100 80GB HBM3", "RTX 6000 Ada",
"AMD Radeon PRO W6600"); ``Catalog.resolve`` maps each spelling to one canonical entry so that
measurements carry a catalog id, never a raw name. Specs drive the roofline model and the
device feature vector, so loading validates them strictly and fails naming the bad entry.
"""

from __future__ import annotations

import difflib
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

DEFAULT_CATALOG_PATH: Path = Path(__file__).with_name("catalog.yaml")

# Precision names accepted by ``DeviceSpec.peak_flops``. The first group has a vector pipe
# (key ``<p>``) and may have a tensor pipe (``<p>_tensor``); the second exists only on tensor
# (matrix) cores.
VECTOR_PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "fp16", "bf16", "int8")
TENSOR_ONLY_PRECISIONS: tuple[str, ...] = ("tf32", "fp8", "fp4")
PRECISIONS: tuple[str, ...] = VECTOR_PRECISIONS + TENSOR_ONLY_PRECISIONS

# Vendor prefixes that datasets and drivers put in front of the product name. Stripped before
# matching so "Tesla_T4", "NVIDIA GeForce RTX 3080" and "AMD Instinct MI300X" need no alias.
_PREFIXES: tuple[str, ...] = ("nvidia", "tesla", "geforce", "amd", "instinct", "radeon", "quadro")
_SEPARATORS = re.compile(r"[\s_\-]+")


class CatalogError(ValueError):
    """The catalog file is malformed: the message names the file and the offending entry."""


class UnknownDeviceError(LookupError):
    """A device name that matches no catalog entry; the message lists the closest entries."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        hint = f"; closest matches: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"unknown device {name!r}{hint} (see `kernelcast devices list`)")
        self.name = name
        self.suggestions = suggestions


class PeakTflops(BaseModel):
    """Dense peak throughput per pipe in TFLOP/s (TOP/s for int8); None where no such pipe."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fp64: float | None = Field(default=None, gt=0)
    fp32: float = Field(gt=0)  # every GPU has an FP32 vector pipe; roofline needs it
    fp16: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)
    fp64_tensor: float | None = Field(default=None, gt=0)
    fp32_tensor: float | None = Field(default=None, gt=0)
    tf32_tensor: float | None = Field(default=None, gt=0)
    fp16_tensor: float | None = Field(default=None, gt=0)
    bf16_tensor: float | None = Field(default=None, gt=0)
    fp8_tensor: float | None = Field(default=None, gt=0)
    int8_tensor: float | None = Field(default=None, gt=0)
    fp4_tensor: float | None = Field(default=None, gt=0)


class DeviceSpec(BaseModel):
    """One GPU as its vendor specifies it. Units are in the field names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]*$")
    name: str = Field(min_length=1)
    vendor: Literal["nvidia", "amd"]
    architecture: str = Field(min_length=1)
    compute_capability: str = Field(min_length=1)  # "9.0" on NVIDIA, gfx target on AMD
    sms: int = Field(gt=0)  # SMs (NVIDIA) or CUs (AMD)
    fp32_lanes_per_sm: int = Field(gt=0)
    boost_clock_mhz: float = Field(gt=0)
    base_clock_mhz: float | None = Field(default=None, gt=0)
    memory_gb: float = Field(gt=0)
    memory_type: str = Field(min_length=1)
    dram_gbps: float = Field(gt=0)
    l2_mb: float = Field(gt=0)
    llc_mb: float | None = Field(default=None, gt=0)
    l1_smem_per_sm_kb: float = Field(gt=0)
    max_smem_per_sm_kb: float = Field(gt=0)
    max_smem_per_block_kb: float = Field(gt=0)
    regs_per_sm: int = Field(gt=0)
    max_threads_per_sm: int = Field(gt=0)
    tdp_w: float = Field(gt=0)
    peak_tflops: PeakTflops
    source: str = Field(min_length=1)
    notes: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_gbps * 1e9

    def peak_flops(self, precision: str, tensor: bool | None = False) -> float:
        """Peak rate in FLOP/s (OP/s for int8) of one precision's pipe.

        ``tensor=False``: the vector pipe; ``True``: the tensor/matrix pipe; ``None``: the best the
        device has (tensor where present, else vector) -- the roofline ceiling for a kernel that
        uses the fastest path. tf32/fp8/fp4 exist only on tensor cores, whatever ``tensor`` says.
        Raises ValueError when the device has no such pipe.
        """
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
        peaks = self.peak_tflops
        if precision in TENSOR_ONLY_PRECISIONS:
            candidates = [f"{precision}_tensor"]
        elif tensor is None:
            candidates = [f"{precision}_tensor", precision]
        else:
            candidates = [f"{precision}_tensor" if tensor else precision]
        for key in candidates:
            value = getattr(peaks, key, None)
            if value is not None:
                return float(value) * 1e12
        pipe = "tensor" if tensor or precision in TENSOR_ONLY_PRECISIONS else ("any" if tensor is None else "vector")
        raise ValueError(f"device {self.id!r} has no {precision} {pipe} pipe")

    def has_pipe(self, precision: str, tensor: bool | None = False) -> bool:
        try:
            self.peak_flops(precision, tensor)
        except ValueError:
            return False
        return True

    def ridge_point(self, precision: str = "fp32", tensor: bool | None = False) -> float:
        """Arithmetic intensity (FLOP per DRAM byte) where the roofline turns compute-bound."""
        return self.peak_flops(precision, tensor) / self.dram_bytes_per_s


def normalize_name(name: str) -> str:
    """Lookup key: lower case, vendor prefixes stripped, separators (space _ -) removed."""
    words = _SEPARATORS.split(name.strip().lower())
    words = [w for w in words if w]
    while len(words) > 1 and words[0] in _PREFIXES:
        words = words[1:]
    return "".join(words)


class Catalog:
    """An immutable set of devices with name resolution."""

    def __init__(self, devices: list[DeviceSpec], path: Path | None = None) -> None:
        self.path = path
        self._by_id: dict[str, DeviceSpec] = {}
        self._by_key: dict[str, str] = {}  # normalized spelling -> device id
        for device in devices:
            if device.id in self._by_id:
                raise CatalogError(f"{path or 'catalog'}: duplicate device id {device.id!r}")
            self._by_id[device.id] = device
        for device in devices:
            for spelling in (device.id, device.name, *device.aliases):
                key = normalize_name(spelling)
                owner = self._by_key.setdefault(key, device.id)
                if owner != device.id:
                    raise CatalogError(
                        f"{path or 'catalog'}: device {device.id!r} spelling {spelling!r} is already "
                        f"claimed by device {owner!r} (both normalise to {key!r})"
                    )

    def resolve(self, name: str) -> DeviceSpec:
        """The device a dataset/driver spelling refers to; UnknownDeviceError if none."""
        if not isinstance(name, str) or not name.strip():
            raise UnknownDeviceError(str(name), [])
        device_id = self._by_key.get(normalize_name(name))
        if device_id is None:
            raise UnknownDeviceError(name, self.closest(name))
        return self._by_id[device_id]

    def closest(self, name: str, n: int = 3) -> list[str]:
        """Up to ``n`` device ids whose spellings are most similar to ``name`` (difflib ratio)."""
        key = normalize_name(name)
        scored: dict[str, float] = {}
        for spelling_key, device_id in self._by_key.items():
            score = difflib.SequenceMatcher(None, key, spelling_key).ratio()
            scored[device_id] = max(score, scored.get(device_id, 0.0))
        ranked = sorted(scored.items(), key=lambda item: (-item[1], item[0]))
        return [device_id for device_id, _ in ranked[:n]]

    def get(self, device_id: str) -> DeviceSpec:
        """Exact lookup by canonical id (no normalisation)."""
        try:
            return self._by_id[device_id]
        except KeyError:
            raise UnknownDeviceError(device_id, self.closest(device_id)) from None

    def all(self) -> list[DeviceSpec]:
        return list(self._by_id.values())

    def ids(self) -> list[str]:
        return list(self._by_id)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_name(name) in self._by_key

    def __len__(self) -> int:
        return len(self._by_id)


def _entry_label(index: int, entry: Any) -> str:
    if isinstance(entry, dict) and entry.get("id"):
        return f"entry #{index} (id {entry['id']!r})"
    return f"entry #{index}"


def _parse(path: Path) -> Catalog:
    try:
        # libyaml's loader parses the catalog ~10x faster than the pure-Python one where present.
        document = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise FileNotFoundError(f"device catalog {path}: file not found") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"device catalog {path}: not valid YAML ({exc})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("devices"), list):
        raise CatalogError(f"device catalog {path}: expected a mapping with a 'devices:' list")
    devices: list[DeviceSpec] = []
    for index, entry in enumerate(document["devices"]):
        try:
            devices.append(DeviceSpec.model_validate(entry))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<entry>'}: {err['msg']}" for err in exc.errors()
            )
            raise CatalogError(f"device catalog {path}: {_entry_label(index, entry)}: {problems}") from None
    return Catalog(devices, path)


@lru_cache(maxsize=1)
def _default_catalog() -> Catalog:
    return _parse(DEFAULT_CATALOG_PATH)


def load_catalog(path: Path | None = None) -> Catalog:
    """The catalog at ``path`` (validated); the packaged catalog, parsed once, when None."""
    if path is None:
        return _default_catalog()
    return _parse(Path(path))


# Precisions whose ridge points become features; "best" = tensor where present, else vector.
_RIDGE_FEATURES: tuple[tuple[str, bool | None], ...] = (
    ("fp64", False), ("fp32", False), ("fp16", None), ("bf16", None), ("tf32", None), ("fp8", None),
    ("int8", None),
)


def device_feature_vector(spec: DeviceSpec) -> dict[str, float]:
    """Numeric device features for models; no name or id, so a model can score unseen GPUs.

    Absent pipes are 0.0 (not NaN) so tree and MLP models read "no such pipe" as "no throughput".
    """
    features: dict[str, float] = {
        "dev_sms": float(spec.sms),
        "dev_fp32_lanes_per_sm": float(spec.fp32_lanes_per_sm),
        "dev_boost_clock_mhz": float(spec.boost_clock_mhz),
        # Many sheets publish no base clock; boost is the better stand-in than 0 for a clock.
        "dev_base_clock_mhz": float(spec.base_clock_mhz or spec.boost_clock_mhz),
        "dev_memory_gb": float(spec.memory_gb),
        "dev_dram_gbps": float(spec.dram_gbps),
        "dev_l2_mb": float(spec.l2_mb),
        "dev_llc_mb": float(spec.llc_mb or 0.0),
        "dev_l1_smem_per_sm_kb": float(spec.l1_smem_per_sm_kb),
        "dev_max_smem_per_sm_kb": float(spec.max_smem_per_sm_kb),
        "dev_max_smem_per_block_kb": float(spec.max_smem_per_block_kb),
        "dev_regs_per_sm": float(spec.regs_per_sm),
        "dev_max_threads_per_sm": float(spec.max_threads_per_sm),
        "dev_tdp_w": float(spec.tdp_w),
        "dev_is_amd": 1.0 if spec.vendor == "amd" else 0.0,
        # Aggregate on-chip capacity: what a kernel's working set competes for.
        "dev_total_smem_mb": spec.sms * spec.max_smem_per_sm_kb / 1024.0,
    }
    for key, value in spec.peak_tflops.model_dump().items():
        peak = 0.0 if value is None else float(value)
        features[f"dev_peak_{key}_tflops"] = peak if math.isfinite(peak) else 0.0
    for precision, tensor in _RIDGE_FEATURES:
        label = f"dev_ridge_{precision}" + ("" if tensor is False else "_best")
        features[label] = spec.ridge_point(precision, tensor) if spec.has_pipe(precision, tensor) else 0.0
    return features
