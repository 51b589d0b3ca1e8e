"""Device catalog: name resolution, spec arithmetic, validation, dataset coverage and the CLI."""

from __future__ import annotations

import csv
import gzip
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.devices import (
    DEFAULT_CATALOG_PATH,
    Catalog,
    CatalogError,
    UnknownDeviceError,
    device_feature_vector,
    load_catalog,
)
from kernelcast.commands.devices import app
from kernelcast.settings import get_settings

DATASETS: Path = get_settings().datasets_dir
needs_datasets = pytest.mark.skipif(not DATASETS.is_dir(), reason=f"public datasets not at {DATASETS}")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


# ------------------------------------------------------------------ resolution


@pytest.mark.parametrize(
    ("spelling", "device_id"),
    [
        ("A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA_A100_80GB_PCIe", "a100-pcie-80gb"),  # NeuSight device_configs file stem
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # NVML's name for the SXM5 part
        ("h100", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("Tesla T4", "t4"),
        ("tesla_t4", "t4"),
        ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
        ("NVIDIA GeForce RTX 3080", "rtx-3080"),
        ("AMD Radeon PRO W6600", "radeon-pro-w6600"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("RTX 6000 Ada", "rtx-6000-ada"),  # PipeWeave hardware file stem
        ("RTX_PRO_6000_S", "rtx-pro-6000-s"),  # PipeWeave e2e file stem
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A10", "a10"),
        ("A100", "a100-sxm4-80gb"),  # PipeWeave's bare A100 is the SXM4 80 GB card
        ("AMD Instinct MI300X", "mi300x"),
        ("  l40s ", "l40s"),
    ],
)
def test_resolves_dataset_spellings(catalog: Catalog, spelling: str, device_id: str) -> None:
    assert catalog.resolve(spelling).id == device_id


def test_similar_names_stay_distinct(catalog: Catalog) -> None:
    # Prefix stripping and separator removal must not merge different products.
    ids = {catalog.resolve(n).id for n in ("A10", "A100", "A100-SXM4-40GB", "L4", "L40", "L40S", "H20", "H200")}
    assert len(ids) == 8


def test_unknown_name_lists_close_matches(catalog: Catalog) -> None:
    with pytest.raises(UnknownDeviceError) as info:
        catalog.resolve("NVIDIA H10")
    message = str(info.value)
    assert "'NVIDIA H10'" in message
    assert len(info.value.suggestions) == 3
    assert "h100-sxm" in info.value.suggestions
    assert all(s in message for s in info.value.suggestions)
    assert isinstance(info.value, LookupError)


def test_get_is_exact_and_all_ids_agree(catalog: Catalog) -> None:
    assert catalog.get("t4").name == "Tesla T4"
    with pytest.raises(UnknownDeviceError):
        catalog.get("Tesla T4")  # get() takes ids only; resolve() takes spellings
    assert catalog.ids() == [d.id for d in catalog.all()]
    assert len(set(catalog.ids())) == len(catalog) >= 33


def test_default_catalog_is_cached(catalog: Catalog) -> None:
    assert load_catalog() is catalog
    assert load_catalog(DEFAULT_CATALOG_PATH) is not catalog  # an explicit path re-reads the file


# ------------------------------------------------------------------ spec arithmetic


def test_h100_ridge_point_by_hand(catalog: Catalog) -> None:
    h100 = catalog.resolve("h100")
    assert h100.dram_bytes_per_s == pytest.approx(3350e9)
    assert h100.peak_flops("fp32") == pytest.approx(66.9e12)
    assert h100.ridge_point("fp32") == pytest.approx(66.9e12 / 3350e9)  # ~19.97 FLOP/B
    assert h100.ridge_point("fp16", tensor=True) == pytest.approx(989.4e12 / 3350e9)


def test_peak_flops_pipes(catalog: Catalog) -> None:
    a100 = catalog.get("a100-pcie-40gb")
    assert a100.peak_flops("fp64") == pytest.approx(9.7e12)
    assert a100.peak_flops("fp64", tensor=True) == pytest.approx(19.5e12)
    assert a100.peak_flops("tf32") == pytest.approx(156e12)  # tensor-only precision
    p100 = catalog.get("p100-pcie-16gb")
    assert p100.peak_flops("fp16", tensor=None) == pytest.approx(18.7e12)  # no tensor cores: vector
    with pytest.raises(ValueError, match="no fp16 tensor pipe"):
        p100.peak_flops("fp16", tensor=True)
    with pytest.raises(ValueError, match="no fp8"):
        a100.peak_flops("fp8")
    with pytest.raises(ValueError, match="precision 'fp12'"):
        a100.peak_flops("fp12")


def test_vector_fp32_matches_sm_arithmetic(catalog: Catalog) -> None:
    # Published FP32 peak = SMs x FP32 lanes x 2 (FMA) x boost clock; catches a typo in any field.
    for d in catalog.all():
        derived = d.sms * d.fp32_lanes_per_sm * 2 * d.boost_clock_mhz * 1e6
        assert d.peak_flops("fp32") == pytest.approx(derived, rel=0.03), d.id


def test_tensor_peaks_are_ordered(catalog: Catalog) -> None:
    for d in catalog.all():
        p = d.peak_tflops
        if p.fp16_tensor is not None:
            assert p.fp16_tensor >= p.fp32, d.id
        if p.fp8_tensor is not None and p.bf16_tensor is not None:
            assert p.fp8_tensor == pytest.approx(2 * p.bf16_tensor, rel=0.02), d.id
        assert d.max_smem_per_block_kb <= d.max_smem_per_sm_kb <= d.l1_smem_per_sm_kb, d.id


def test_feature_vector_is_numeric_and_anonymous(catalog: Catalog) -> None:
    t4 = catalog.get("t4")
    features = device_feature_vector(t4)
    assert all(isinstance(v, float) for v in features.values())
    assert features["dev_sms"] == 40.0
    assert features["dev_peak_bf16_tensor_tflops"] == 0.0  # Turing has no bf16: 0, not NaN
    assert features["dev_ridge_fp32"] == pytest.approx(8.1e12 / 320e9)
    assert features["dev_ridge_fp16_best"] == pytest.approx(65e12 / 320e9)
    assert not any(t4.id in str(k) or "t4" in str(v) for k, v in features.items())
    # Same keys for every device, so one model input layout covers unseen GPUs.
    assert {tuple(device_feature_vector(d)) for d in catalog.all()} == {tuple(features)}


# ------------------------------------------------------------------ validation


def _write_catalog(tmp_path: Path, mutate: Callable[[list[dict]], None]) -> Path:
    document = yaml.safe_load(DEFAULT_CATALOG_PATH.read_text())
    mutate(document["devices"])
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_validation_rejects_alias_claimed_twice(tmp_path: Path) -> None:
    def steal(devices: list[dict]) -> None:
        next(d for d in devices if d["id"] == "l4")["aliases"].append("Tesla-T4")  # T4's name

    with pytest.raises(CatalogError, match=r"'l4'.*'Tesla-T4'.*claimed by device 't4'"):
        load_catalog(_write_catalog(tmp_path, steal))


def test_validation_rejects_duplicate_id(tmp_path: Path) -> None:
    def duplicate(devices: list[dict]) -> None:
        devices.append({**devices[0], "aliases": []})

    with pytest.raises(CatalogError, match="duplicate device id 'p4'"):
        load_catalog(_write_catalog(tmp_path, duplicate))


def test_validation_names_entry_with_missing_field(tmp_path: Path) -> None:
    def drop(devices: list[dict]) -> None:
        del next(d for d in devices if d["id"] == "a40")["dram_gbps"]

    with pytest.raises(CatalogError, match=r"id 'a40'.*dram_gbps: Field required"):
        load_catalog(_write_catalog(tmp_path, drop))


def test_validation_rejects_unknown_peak_key(tmp_path: Path) -> None:
    def typo(devices: list[dict]) -> None:
        devices[3]["peak_tflops"]["fp16_tensro"] = 1.0

    with pytest.raises(CatalogError, match=r"peak_tflops\.fp16_tensro"):
        load_catalog(_write_catalog(tmp_path, typo))


# ------------------------------------------------------------------ every dataset spelling resolves


def _csv_column(path: Path, column: str) -> set[str]:
    with path.open(newline="") as handle:
        return {row[column] for row in csv.DictReader(handle) if row.get(column)}


def _hardware_fields(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("hardware"), str):
            yield node["hardware"]
        for value in node.values():
            yield from _hardware_fields(value)


def dataset_device_names(root: Path) -> dict[str, set[str]]:
    """Every raw GPU spelling, per source, from the files the ingest adapters read."""
    names: dict[str, set[str]] = {}
    neusight = root / "neusight"
    ns = names.setdefault("neusight", set())
    for path in sorted(neusight.glob("scripts/asplos/data/dataset/test/*.csv")):
        ns |= _csv_column(path, "Device")
    for path in sorted(neusight.rglob("device_configs/*.json")):
        ns.add(json.loads(path.read_text())["Device"])
        ns.add(path.stem.removesuffix("_TP"))
    names["gpuflopbench"] = set()
    for path in sorted((root / "gpuflopbench").rglob("cuda-profiling/profiling-data.csv")):
        names["gpuflopbench"] |= _csv_column(path, "device")
    names["kernelbench"] = set()
    for path in sorted((root / "kernelbench").rglob("results/timing/**/*.json")):
        names["kernelbench"] |= set(_hardware_fields(json.loads(path.read_text())))
    names["benchmark_hub"] = set()
    for path in sorted((root / "benchmark_hub").glob("cachefiles/*/*.json.gz")):
        with gzip.open(path, "rt") as handle:
            # device_name precedes the large cache in these files; a regex avoids parsing 5 MB each.
            match = re.search(r'"device_name"\s*:\s*"([^"]+)"', handle.read(4096))
        assert match, f"{path}: no device_name in its header"
        names["benchmark_hub"].add(match.group(1))
    pipeweave = root / "pipeweave"
    pw = names.setdefault("pipeweave", set())
    for path in sorted(pipeweave.glob("dataset/gemm_fp8_*.csv")):
        pw |= _csv_column(path, "hardware")
    for path in sorted(pipeweave.glob("hardware/*.json")):
        pw |= {json.loads(path.read_text())["name"], path.stem}
    for path in sorted(pipeweave.rglob("kernel_reports/topk_underperforming_*.csv")):
        pw.add(path.stem.removeprefix("topk_underperforming_").removesuffix("_sampled"))
    for path in sorted(pipeweave.rglob("e2e_*.jsonl")):
        pw.add(re.sub(r"^e2e_(tp\d+_)?", "", path.stem))
    return names


@needs_datasets
def test_every_dataset_device_name_resolves(catalog: Catalog) -> None:
    names = dataset_device_names(DATASETS)
    # The scan must actually find the GPUs the MANIFEST documents, or a layout change went unnoticed.
    assert {"Tesla P4", "NVIDIA L4", "NVIDIA H100 80GB HBM3"} <= names["neusight"]
    assert names["gpuflopbench"] == {"NVIDIA GeForce RTX 3080"}
    assert {"NVIDIA H200", "NVIDIA A10G", "Tesla T4", "NVIDIA L40S"} <= names["kernelbench"]
    assert "AMD Radeon PRO W6600" in names["benchmark_hub"]
    assert {"NVIDIA H20", "NVIDIA H800", "RTX PRO 6000 S"} <= names["pipeweave"]
    unresolved = sorted(f"{source}: {n!r}" for source, spellings in names.items() for n in spellings if n not in catalog)
    assert unresolved == []
    resolved = {catalog.resolve(n).id for spellings in names.values() for n in spellings}
    assert len(resolved) >= 25  # distinct GPUs across the five sources


@needs_datasets
def test_catalog_agrees_with_pipeweave_hardware_specs(catalog: Catalog) -> None:
    # PipeWeave's JSONs come from deviceQuery on the real cards: an independent check of the sheet data.
    for path in sorted((DATASETS / "pipeweave" / "hardware").glob("*.json")):
        hw = json.loads(path.read_text())
        spec = catalog.resolve(hw["name"])
        assert spec.sms == hw["numSms"], spec.id
        assert spec.l2_mb == pytest.approx(hw["l2CacheSize"] / 1024), spec.id
        assert spec.compute_capability == f"{hw['computeMajor']}.{hw['computeMinor']}", spec.id
        assert spec.max_smem_per_sm_kb == hw["sharedMemorySize"], spec.id
        assert spec.fp32_lanes_per_sm == hw["FmaFp32"], spec.id
        assert spec.dram_gbps == pytest.approx(hw["memBandwidth"], rel=0.03), spec.id


# ------------------------------------------------------------------ CLI


runner = CliRunner()


def test_cli_list_table_and_vendor_filter() -> None:
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].split()[:2] == ["id", "name"]
    assert len(lines) == len(load_catalog()) + 1
    amd = runner.invoke(app, ["list", "--vendor", "amd", "--json"])
    assert amd.exit_code == 0, amd.output
    rows = json.loads(amd.output)
    assert {r["id"] for r in rows} == {"mi100", "mi210", "mi250x", "mi300x", "radeon-pro-w6600"}
    mi300x = next(r for r in rows if r["id"] == "mi300x")
    assert mi300x["fp16_tensor_tflops"] == pytest.approx(1307.4) and mi300x["dram_gbps"] == 5300


def test_cli_show_text_and_json() -> None:
    text = runner.invoke(app, ["show", "NVIDIA H100 80GB HBM3"])
    assert text.exit_code == 0, text.output
    assert "h100-sxm" in text.output and "datasheet" in text.output and "fp8_tensor" in text.output
    as_json = runner.invoke(app, ["show", "Tesla T4", "--json"])
    record = json.loads(as_json.output)
    assert record["id"] == "t4" and record["sms"] == 40
    assert record["ridge_flop_per_byte"]["fp32"] == pytest.approx(8.1e12 / 320e9, abs=0.01)
    assert "bf16" not in record["ridge_flop_per_byte"]  # Turing has no bf16 pipe
    assert record["source"].startswith("NVIDIA T4 datasheet")


def test_cli_unknown_device_is_one_line_exit_2() -> None:
    result = runner.invoke(app, ["show", "RTX 5090"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert line.startswith("error: unknown device 'RTX 5090'") and "rtx-4090" in line


def test_cli_bad_vendor_exit_2() -> None:
    result = runner.invoke(app, ["list", "--vendor", "intel"])
    assert result.exit_code == 2
    assert "--vendor 'intel'" in result.output
