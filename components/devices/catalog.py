"""The device catalog: GPU specs as data (``catalog.yaml``), looked up by any spelling.

Every dataset names GPUs its own way ("Tesla T4", "NVIDIA H100 80GB HBM3", "RTX 6000 Ada",
"AMD Radeon PRO W6600"); ``Catalog.resolve`` maps each spelling to one canonical entry so that
measurements carry a catalog id, never a raw name. Specs drive the roofline model and the
device feature vector, so loading validates them strictly and fails naming the bad entry.

Users add GPUs the catalog lacks as spec files in ``$KERNELCAST_HOME/devices`` (``kernelcast
devices add``); ``load_catalog()`` merges them. ``spec_from_mapping`` / ``resolve_spec`` turn a
full spec (JSON/YAML mapping or file) into a DeviceSpec with the same validation, so a prediction
can name a spec instead of a catalog id. Occupancy constants (warp size, resident CTAs/warps per
SM or CU) default per architecture; ``DeviceSpec.supports(dtype)`` says whether a dtype has
hardware on that GPU.
"""

from __future__ import annotations

import difflib
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from components.physics.dtypes import precision_of

DEFAULT_CATALOG_PATH: Path = Path(__file__).with_name("catalog.yaml")

# Precision names accepted by ``DeviceSpec.peak_flops``. The first group has a vector pipe
# (key ``<p>``) and may have a tensor pipe (``<p>_tensor``); the second exists only on tensor
# (matrix) cores.
VECTOR_PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "fp16", "bf16", "int8")
TENSOR_ONLY_PRECISIONS: tuple[str, ...] = ("tf32", "fp8", "fp4")
PRECISIONS: tuple[str, ...] = VECTOR_PRECISIONS + TENSOR_ONLY_PRECISIONS

# Vendor prefixes that datasets and drivers put in front of the product name. Stripped before
# matching so "Tesla_T4", "NVIDIA GeForce RTX 3080" and "AMD Instinct MI300X" need no alias.
_PREFIXES: tuple[str, ...] = ("nvidia", "tesla", "geforce", "amd", "instinct", "radeon", "quadro", "intel")
_MARKS = re.compile(r"\((?:r|tm|c)\)|[®™©]")
_SEPARATORS = re.compile(r"[\s_\-]+")


# Per-architecture occupancy constants, used where an entry does not give them itself.
# NVIDIA: "Technical Specifications per Compute Capability" table of the CUDA C++ Programming
# Guide (maximum resident blocks / warps per SM; warp size 32 on every NVIDIA GPU).
# https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications
_NVIDIA_MAX_CTAS_PER_SM: dict[str, int] = {
    "6.0": 32,
    "6.1": 32,
    "6.2": 32,
    "7.0": 32,
    "7.2": 32,
    "7.5": 16,
    "8.0": 32,
    "8.6": 16,
    "8.7": 16,
    "8.9": 24,
    "9.0": 32,
    "10.0": 32,
    "10.3": 32,
    "11.0": 32,
    "12.0": 32,
    "12.1": 32,
}
# AMD, per architecture: (wavefront size, max waves resident per CU, max workgroups per CU).
# Waves per CU = waves per SIMD x SIMDs per CU as the AMDGPU LLVM backend models them
# (getMaxWavesPerEU: 10 on gfx908, 8 on gfx90a/gfx94x/gfx950, 20 on gfx10 (RDNA1/2; 2 SIMD32 per
# CU), 16 on gfx11/gfx12); workgroups per CU = the backend's getMaxWorkGroupsPerCU cap of 16
# (https://llvm.org/docs/AMDGPUUsage.html). CDNA executes wave64 only; RDNA runs wave32 natively
# (HIP's default there) and wave64 as two passes.
_AMD_OCCUPANCY: dict[str, tuple[int, int, int]] = {
    "gcn5": (64, 40, 16),
    "cdna1": (64, 40, 16),
    "cdna2": (64, 32, 16),
    "cdna3": (64, 32, 16),
    "cdna4": (64, 32, 16),
    "rdna2": (32, 40, 16),
    "rdna3": (32, 32, 16),
    "rdna4": (32, 32, 16),
}


def architecture_defaults(entry: dict[str, Any]) -> dict[str, Any]:
    """Occupancy fields an entry may omit (warp_size, max_ctas_per_sm, max_warps_per_sm), filled
    from its vendor + compute capability / architecture; {} where no default is known."""
    vendor = str(entry.get("vendor", "")).lower()
    out: dict[str, Any] = {}
    if vendor == "nvidia":
        out["warp_size"] = 32
        ctas = _NVIDIA_MAX_CTAS_PER_SM.get(str(entry.get("compute_capability", "")))
        if ctas is not None:
            out["max_ctas_per_sm"] = ctas
        threads = entry.get("max_threads_per_sm")
        if isinstance(threads, int) and threads > 0:
            out["max_warps_per_sm"] = threads // 32
    elif vendor == "amd":
        known = _AMD_OCCUPANCY.get(str(entry.get("architecture", "")).lower())
        if known is not None:
            out["warp_size"], out["max_warps_per_sm"], out["max_ctas_per_sm"] = known
    return out


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
    # Any vendor whose sheet gives the peaks (Intel: aiconfigurator's B60 sheet); occupancy defaults
    # exist for NVIDIA and AMD only, so other vendors' entries give warp_size/max_*_per_sm themselves.
    vendor: Literal["nvidia", "amd", "intel"]
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
    # Occupancy limits (filled per architecture by ``architecture_defaults`` when omitted):
    warp_size: int = Field(gt=0)  # threads per warp (NVIDIA 32) / wavefront (CDNA 64, RDNA 32)
    max_ctas_per_sm: int = Field(gt=0)  # resident thread blocks (workgroups) per SM/CU
    max_warps_per_sm: int = Field(gt=0)  # resident warps (waves) per SM/CU
    l2_gbps: float | None = Field(default=None, gt=0)  # L2 bandwidth in GB/s where published
    # GPU-to-GPU bandwidth per direction in GB/s (NVLink / Infinity Fabric) where the part has such a link;
    # absent = PCIe only (components/physics/roofline.py assumes the architecture's PCIe generation).
    link_gbps: float | None = Field(default=None, gt=0)
    # GPUs one GPU-to-GPU link domain holds as the system is built (HGX board 8, GB200/GB300 NVL72 rack 72)
    # and the scale-out network per GPU per direction in GB/s (ConnectX-7 400 Gb/s: 50): a collective over
    # more GPUs than the domain crosses the network (components/physics/collectives.py). Absent: an 8-GPU
    # node and 50 GB/s, assumed and said so.
    nvlink_domain_gpus: int | None = Field(default=None, gt=0)
    network_gbps: float | None = Field(default=None, gt=0)
    peak_tflops: PeakTflops
    source: str = Field(min_length=1)
    notes: str | None = None
    aliases: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _fill_architecture_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if isinstance(data.get("compute_capability"), (int, float)) and not isinstance(
                data["compute_capability"], bool
            ):  # YAML reads an unquoted 8.9 as a number
                data = {**data, "compute_capability": str(data["compute_capability"])}
            missing = {k: v for k, v in architecture_defaults(data).items() if data.get(k) is None}
            if missing:
                data = {**data, **missing}
        return data

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_gbps * 1e9

    @property
    def lds_per_cu_kb(self) -> float:
        """Shared memory (AMD: LDS) one SM/CU can give to resident blocks -- ``max_smem_per_sm_kb``."""
        return self.max_smem_per_sm_kb

    @property
    def max_resident_threads_per_sm(self) -> int:
        """Thread slots by the hardware's warp/wave slots: ``max_warps_per_sm * warp_size``.

        Equals ``max_threads_per_sm`` on NVIDIA and CDNA; on RDNA, ``max_threads_per_sm`` is what
        HIP reports (2048) while wave32 fills at most 32-40 waves x 32 lanes -- use this one for
        occupancy.
        """
        return self.max_warps_per_sm * self.warp_size

    def unsupported_reason(self, dtype: str) -> str | None:
        """Why this GPU cannot run ``dtype`` natively (no such hardware path), or None if it can.

        A None answer for "mixed"/"unknown"/"int*" dtypes we cannot judge. fp16 on Pascal GP104
        (P4) is native but slow (1/64 rate): that is a peak, not an absence, so it is supported.
        """
        if dtype in WEIGHT_ONLY_DTYPES:  # weights de-quantised on the fly: the math runs in bf16 or fp16
            if self.has_pipe("bf16", tensor=None) or self.has_pipe("fp16", tensor=None):
                return None
            return f"{self.name} has no fp16/bf16 pipe for {dtype}'s math; it would run as fp32"
        precision = precision_of(dtype)
        if precision is None or precision == "fp32":
            return None
        if self.has_pipe(precision, tensor=None):
            return None
        arch = f"{self.name} ({self.architecture}, {self.compute_capability})"
        if precision == "bf16":
            return (
                f"{arch} has no bf16 hardware (no bf16 vector or tensor/matrix pipe); bf16 would be emulated"
            )
        if precision == "fp8":
            return (
                f"{arch} has no fp8 tensor/matrix cores (FP8 arrived with NVIDIA Ada/Hopper and AMD "
                "CDNA3); fp8 would be emulated through fp16/fp32"
            )
        if precision == "tf32":
            return f"{arch} has no TF32 tensor cores; a TF32 matmul runs as plain FP32"
        if precision == "fp4":
            return (
                f"{arch} has no fp4 tensor cores (FP4 arrived with NVIDIA Blackwell and AMD CDNA4); "
                "fp4 would be "
                "emulated through a wider type"
            )
        return f"{arch} has no {precision} pipe"

    def supports(self, dtype: str) -> bool:
        """True when ``dtype`` runs natively on this GPU (see ``unsupported_reason``)."""
        return self.unsupported_reason(dtype) is None

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
        pipe = (
            "tensor"
            if tensor or precision in TENSOR_ONLY_PRECISIONS
            else ("any" if tensor is None else "vector")
        )
        raise ValueError(f"device {self.id!r} has no {precision} {pipe} pipe")

    def has_pipe(self, precision: str, tensor: bool | None = False) -> bool:
        try:
            self.peak_flops(precision, tensor)
        except ValueError:
            return False
        return True

    @property
    def fp32_lanes_shared_with_int32(self) -> bool:
        """True where half the FP32 lanes the FP32 peak counts share their datapath with INT32 (NVIDIA
        GA10x, Orin and AD10x: compute capability 8.6/8.7/8.9): a kernel's integer work (an SGEMM's
        addressing and loop counters) takes issue slots from FP32 there, so its FP32 rate stays further
        below that peak than on a GPU whose FP32 lanes are dedicated (GA100, Hopper)."""
        return self.vendor == "nvidia" and self.compute_capability in ("8.6", "8.7", "8.9")

    def ridge_point(self, precision: str = "fp32", tensor: bool | None = False) -> float:
        """Arithmetic intensity (FLOP per DRAM byte) where the roofline turns compute-bound."""
        return self.peak_flops(precision, tensor) / self.dram_bytes_per_s


# Weight-only formats: weights de-quantised on the fly, the math in bf16 or fp16 (physics/dtypes.py).
WEIGHT_ONLY_DTYPES: frozenset[str] = frozenset({"int8_wo", "int4_wo"})


def normalize_name(name: str) -> str:
    """Lookup key: lower case, trademark marks ((R), (TM), ®, ™) and vendor prefixes stripped, a trailing
    "Graphics" (Intel's and AMD's marketing strings) dropped, separators (space _ -) removed."""
    words = _SEPARATORS.split(_MARKS.sub(" ", name.strip().lower()))
    words = [w for w in words if w]
    while len(words) > 1 and words[0] in _PREFIXES:
        words = words[1:]
    if len(words) > 1 and words[-1] == "graphics":
        words = words[:-1]
    return "".join(words)


class Catalog:
    """An immutable set of devices with name resolution."""

    def __init__(
        self, devices: list[DeviceSpec], path: Path | None = None, user_files: dict[str, Path] | None = None
    ) -> None:
        self.path = path
        # device id -> the user spec file it came from (``kernelcast devices add``); packaged: absent.
        self.user_files: dict[str, Path] = dict(user_files or {})
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

    def with_devices(self, specs: list[DeviceSpec]) -> Catalog:
        """This catalog plus ``specs`` (e.g. full specs a query names instead of catalog ids).

        A spec identical to an entry already here is a no-op; one that reuses an id or spelling
        with different figures raises CatalogError naming the clash.
        """
        extra: list[DeviceSpec] = []
        for spec in specs:
            known = self._by_id.get(spec.id)
            if known is None:
                if spec.id not in {e.id for e in extra}:
                    extra.append(spec)
            elif known != spec:
                raise CatalogError(
                    f"device spec {spec.id!r} differs from the catalog entry with that id; "
                    "give the spec another id"
                )
        if not extra:
            return self
        return Catalog(self.all() + extra, self.path, self.user_files)

    def is_user(self, device_id: str) -> bool:
        """True for a device added from the user folder rather than the packaged catalog."""
        return device_id in self.user_files


def _entry_label(index: int, entry: Any) -> str:
    if isinstance(entry, dict) and entry.get("id"):
        return f"entry #{index} (id {entry['id']!r})"
    return f"entry #{index}"


def _describe(exc: ValidationError) -> list[str]:
    """Pydantic errors as "field: problem" lines a user can act on."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<entry>"
        if err["type"] == "missing":
            problems.append(f"missing field {where!r}")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown key {where!r}")
        else:
            problems.append(f"{where}: {err['msg']}")
    return problems


def _read_yaml(path: Path, what: str) -> Any:
    try:
        # libyaml's loader parses the catalog ~10x faster than the pure-Python one where present.
        return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{what} {path}: not UTF-8 text ({exc.reason})") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{what} {path}: not valid YAML ({exc})") from exc


def _parse_devices(path: Path) -> list[DeviceSpec]:
    document = _read_yaml(path, "device catalog")
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
    return devices


def _parse(path: Path) -> Catalog:
    return Catalog(_parse_devices(path), path)


@lru_cache(maxsize=1)
def _default_catalog() -> Catalog:
    return _parse(DEFAULT_CATALOG_PATH)


_DEFAULT = object()  # "the default user folder" (None means: no user devices)
_merged_cache: dict[tuple, Catalog] = {}


def load_catalog(path: Path | None = None, user_dir: Path | object | None = _DEFAULT) -> Catalog:
    """The device catalog: packaged ``catalog.yaml`` (or ``path``) plus user-added devices.

    ``user_dir``: folder of user spec files merged in. Its default is ``$KERNELCAST_HOME/devices``
    for the packaged catalog and none for an explicit ``path``; pass None for the packaged
    entries only. Parsed once per state of the user folder (files' names, sizes, mtimes).
    """
    from components.devices.user_specs import _user_fingerprint, default_user_devices_dir, merge_user_devices

    if user_dir is _DEFAULT:
        user_dir = default_user_devices_dir() if path is None else None
    base = _default_catalog() if path is None else _parse(Path(path))
    if user_dir is None:
        return base
    user_dir = Path(user_dir)  # type: ignore[arg-type]
    fingerprint = _user_fingerprint(user_dir)
    if not fingerprint:
        return base
    if path is not None:
        return merge_user_devices(base, user_dir)
    key = (str(user_dir.resolve()), fingerprint)
    if key not in _merged_cache:
        _merged_cache.clear()
        _merged_cache[key] = merge_user_devices(base, user_dir)
    return _merged_cache[key]


_RIDGE_FEATURES: tuple[tuple[str, bool | None], ...] = (
    ("fp64", False),
    ("fp32", False),
    ("fp16", None),
    ("bf16", None),
    ("tf32", None),
    ("fp8", None),
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
        # Occupancy limits per SM/CU (counts, architecture constants -- transfer across GPUs).
        "dev_warp_size": float(spec.warp_size),
        "dev_max_ctas_per_sm": float(spec.max_ctas_per_sm),
        "dev_max_warps_per_sm": float(spec.max_warps_per_sm),
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
