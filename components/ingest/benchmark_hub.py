"""Adapter for benchmark_hub: Kernel Tuner brute-force caches of CUDA/HIP kernels, NVIDIA and AMD.

Each cache entry is one tuning configuration: ``time`` is the mean of 32 runs in ms (``times``
holds them). Failed configurations (``CompilationFailedConfig``/``RuntimeFailedConfig``) are
not measurements: they go to rejects with that reason. ``GFLOP/s`` (convolution) and ``GB/s``
(dedispersion) are Kernel Tuner's own metrics, kept as reported.

The GPU is the cache's ``device_name``. Some upstream caches leave it empty; their file is named
after the GPU (``A100.json.gz``, ``..._A100.json``), so the GPU is taken from the file name and the
row's ``device_name_raw`` says so (``"A100 (from file name A100.json.gz; device_name empty)"``).
``*_T4.json[.gz]`` files are Kernel Tuner's T4-format conversions (another schema), not Tesla T4
caches: they are skipped.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import (
    canonical_json,
    stable_id,
)

SOURCE = "benchmark_hub"
KERNELS: dict[str, dict[str, str]] = {
    # cache folder -> family and the kernel source per language
    "convolution_milo": {
        "family": "conv",
        "cuda": "kernels/convolution_milo.cu",
        "hip": "kernels/convolution_milo.cu.hip",
    },
    "dedispersion_milo": {
        "family": "dedispersion",
        "cuda": "kernels/dedisp_milo/dedispersion.cu",
        "hip": "kernels/dedisp_milo/dedispersion.cu.hip",
    },
}
FAILED = ("CompilationFailedConfig", "RuntimeFailedConfig", "InvalidConfig")


def _load(path: Path) -> dict:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                data = json.load(handle)
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise IngestError(f"{path}: expected a JSON object at the top level, found {type(data).__name__}")
        return data
    except (OSError, EOFError, zlib.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: not a readable gzip JSON cache ({type(exc).__name__}: {exc})") from exc


def _cache_stem(path: Path) -> str:
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def device_from_file_name(path: Path, catalog) -> tuple[object, str] | None:
    """(device spec, the spelling matched) named by a cache's file name, or None.

    Tries the whole stem, then every run of ``_``-separated words, longest first and rightmost
    first ("convolution_A100" -> "A100"; "A6000_original" -> "A6000").
    """
    words = [w for w in _cache_stem(path).split("_") if w]
    spans = sorted(
        ((i, j) for i in range(len(words)) for j in range(i + 1, len(words) + 1)),
        key=lambda span: (span[0] - span[1], -span[1]),
    )
    for i, j in spans:
        spelling = "_".join(words[i:j])
        if spelling in catalog:
            return catalog.resolve(spelling), spelling
    return None


def _kernel_row(root: Path, folder: str, language: str, kernel_name: str) -> dict[str, object]:
    spec = KERNELS[folder]
    path = root / spec[language]
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    return {
        "kernel_id": stable_id(SOURCE, folder, kernel_name, language),
        "source": SOURCE,
        "family": spec["family"],
        "op": kernel_name,
        "name": kernel_name,
        "language": language,
        "program": folder,
        "source_path": spec[language],
        "source_text": text,
        "dtype": "fp32",
    }


def _pstdev(values: list[float]) -> float:
    """Population standard deviation in floats (math.fsum: correctly rounded sums). statistics.pstdev is
    exact in Fractions and ~20x slower: over the hub's 63k configurations it was 53 of the ingest stage's
    ~380 profiled seconds; the two agree to about one unit in the last place."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def _one_cache(root: Path, path: Path, catalog) -> tuple[list, list, dict | None, int]:
    relpath = path.relative_to(root).as_posix()
    folder = path.parent.name
    data = _load(path)
    for key in ("device_name", "kernel_name", "problem_size", "tune_params_keys", "cache"):
        if key not in data:
            raise IngestError(f"{path}: missing top-level key {key!r}")
    if not isinstance(data["cache"], dict):
        raise IngestError(
            f"{path}: 'cache' is a {type(data['cache']).__name__}, expected an object of configs"
        )
    raw_name = data["device_name"] if isinstance(data["device_name"], str) else ""
    device = None
    if raw_name.strip():
        try:
            device = catalog.resolve(raw_name)
        except LookupError:
            device = None
        reason = f"unknown device '{raw_name}'"
    else:
        found = device_from_file_name(path, catalog)
        if found is not None:
            device, spelling = found
            raw_name = f"{spelling} (from file name {path.name}; device_name empty)"
        reason = f"device_name is empty and file name {path.name!r} names no catalog GPU"
    if device is None:
        # A catalog gap must not silently drop data: every entry of the file is rejected, counted.
        rejects = [
            {
                "source": SOURCE,
                "upstream_file": relpath,
                "upstream_row": index,
                "reason": reason,
                "raw": config_key,
            }
            for index, config_key in enumerate(data["cache"])
        ]
        return [], rejects, None, len(rejects)
    language = "hip" if device.vendor == "amd" else "cuda"
    kernel = _kernel_row(root, folder, language, data["kernel_name"])
    run_id = _cache_stem(path)
    measurements, rejects = [], []
    for index, (config_key, entry) in enumerate(data["cache"].items()):
        time_ms = entry.get("time") if isinstance(entry, dict) else None
        if not isinstance(time_ms, (int, float)):
            reason = time_ms if isinstance(time_ms, str) else f"no numeric time ({type(time_ms).__name__})"
            rejects.append(
                {
                    "source": SOURCE,
                    "upstream_file": relpath,
                    "upstream_row": index,
                    "reason": f"failed configuration: {reason}",
                    "raw": config_key,
                }
            )
            continue
        params = {k: entry.get(k) for k in data["tune_params_keys"]}
        params["problem_size"] = list(data["problem_size"])
        times = [t for t in entry.get("times", []) if isinstance(t, (int, float))]
        measurements.append(
            {
                "kernel_id": kernel["kernel_id"],
                "device_id": device.id,
                "device_name_raw": raw_name,
                "source": SOURCE,
                "upstream_file": relpath,
                "upstream_row": index,
                "profiler": "kernel_tuner",
                "clock_mode": "unknown",
                "run_id": run_id,
                "params_json": canonical_json(params),
                "block_x": entry.get("block_size_x"),
                "block_y": entry.get("block_size_y"),
                "block_z": entry.get("block_size_z", 1),
                "duration_us": float(time_ms) * 1000.0,
                "duration_std_us": _pstdev(times) * 1000.0 if len(times) > 1 else None,
                "n_trials": len(times) or None,
                # Kernel Tuner's "GB/s" (dedispersion) counts the bytes the algorithm touches, not DRAM
                # traffic; kept as the source reports it, and validation quarantines the rows where it
                # exceeds the DRAM peak (cache reuse) -- see tests/data/test_validation_data.py.
                "gflops": entry.get("GFLOP/s"),
                "achieved_gbps": entry.get("GB/s"),
            }
        )
    return measurements, rejects, kernel, len(data["cache"])


def ingest(root: Path, catalog) -> AdapterOutput:
    require_dir(root, SOURCE)
    caches = sorted({*(root / "cachefiles").glob("*/*.json.gz"), *(root / "cachefiles").glob("*/*.json")})
    caches = [p for p in caches if p.parent.name in KERNELS and not _cache_stem(p).endswith("_T4")]
    if not caches:
        raise IngestError(f"{SOURCE}: no cachefiles/<kernel>/*.json.gz under {root}")
    measurements, rejects, kernels, rows_in = [], [], {}, 0
    for path in caches:
        m, r, kernel, n = _one_cache(root, path, catalog)
        measurements += m
        rejects += r
        if kernel is not None:
            kernels[kernel["kernel_id"]] = kernel
        rows_in += n
    from_name = sorted(
        {m["upstream_file"] for m in measurements if "(from file name" in str(m["device_name_raw"])}
    )
    notes = (
        [
            f"device_name empty: GPU taken from the file name of {', '.join(from_name)} "
            "(device_name_raw says so per row)"
        ]
        if from_name
        else []
    )
    return AdapterOutput.conformed(
        SOURCE,
        measurements,
        list(kernels.values()),
        rejects,
        rows_in,
        notes=notes,
    )
