"""DeviceSpecs from AIConfigurator system sheets (systems/<gpu>.yaml): the four real sheets of the
bundle, and an Intel sheet (upstream's b60.yaml figures) that needs a supplement."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.devices import SpecError, compare_with_catalog, load_catalog, spec_from_aiconfigurator_sheet
from kernelcast.settings import DEFAULT_DATASETS_DIR

SYSTEMS = DEFAULT_DATASETS_DIR / "aiconfigurator/aic-core/src/aiconfigurator_core/systems"
needs_sheets = pytest.mark.skipif(not SYSTEMS.is_dir(), reason="aiconfigurator bundle not present")
CATALOG_IDS = {"a100_sxm": "a100-sxm4-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "l40s": "l40s"}

# upstream ai-dynamo/aiconfigurator src/aiconfigurator/systems/b60.yaml (Intel Arc Pro B60), gpu/node part.
B60 = """data_dir: data/b60
gpu:
  mem_bw: 456000000000
  mem_capacity: 25769803776
  float32_tc_flops: 12280000000000
  float16_tc_flops: 98304000000000
  int8_tc_flops: 197000000000000
  power: 200
node:
  intra_node_bw: 32000000000
"""
# Xe2 (BMG-G21): 20 Xe-cores x 128 FP32 lanes at 2400 MHz, 18 MB L2 (Intel Arc Pro B60 product page);
# the per-core register/shared-memory figures are illustrative (a supplement is whatever the user knows).
B60_SUPPLEMENT = {
    "vendor": "intel",
    "architecture": "xe2",
    "compute_capability": "bmg-g21",
    "sms": 20,
    "fp32_lanes_per_sm": 128,
    "boost_clock_mhz": 2400,
    "memory_type": "GDDR6",
    "l2_mb": 18,
    "l1_smem_per_sm_kb": 256,
    "max_smem_per_sm_kb": 128,
    "max_smem_per_block_kb": 64,
    "regs_per_sm": 65536,
    "max_threads_per_sm": 1024,
    "warp_size": 16,
    "max_ctas_per_sm": 16,
    "max_warps_per_sm": 64,
}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(user_dir=None)


@needs_sheets
@pytest.mark.parametrize("stem", sorted(CATALOG_IDS))
def test_real_sheet_gives_a_valid_spec_with_the_sheets_figures(stem: str, catalog) -> None:
    spec = spec_from_aiconfigurator_sheet(
        SYSTEMS / f"{stem}.yaml", catalog, device_id=f"{stem.replace('_', '-')}-x"
    )
    ours = catalog.get(CATALOG_IDS[stem])
    assert spec.vendor == "nvidia" and spec.compute_capability == ours.compute_capability
    assert spec.architecture == ours.architecture
    assert spec.dram_gbps == pytest.approx(ours.dram_gbps, rel=0.01)
    assert spec.peak_tflops.bf16_tensor == pytest.approx(ours.peak_tflops.bf16_tensor, rel=0.01)
    # tf32 is not on any sheet: lent by a same-architecture template, scaled, and said so.
    assert spec.peak_tflops.tf32_tensor == pytest.approx(ours.peak_tflops.tf32_tensor, rel=0.01)
    assert "tf32_tensor" in (spec.notes or "") and "aiconfigurator" in spec.source


@needs_sheets
def test_sheets_agree_with_the_catalog_except_known_differences(catalog) -> None:
    differences = [
        line
        for stem, cid in CATALOG_IDS.items()
        for line in compare_with_catalog(SYSTEMS / f"{stem}.yaml", catalog.get(cid))
    ]
    # L40S: the sheet gives the memory nvidia-smi reports (46068 MiB), the catalog the marketed 48 GB; its
    # link is PCIe 4.0 x16 (32 GB/s), which the catalog leaves out for PCIe-only parts (physics assumes so);
    # its network is the server's NIC, not the card's (the sheet assumes a 400 Gb/s ConnectX-7 per GPU, the
    # catalog gives none for a PCIe card and physics.collectives assumes the same 50 GB/s).
    assert differences == [
        "l40s: memory_gb: sheet 44.99 vs catalog 48 (-6.3%)",
        "l40s: link_gbps: sheet 32 vs catalog None",
        "l40s: network_gbps: sheet 50 vs catalog None",
    ]


def test_intel_sheet_needs_a_supplement_then_validates(tmp_path: Path, catalog) -> None:
    sheet = tmp_path / "b60.yaml"
    sheet.write_text(B60)
    with pytest.raises(SpecError) as err:
        spec_from_aiconfigurator_sheet(sheet, catalog)
    assert "sms" in str(err.value) and "supplement" in str(err.value) and "b60.yaml" in str(err.value)
    spec = spec_from_aiconfigurator_sheet(sheet, catalog, supplement=B60_SUPPLEMENT)
    assert spec.id == "b60" and spec.vendor == "intel"
    assert spec.peak_tflops.fp32 == pytest.approx(12.28)
    assert spec.peak_tflops.fp16_tensor == pytest.approx(98.304)
    assert spec.dram_gbps == pytest.approx(456.0) and spec.memory_gb == pytest.approx(24.0)


def test_implausible_supplement_is_rejected_by_the_spec_checks(tmp_path: Path, catalog) -> None:
    sheet = tmp_path / "b60.yaml"
    sheet.write_text(B60)
    # 20 x 128 x 2 x 240 MHz is far from 12.28 TFLOP/s
    with pytest.raises(SpecError, match=r"peak_tflops\.fp32"):
        spec_from_aiconfigurator_sheet(sheet, catalog, supplement={**B60_SUPPLEMENT, "boost_clock_mhz": 240})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("gpu: {power: 300}\n", "mem_bw"),
        ("gpu: {mem_bw: 1.0e12}\n", "no peak"),
        ("- 1\n- 2\n", "'gpu:' section"),
    ],
)
def test_sheet_without_its_figures_is_a_clear_error(
    tmp_path: Path, catalog, text: str, expected: str
) -> None:
    sheet = tmp_path / "bad_gpu.yaml"
    sheet.write_text(text)
    with pytest.raises(SpecError, match=expected):
        spec_from_aiconfigurator_sheet(sheet, catalog)
