"""Adapter for benchmark_hub: Kernel Tuner brute-force caches of CUDA/HIP kernels, NVIDIA and AMD.

Each cache entry is one tuning configuration: ``time`` is the mean of 32 runs in ms (``times``
holds them). Failed configurations (``CompilationFailedConfig``/``RuntimeFailedConfig``) are
not measurements: they go to rejects with that reason. ``GFLOP/s`` (convolution) and ``GB/s``
(dedispersion) are Kernel Tuner's own metrics, kept as reported.
"""

from __future__ import annotations

import gzip
import json
import statistics
import zlib
from pathlib import Path

import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.schema import (
    KERNEL_COLUMNS,
    MEASUREMENT_COLUMNS,
    REJECT_COLUMNS,
    canonical_json,
    conform,
    stable_id,
)

SOURCE = "benchmark_hub"
KERNELS: dict[str, dict[str, str]] = {
    # cache folder -> family and the kernel source per language
    "convolution_milo": {"family": "conv", "cuda": "kernels/convolution_milo.cu",
                         "hip": "kernels/convolution_milo.cu.hip"},
    "dedispersion_milo": {"family": "dedispersion", "cuda": "kernels/dedisp_milo/dedispersion.cu",
                          "hip": "kernels/dedisp_milo/dedispersion.cu.hip"},
}
FAILED = ("CompilationFailedConfig", "RuntimeFailedConfig", "InvalidConfig")


def _load(path: Path) -> dict:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, EOFError, zlib.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: not a readable gzip JSON cache ({type(exc).__name__}: {exc})") from exc


def _kernel_row(root: Path, folder: str, language: str, kernel_name: str) -> dict[str, object]:
    spec = KERNELS[folder]
    path = root / spec[language]
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    return {"kernel_id": stable_id(SOURCE, folder, kernel_name, language), "source": SOURCE,
            "family": spec["family"], "op": kernel_name, "name": kernel_name, "language": language,
            "program": folder, "source_path": spec[language], "source_text": text, "dtype": "fp32"}


def _one_cache(root: Path, path: Path, catalog) -> tuple[list, list, dict | None, int]:  # noqa: ANN001
    relpath = path.relative_to(root).as_posix()
    folder = path.parent.name
    data = _load(path)
    for key in ("device_name", "kernel_name", "problem_size", "tune_params_keys", "cache"):
        if key not in data:
            raise IngestError(f"{path}: missing top-level key {key!r}")
    if not isinstance(data["cache"], dict):
        raise IngestError(f"{path}: 'cache' is a {type(data['cache']).__name__}, expected an object of configs")
    try:
        device = catalog.resolve(data["device_name"])
    except LookupError:
        # A catalog gap must not silently drop data: every entry of the file is rejected, counted.
        reason = f"unknown device '{data['device_name']}'"
        rejects = [{"source": SOURCE, "upstream_file": relpath, "upstream_row": index, "reason": reason,
                    "raw": config_key} for index, config_key in enumerate(data["cache"])]
        return [], rejects, None, len(rejects)
    language = "hip" if device.vendor == "amd" else "cuda"
    kernel = _kernel_row(root, folder, language, data["kernel_name"])
    run_id = path.name.removesuffix(".json.gz")
    measurements, rejects = [], []
    for index, (config_key, entry) in enumerate(data["cache"].items()):
        time_ms = entry.get("time") if isinstance(entry, dict) else None
        if not isinstance(time_ms, (int, float)):
            reason = time_ms if isinstance(time_ms, str) else f"no numeric time ({type(time_ms).__name__})"
            rejects.append({"source": SOURCE, "upstream_file": relpath, "upstream_row": index,
                            "reason": f"failed configuration: {reason}", "raw": config_key})
            continue
        params = {k: entry.get(k) for k in data["tune_params_keys"]}
        params["problem_size"] = list(data["problem_size"])
        times = [t for t in entry.get("times", []) if isinstance(t, (int, float))]
        measurements.append({
            "kernel_id": kernel["kernel_id"], "device_id": device.id, "device_name_raw": data["device_name"],
            "source": SOURCE, "upstream_file": relpath, "upstream_row": index, "profiler": "kernel_tuner",
            "clock_mode": "unknown", "run_id": run_id, "params_json": canonical_json(params),
            "block_x": entry.get("block_size_x"), "block_y": entry.get("block_size_y"),
            "block_z": entry.get("block_size_z", 1),
            "duration_us": float(time_ms) * 1000.0,
            "duration_std_us": statistics.pstdev(times) * 1000.0 if len(times) > 1 else None,
            "n_trials": len(times) or None,
            # Kernel Tuner's "GB/s" (dedispersion) counts the bytes the algorithm touches, not DRAM
            # traffic; kept as the source reports it, and validation quarantines the rows where it
            # exceeds the DRAM peak (cache reuse) -- see tests/data/test_validation_data.py.
            "gflops": entry.get("GFLOP/s"), "achieved_gbps": entry.get("GB/s"),
        })
    return measurements, rejects, kernel, len(data["cache"])


def ingest(root: Path, catalog) -> AdapterOutput:  # noqa: ANN001 -- catalog: components.devices.Catalog
    require_dir(root, SOURCE)
    caches = sorted((root / "cachefiles").glob("*/*.json.gz"))
    caches = [p for p in caches if p.parent.name in KERNELS]
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
    output = AdapterOutput(SOURCE, conform(pd.DataFrame(measurements), MEASUREMENT_COLUMNS),
                           conform(pd.DataFrame(list(kernels.values())), KERNEL_COLUMNS),
                           conform(pd.DataFrame(rejects), REJECT_COLUMNS), rows_in)
    output.check_balance()
    return output
