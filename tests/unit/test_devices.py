"""Device catalog: name resolution, spec arithmetic, validation, dataset coverage and the CLI."""

from __future__ import annotations

import csv
import gzip
import json
import os
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
    SpecError,
    UnknownDeviceError,
    device_feature_vector,
    load_catalog,
    precision_of,
    resolve_spec,
    spec_from_mapping,
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
    ids = {
        catalog.resolve(n).id for n in ("A10", "A100", "A100-SXM4-40GB", "L4", "L40", "L40S", "H20", "H200")
    }
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
    # Per-GPU collect files are named after the GPU (NVIDIA train files; the AMD collection, when present).
    for path in sorted(neusight.glob("scripts/asplos/data/dataset*/*/collect/*/*/*.csv")):
        ns.add(path.stem)
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
            match = re.search(r'"device_name"\s*:\s*"([^"]*)"', handle.read(4096))
        assert match, f"{path}: no device_name in its header"
        # An empty device_name: the adapter takes the GPU from the file name, so must the scan.
        if match.group(1):
            names["benchmark_hub"].add(match.group(1))
        else:
            from components.ingest.benchmark_hub import device_from_file_name

            found = device_from_file_name(path, load_catalog())
            names["benchmark_hub"].add(found[1] if found else path.name)
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
    unresolved = sorted(
        f"{source}: {n!r}" for source, spellings in names.items() for n in spellings if n not in catalog
    )
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
        assert spec.l2_gbps == hw["l2CacheBandwidth"], spec.id  # l2_gbps is taken from these files


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
    assert {"mi100", "mi210", "mi250x", "mi300x", "radeon-pro-w6600", "mi355x", "rx-7900-xtx"} <= {
        r["id"] for r in rows
    }
    assert {r["id"] for r in rows} == {d.id for d in load_catalog().all() if d.vendor == "amd"}
    mi300x = next(r for r in rows if r["id"] == "mi300x")
    assert mi300x["fp16_tensor_tflops"] == pytest.approx(1307.4) and mi300x["dram_gbps"] == 5300
    assert mi300x["user"] is False


def test_cli_show_text_and_json() -> None:
    text = runner.invoke(app, ["show", "NVIDIA H100 80GB HBM3"])
    assert text.exit_code == 0, text.output
    assert "h100-sxm" in text.output and "datasheet" in text.output and "fp8_tensor" in text.output
    as_json = runner.invoke(app, ["show", "Tesla T4", "--json"])
    record = json.loads(as_json.output)
    assert record["id"] == "t4" and record["sms"] == 40
    assert record["ridge_flop_per_byte"]["fp32"] == pytest.approx(8.1e12 / 320e9, abs=0.01)
    assert "bf16" not in record["ridge_flop_per_byte"]  # Turing has no bf16 pipe
    assert record["source"].startswith("NVIDIA T4 datasheet") and record["origin"] == "catalog"


def test_cli_unknown_device_is_one_line_exit_2() -> None:
    result = runner.invoke(app, ["show", "RTX 4095"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert line.startswith("error: unknown device 'RTX 4095'") and "rtx-4090" in line


def test_cli_bad_vendor_exit_2() -> None:
    result = runner.invoke(app, ["list", "--vendor", "acme"])
    assert result.exit_code == 2
    assert "--vendor 'acme'" in result.output


# ------------------------------------------------------------------ coverage (issue 12)

# Every data-centre GPU of both vendors since 2016, and the current workstation/consumer lines:
# (spelling a user or driver would type, catalog id).
COVERAGE: list[tuple[str, str]] = [
    ("Tesla P4", "p4"),
    ("Tesla P40", "p40"),
    ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
    ("Tesla P100-PCIE-12GB", "p100-pcie-12gb"),
    ("Tesla P100-SXM2-16GB", "p100-sxm2-16gb"),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Tesla V100S-PCIE-32GB", "v100s-pcie-32gb"),
    ("Tesla T4", "t4"),
    ("NVIDIA A2", "a2"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA A16", "a16"),
    ("NVIDIA A30", "a30"),
    ("NVIDIA A40", "a40"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA A800-SXM4-80GB", "a800-sxm4-80gb"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H20", "h20"),
    ("NVIDIA H800", "h800"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("GH200 144GB HBM3e", "gh200-144gb"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L20", "l20"),
    ("NVIDIA L40", "l40"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA B100", "b100"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GB200", "gb200"),
    ("NVIDIA B300", "b300"),
    ("AMD Radeon Instinct MI25", "mi25"),
    ("AMD Instinct MI50", "mi50"),
    ("AMD Instinct MI60", "mi60"),
    ("AMD Instinct MI100", "mi100"),
    ("AMD Instinct MI210", "mi210"),
    ("AMD Instinct MI250", "mi250"),
    ("AMD Instinct MI250X", "mi250x"),
    ("AMD Instinct MI250X / MI250", "mi250x-gcd"),
    ("AMD Instinct MI300A", "mi300a"),
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI350X", "mi350x"),
    ("AMD Instinct MI355X", "mi355x"),
    # workstation
    ("NVIDIA RTX A2000", "rtx-a2000"),
    ("NVIDIA RTX A4000", "rtx-a4000"),
    ("NVIDIA RTX A4500", "rtx-a4500"),
    ("NVIDIA RTX A5000", "rtx-a5000"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA RTX 2000 Ada Generation", "rtx-2000-ada"),
    ("NVIDIA RTX 4000 Ada Generation", "rtx-4000-ada"),
    ("NVIDIA RTX 4500 Ada Generation", "rtx-4500-ada"),
    ("NVIDIA RTX 5000 Ada Generation", "rtx-5000-ada"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-s"),
    ("AMD Radeon PRO W6600", "radeon-pro-w6600"),
    ("AMD Radeon PRO W6800", "radeon-pro-w6800"),
    ("AMD Radeon PRO W7800", "radeon-pro-w7800"),
    ("AMD Radeon PRO W7900", "radeon-pro-w7900"),
    # consumer
    ("NVIDIA GeForce RTX 2060", "rtx-2060"),
    ("NVIDIA GeForce RTX 2070", "rtx-2070"),
    ("NVIDIA GeForce RTX 2080", "rtx-2080"),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti"),
    ("NVIDIA TITAN RTX", "titan-rtx"),
    ("NVIDIA GeForce RTX 3060", "rtx-3060"),
    ("NVIDIA GeForce RTX 3060 Ti", "rtx-3060-ti"),
    ("NVIDIA GeForce RTX 3070", "rtx-3070"),
    ("NVIDIA GeForce RTX 3070 Ti", "rtx-3070-ti"),
    ("NVIDIA GeForce RTX 3080", "rtx-3080"),
    ("NVIDIA GeForce RTX 3080 Ti", "rtx-3080-ti"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti"),
    ("NVIDIA GeForce RTX 4060", "rtx-4060"),
    ("NVIDIA GeForce RTX 4060 Ti", "rtx-4060-ti"),
    ("NVIDIA GeForce RTX 4070", "rtx-4070"),
    ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti"),
    ("NVIDIA GeForce RTX 4080", "rtx-4080"),
    ("NVIDIA GeForce RTX 4080 SUPER", "rtx-4080-super"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 5070", "rtx-5070"),
    ("NVIDIA GeForce RTX 5070 Ti", "rtx-5070-ti"),
    ("NVIDIA GeForce RTX 5080", "rtx-5080"),
    ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("AMD Radeon RX 6800 XT", "rx-6800-xt"),
    ("AMD Radeon RX 6900 XT", "rx-6900-xt"),
    ("AMD Radeon RX 7900 XT", "rx-7900-xt"),
    ("AMD Radeon RX 7900 XTX", "rx-7900-xtx"),
]


def test_catalog_covers_every_required_gpu(catalog: Catalog) -> None:
    wrong = [
        (name, catalog.resolve(name).id if name in catalog else None, want)
        for name, want in COVERAGE
        if name not in catalog or catalog.resolve(name).id != want
    ]
    assert wrong == []
    assert len({want for _, want in COVERAGE}) == len(COVERAGE)  # no two spellings collapse to one GPU


def test_every_entry_names_its_source_and_explains_derived_figures(catalog: Catalog) -> None:
    for d in catalog.all():
        assert "http" in d.source and " -- " in d.source, d.id  # "<sheet title> -- <URL>"
        if (
            d.base_clock_mhz is None
            and d.vendor == "nvidia"
            and d.architecture not in ("ada", "blackwell", "hopper")
        ):
            raise AssertionError(f"{d.id}: base clock missing on a part whose sheet gives it")
    for device_id in ("b100", "gb200", "b300", "h200-nvl", "a16", "mi250x-gcd"):  # figures derived or divided
        notes = catalog.get(device_id).notes or ""
        assert "derived" in notes or "/ " in notes or "halved" in notes, device_id


def test_same_chip_variants_differ_only_where_sheets_do(catalog: Catalog) -> None:
    h100, h200 = catalog.get("h100-sxm"), catalog.get("h200")
    assert h100.peak_tflops == h200.peak_tflops and h200.dram_gbps > h100.dram_gbps
    a40, a80 = catalog.get("a100-sxm4-40gb"), catalog.get("a100-sxm4-80gb")
    assert (
        a40.peak_tflops == a80.peak_tflops
        and a80.dram_gbps > a40.dram_gbps
        and a80.memory_gb == 2 * a40.memory_gb
    )
    mi250x, gcd = catalog.get("mi250x"), catalog.get("mi250x-gcd")
    assert gcd.sms * 2 == mi250x.sms and gcd.dram_gbps * 2 == pytest.approx(mi250x.dram_gbps)
    assert gcd.peak_tflops.fp16_tensor * 2 == pytest.approx(mi250x.peak_tflops.fp16_tensor, rel=0.01)


# ------------------------------------------------------------------ occupancy fields


@pytest.mark.parametrize(
    ("device_id", "warp", "ctas", "warps"),
    [
        ("p100-pcie-16gb", 32, 32, 64),
        ("v100-pcie-32gb", 32, 32, 64),
        ("t4", 32, 16, 32),
        ("a100-sxm4-80gb", 32, 32, 64),
        ("rtx-3080", 32, 16, 48),
        ("l4", 32, 24, 48),
        ("h100-sxm", 32, 32, 64),
        ("b200", 32, 32, 64),
        ("rtx-5090", 32, 32, 48),
        ("mi100", 64, 16, 40),
        ("mi300x", 64, 16, 32),
        ("mi355x", 64, 16, 32),
        ("mi50", 64, 16, 40),
        ("radeon-pro-w6600", 32, 16, 40),
        ("rx-7900-xtx", 32, 16, 32),
    ],
)
def test_occupancy_constants_per_architecture(
    catalog: Catalog, device_id: str, warp: int, ctas: int, warps: int
) -> None:
    d = catalog.get(device_id)
    assert (d.warp_size, d.max_ctas_per_sm, d.max_warps_per_sm) == (warp, ctas, warps)
    assert d.lds_per_cu_kb == d.max_smem_per_sm_kb


def test_every_entry_has_occupancy_fields_and_they_agree(catalog: Catalog) -> None:
    for d in catalog.all():
        assert d.warp_size in (32, 64), d.id
        assert 1 <= d.max_ctas_per_sm <= 32 and d.max_warps_per_sm >= 16, d.id
        if d.vendor == "nvidia" or not d.architecture.startswith("rdna"):
            assert d.max_resident_threads_per_sm == d.max_threads_per_sm, d.id
        else:  # RDNA: HIP reports 2048 threads, wave32 slots hold fewer
            assert d.max_resident_threads_per_sm in (1024, 1280) and d.max_threads_per_sm == 2048, d.id
        if d.architecture.startswith(("cdna", "gcn")):
            assert d.warp_size == 64, d.id


def test_entry_may_override_architecture_defaults(tmp_path: Path) -> None:
    def override(devices: list[dict]) -> None:
        entry = next(d for d in devices if d["id"] == "t4")
        entry.update(max_ctas_per_sm=8, l2_gbps=1234.0)

    t4 = load_catalog(_write_catalog(tmp_path, override)).get("t4")
    assert t4.max_ctas_per_sm == 8 and t4.l2_gbps == 1234.0 and t4.warp_size == 32


def test_feature_vector_adds_only_per_sm_occupancy_counts(catalog: Catalog) -> None:
    f = device_feature_vector(catalog.get("mi300x"))
    assert (f["dev_warp_size"], f["dev_max_ctas_per_sm"], f["dev_max_warps_per_sm"]) == (64.0, 16.0, 32.0)


# ------------------------------------------------------------------ dtype support


@pytest.mark.parametrize(
    ("device_id", "dtype", "supported"),
    [
        ("v100-pcie-32gb", "bf16", False),
        ("t4", "torch.bfloat16", False),
        ("p100-pcie-16gb", "bfloat16", False),
        ("a100-sxm4-80gb", "bf16", True),
        ("mi100", "bf16", True),
        ("radeon-pro-w6600", "bf16", False),
        ("a100-sxm4-80gb", "fp8", False),
        ("l4", "float8_e4m3fn", True),
        ("h100-sxm", "fp8", True),
        ("mi250x", "fp8", False),
        ("mi300x", "fp8", True),
        ("rtx-3090", "fp8", False),
        ("rtx-4090", "fp8", True),
        ("v100-pcie-32gb", "tf32", False),
        ("a10", "tf32", True),
        ("h100-sxm", "fp4", False),
        ("b200", "fp4", True),
        ("p4", "fp16", True),
        ("t4", "float32", True),
        ("t4", "mixed", True),
        ("t4", "int64", True),
    ],
)
def test_supports_dtype(catalog: Catalog, device_id: str, dtype: str, supported: bool) -> None:
    d = catalog.get(device_id)
    assert d.supports(dtype) is supported
    reason = d.unsupported_reason(dtype)
    assert (reason is None) is supported
    if reason:
        assert d.name in reason and precision_of(dtype) in reason.lower() and "no " in reason


def test_unknown_dtype_is_a_clear_error(catalog: Catalog) -> None:
    with pytest.raises(ValueError, match="dtype 'fp12'"):
        catalog.get("t4").supports("fp12")


# ------------------------------------------------------------------ user specs


def _user_spec(**changes: object) -> dict:
    spec = {
        "id": "example-x1",
        "name": "Example GPU X1",
        "vendor": "nvidia",
        "architecture": "hopper",
        "compute_capability": "9.0",
        "sms": 100,
        "fp32_lanes_per_sm": 128,
        "boost_clock_mhz": 1800,
        "memory_gb": 64,
        "memory_type": "HBM3",
        "dram_gbps": 3000,
        "l2_mb": 40,
        "l1_smem_per_sm_kb": 256,
        "max_smem_per_sm_kb": 228,
        "max_smem_per_block_kb": 227,
        "regs_per_sm": 65536,
        "max_threads_per_sm": 2048,
        "tdp_w": 500,
        "peak_tflops": {"fp32": 46.1, "bf16_tensor": 700.0},
        "source": "vendor preview sheet",
        "aliases": ["X1"],
    }
    spec.update(changes)
    return {k: v for k, v in spec.items() if v is not None}


def test_spec_from_mapping_builds_a_device_with_defaults() -> None:
    spec = spec_from_mapping(_user_spec())
    assert spec.id == "example-x1" and (spec.warp_size, spec.max_ctas_per_sm, spec.max_warps_per_sm) == (
        32,
        32,
        64,
    )
    assert spec.peak_flops("bf16", tensor=None) == pytest.approx(700e12)
    assert not spec.supports("fp8")  # no fp8 figure given -> no fp8 pipe claimed
    assert resolve_spec(_user_spec()) == spec
    assert resolve_spec(json.dumps(_user_spec())) == spec


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dram_gbps": None}, "missing field 'dram_gbps'"),
        ({"dram_gbps": 0}, "dram_gbps: Input should be greater than 0"),
        ({"dram_gbps": 25000}, "dram_gbps = 25000 is implausible"),
        (
            {"peak_tflops": {"fp32": 90.0}},
            "peak_tflops.fp32 = 90 is inconsistent with sms x fp32_lanes_per_sm",
        ),
        ({"colour": "green"}, "unknown key 'colour'"),
        ({"peak_tflops": {"fp32": 46.1, "fp16_tensro": 1.0}}, "unknown key 'peak_tflops.fp16_tensro'"),
        (
            {"compute_capability": "13.0"},
            "max_ctas_per_sm: optional where kernelcast knows the architecture, but no default is known",
        ),
        ({"vendor": "acme"}, "vendor: Input should be 'nvidia', 'amd' or 'intel'"),
        ({"max_smem_per_block_kb": 300}, "max_smem_per_block_kb (300) exceeds max_smem_per_sm_kb"),
    ],
)
def test_spec_validation_names_the_field(changes: dict, message: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_mapping(_user_spec(**changes))
    assert message in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)  # the CLI prints ValueErrors as one line


def test_spec_validation_reports_every_problem_at_once() -> None:
    with pytest.raises(SpecError) as info:
        spec_from_mapping(_user_spec(l2_mb=None, extra=1, dram_gbps=30000, peak_tflops={"fp32": 90.0}))
    assert len(info.value.problems) == 4


def test_user_folder_merges_into_the_catalog(tmp_path: Path) -> None:
    user = tmp_path / "devices"
    user.mkdir()
    (user / "x1.yaml").write_text(yaml.safe_dump(_user_spec()))
    merged = load_catalog(user_dir=user)
    assert merged.resolve("X1").id == "example-x1" and merged.is_user("example-x1")
    assert not merged.is_user("h100-sxm") and len(merged) == len(load_catalog(user_dir=None)) + 1
    assert load_catalog(user_dir=user) is merged  # cached while the folder is unchanged
    (user / "x1.yaml").write_text(yaml.safe_dump(_user_spec(name="Example GPU X1 rev2")))
    os.utime(user / "x1.yaml", ns=(1, 1))
    assert load_catalog(user_dir=user).get("example-x1").name == "Example GPU X1 rev2"


def test_default_loader_includes_kernelcast_home_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.devices import default_user_devices_dir
    from components.platform.config import get_settings

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    assert default_user_devices_dir() == get_settings().state_dir / "devices"
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "x1.yaml").write_text(yaml.safe_dump(_user_spec()))
    assert load_catalog().resolve("Example GPU X1").id == "example-x1"
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "empty"))
    assert "X1" not in load_catalog()


def test_user_device_may_not_claim_a_catalog_spelling(tmp_path: Path) -> None:
    user = tmp_path / "devices"
    user.mkdir()
    (user / "x1.yaml").write_text(yaml.safe_dump(_user_spec(aliases=["H100"])))
    with pytest.raises(CatalogError, match=r"'H100'.*claimed by device 'h100-sxm'"):
        load_catalog(user_dir=user)
    (user / "x1.yaml").write_text(yaml.safe_dump(_user_spec(aliases=[], dram_gbps=-1)))
    with pytest.raises(SpecError, match=r"x1\.yaml.*dram_gbps"):
        load_catalog(user_dir=user)


def test_cli_add_list_show_remove(tmp_path: Path) -> None:
    spec_file = tmp_path / "x1.yaml"
    spec_file.write_text(yaml.safe_dump(_user_spec()))
    home = tmp_path / "home"
    checked = runner.invoke(app, ["show", str(spec_file), "--json"], env={"KERNELCAST_HOME": str(home)})
    assert checked.exit_code == 0, checked.output  # a spec file can be checked before it is added
    assert (
        json.loads(checked.output)["origin"] == "spec file"
        and json.loads(checked.output)["max_ctas_per_sm"] == 32
    )
    added = runner.invoke(app, ["add", str(spec_file), "--home", str(home)])
    assert added.exit_code == 0, added.output
    stored = home / "devices" / "example-x1.yaml"
    assert stored.is_file() and "example-x1" in added.output
    assert spec_from_mapping(yaml.safe_load(stored.read_text())) == spec_from_mapping(_user_spec())
    again = runner.invoke(app, ["add", str(spec_file), "--home", str(home)])
    assert again.exit_code == 2 and "--replace" in again.output
    assert runner.invoke(app, ["add", str(spec_file), "--home", str(home), "--replace"]).exit_code == 0
    env = {"KERNELCAST_HOME": str(home)}
    listed = runner.invoke(app, ["list"], env=env)
    user_rows = [ln for ln in listed.output.splitlines() if ln.startswith("example-x1")]
    assert len(user_rows) == 1 and user_rows[0].rstrip().endswith("user")
    rows = {r["id"]: r for r in json.loads(runner.invoke(app, ["list", "--json"], env=env).output)}
    assert rows["example-x1"]["user"] is True and rows["h100-sxm"]["user"] is False
    shown = runner.invoke(app, ["show", "X1", "--json"], env=env)
    assert (
        json.loads(shown.output)["name"] == "Example GPU X1" and json.loads(shown.output)["origin"] == "user"
    )
    removed = runner.invoke(app, ["remove", "example-x1", "--home", str(home)])
    assert removed.exit_code == 0 and not stored.exists()
    packaged = runner.invoke(app, ["remove", "h100-sxm", "--home", str(home)])
    assert packaged.exit_code == 2 and "packaged catalog device" in packaged.output


def test_cli_add_rejects_bad_specs_without_writing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_user_spec(dram_gbps=30000, l2_mb=None)))
    result = runner.invoke(app, ["add", str(bad), "--home", str(home)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "missing field 'l2_mb'" in result.output and "dram_gbps = 30000 is implausible" in result.output
    clash = tmp_path / "clash.yaml"
    clash.write_text(yaml.safe_dump(_user_spec(id="h100-sxm")))
    result = runner.invoke(app, ["add", str(clash), "--home", str(home)])
    assert result.exit_code == 2 and "packaged catalog device" in result.output
    missing = runner.invoke(app, ["add", str(tmp_path / "nope.yaml"), "--home", str(home)])
    assert missing.exit_code == 2 and "not found" in missing.output
    assert not (home / "devices").exists() or not any((home / "devices").iterdir())


def test_a_query_can_bring_its_own_spec(catalog: Catalog) -> None:
    spec = resolve_spec(_user_spec())
    extended = catalog.with_devices([spec, spec])
    assert extended.resolve("X1") == spec and len(extended) == len(catalog) + 1 and "X1" not in catalog
    assert catalog.with_devices([catalog.get("t4")]) is catalog  # already there: nothing to add
    with pytest.raises(CatalogError, match="'h100-sxm' differs"):
        catalog.with_devices([spec.model_copy(update={"id": "h100-sxm"})])
    with pytest.raises(CatalogError, match="claimed by device 'h100-sxm'"):
        catalog.with_devices([spec.model_copy(update={"aliases": ("H100",)})])
