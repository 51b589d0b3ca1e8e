"""benchmark_hub adapter on the real caches, an excerpt, and corrupted copies."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from components.devices import load_catalog
from components.ingest.base import IngestError
from components.ingest.benchmark_hub import ingest
from kernelcast.settings import DEFAULT_DATASETS_DIR

ROOT = DEFAULT_DATASETS_DIR / "benchmark_hub"


def _excerpt(tmp_path: Path, entries: int, mutate=None) -> Path:  # noqa: ANN001
    root = tmp_path / "benchmark_hub"
    shutil.copytree(ROOT / "kernels", root / "kernels")
    data = json.load(gzip.open(ROOT / "cachefiles/convolution_milo/W6600.json.gz"))
    data["cache"] = dict(list(data["cache"].items())[:entries])
    if mutate:
        mutate(data)
    (root / "cachefiles/convolution_milo").mkdir(parents=True)
    with gzip.open(root / "cachefiles/convolution_milo/W6600.json.gz", "wt") as handle:
        json.dump(data, handle)
    return root


def test_valid_configurations_match_the_manifest() -> None:
    out = ingest(ROOT, load_catalog())
    counts = out.measurements.groupby("upstream_file").size().to_dict()
    assert counts["cachefiles/convolution_milo/A100.json.gz"] == 4201
    assert counts["cachefiles/convolution_milo/A6000.json.gz"] == 3889
    assert counts["cachefiles/convolution_milo/A6000_original.json.gz"] == 2266
    assert counts["cachefiles/dedispersion_milo/W6600.json.gz"] == 11130
    assert out.rows_in == len(out.measurements) + len(out.rejects)
    assert set(out.rejects["reason"].str.extract(r"(\w+Config)")[0]) == {"RuntimeFailedConfig",
                                                                      "CompilationFailedConfig"}
    assert set(out.kernels["language"]) == {"cuda", "hip"}  # the W6600 runs the HIP source


def test_excerpt_units(tmp_path: Path) -> None:
    out = ingest(_excerpt(tmp_path, 3), load_catalog())
    first = json.load(gzip.open(ROOT / "cachefiles/convolution_milo/W6600.json.gz"))["cache"]
    entry = next(iter(first.values()))
    row = out.measurements.iloc[0]
    assert row["duration_us"] == pytest.approx(entry["time"] * 1000)
    assert row["n_trials"] == 32 and row["gflops"] == pytest.approx(entry["GFLOP/s"])
    assert row["device_id"] == "radeon-pro-w6600"


def test_failed_configuration_is_rejected_with_its_reason(tmp_path: Path) -> None:
    def fail_one(data: dict) -> None:
        key = next(iter(data["cache"]))
        data["cache"][key]["time"] = "RuntimeFailedConfig"

    out = ingest(_excerpt(tmp_path, 3, fail_one), load_catalog())
    assert len(out.measurements) == 2 and out.rejects.iloc[0]["reason"].endswith("RuntimeFailedConfig")


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    root = _excerpt(tmp_path, 50)
    path = root / "cachefiles/convolution_milo/W6600.json.gz"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(IngestError, match="W6600.json.gz"):
        ingest(root, load_catalog())
