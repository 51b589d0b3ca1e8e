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


def _excerpt(tmp_path: Path, entries: int, mutate=None) -> Path:
    root = tmp_path / "benchmark_hub"
    shutil.copytree(ROOT / "kernels", root / "kernels")
    with gzip.open(ROOT / "cachefiles/convolution_milo/W6600.json.gz") as handle:
        data = json.load(handle)
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
    assert set(out.rejects["reason"].str.extract(r"(\w+Config)")[0]) == {
        "RuntimeFailedConfig",
        "CompilationFailedConfig",
    }
    assert set(out.kernels["language"]) == {"cuda", "hip"}  # the W6600 runs the HIP source


def test_excerpt_units(tmp_path: Path) -> None:
    out = ingest(_excerpt(tmp_path, 3), load_catalog())
    with gzip.open(ROOT / "cachefiles/convolution_milo/W6600.json.gz") as handle:
        first = json.load(handle)["cache"]
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
    with pytest.raises(IngestError, match=r"W6600\.json\.gz"):
        ingest(root, load_catalog())


def _cache_named(tmp_path: Path, file_name: str, device_name: object, entries: int = 4) -> Path:
    """A real W6600/A100 excerpt written under ``file_name`` with ``device_name`` replaced."""
    root = tmp_path / "benchmark_hub"
    if not (root / "kernels").exists():
        shutil.copytree(ROOT / "kernels", root / "kernels")
    with gzip.open(ROOT / "cachefiles/convolution_milo/A100.json.gz") as handle:
        data = json.load(handle)
    data["cache"] = dict(list(data["cache"].items())[:entries])
    data["device_name"] = device_name
    folder = root / "cachefiles/convolution_milo"
    folder.mkdir(parents=True, exist_ok=True)
    if file_name.endswith(".gz"):
        with gzip.open(folder / file_name, "wt") as handle:
            json.dump(data, handle)
    else:
        (folder / file_name).write_text(json.dumps(data))
    return root


@pytest.mark.parametrize(
    ("file_name", "device_id", "spelling"),
    [
        ("A100.json.gz", "a100-sxm4-80gb", "A100"),  # bare "A100" = the catalog's meaning of it
        ("convolution_milo_A4000.json", "rtx-a4000", "A4000"),  # plain JSON, GPU at the end
        ("A6000_original.json.gz", "rtx-a6000", "A6000"),
        ("sweep_RTX_3090_run2.json.gz", "rtx-3090", "RTX_3090"),  # longest spelling wins
    ],
)
def test_empty_device_name_takes_the_gpu_from_the_file_name(
    tmp_path: Path, file_name: str, device_id: str, spelling: str
) -> None:
    out = ingest(_cache_named(tmp_path, file_name, ""), load_catalog())
    m = out.measurements
    assert len(m) == 4 and len(out.rejects) == 0 and out.rows_in == 4
    assert set(m["device_id"]) == {device_id}
    # Provenance: the row says where its GPU came from, and the adapter notes it.
    assert set(m["device_name_raw"]) == {f"{spelling} (from file name {file_name}; device_name empty)"}
    assert any("file name" in note and file_name in note for note in out.notes)
    assert set(out.kernels["language"]) == {"cuda"}  # an NVIDIA GPU runs the CUDA source


def test_empty_device_name_and_unknown_file_name_is_rejected_with_both_named(tmp_path: Path) -> None:
    out = ingest(_cache_named(tmp_path, "mystery_gpu.json.gz", None), load_catalog())
    assert len(out.measurements) == 0 and len(out.rejects) == 4 == out.rows_in
    (reason,) = set(out.rejects["reason"])
    assert "device_name is empty" in reason and "mystery_gpu.json.gz" in reason
    assert "unknown device ''" not in reason


def test_named_device_wins_over_the_file_name(tmp_path: Path) -> None:
    out = ingest(_cache_named(tmp_path, "A4000.json.gz", "NVIDIA A100-PCIE-40GB"), load_catalog())
    assert set(out.measurements["device_id"]) == {"a100-pcie-40gb"}
    assert set(out.measurements["device_name_raw"]) == {"NVIDIA A100-PCIE-40GB"} and out.notes == []


def test_t4_format_conversions_are_not_read_as_tesla_t4(tmp_path: Path) -> None:
    root = _cache_named(tmp_path, "A100.json.gz", "NVIDIA A100-PCIE-40GB")
    (root / "cachefiles/convolution_milo/A100_T4.json").write_text(json.dumps([{"T4": "format"}]))
    out = ingest(root, load_catalog())
    assert set(out.measurements["upstream_file"]) == {"cachefiles/convolution_milo/A100.json.gz"}
    assert "t4" not in set(out.measurements["device_id"])
