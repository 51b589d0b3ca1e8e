"""MI300X and MI308X in the catalog (aiter's GPUs), their device strings, and a vendor's marketing string
resolving through the catalog's alias lookup: an Intel GPU's tables, laid out like AIConfigurator's with the
spec sheet beside them (synthetic, in tmp_path), ingest instead of being rejected."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from components.devices import Catalog, UnknownDeviceError, compare_with_catalog, load_catalog
from tests.unit.test_aiconfigurator_sheet import B60 as B60_SHEET  # upstream's b60.yaml, gpu/node part

SYSTEMS = Path("aic-core/src/aiconfigurator_core/systems")
INTEL_NAME = "Intel(R) Arc(TM) Pro B60 Graphics"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(user_dir=None)


def test_mi300x_has_its_datasheet_figures(catalog: Catalog) -> None:
    d = catalog.resolve("AMD Instinct MI300X")
    assert (d.id, d.architecture, d.compute_capability, d.sms) == ("mi300x", "cdna3", "gfx942", 304)
    assert (d.boost_clock_mhz, d.dram_gbps, d.llc_mb, d.memory_gb, d.memory_type) == (
        2100,
        5300,
        256,
        192,
        "HBM3",
    )
    p = d.peak_tflops
    assert (p.fp16_tensor, p.bf16_tensor, p.fp8_tensor, p.int8_tensor) == (1307.4, 1307.4, 2614.9, 2614.9)
    assert (p.fp32_tensor, p.fp64) == (163.4, 81.7)
    assert "amd-instinct-mi300x-data-sheet" in d.source


def test_mi308x_is_mi300x_per_cu_at_80_cus(catalog: Catalog) -> None:
    mi300x, mi308x = catalog.get("mi300x"), catalog.resolve("AMD Instinct MI308X")
    assert (mi308x.id, mi308x.architecture, mi308x.compute_capability, mi308x.sms) == (
        "mi308x",
        "cdna3",
        "gfx942",
        80,
    )
    assert mi308x.boost_clock_mhz == mi300x.boost_clock_mhz
    for pipe, peak in mi300x.peak_tflops.model_dump().items():
        if peak is not None:  # every pipe MI300X has, at 80/304 of its rate (AMD's CUs x rate x clock)
            assert getattr(mi308x.peak_tflops, pipe) == pytest.approx(peak * 80 / 304, rel=0.002), pipe
    assert "DERIVED" in (mi308x.notes or "") and "aiter" in mi308x.source


@pytest.mark.parametrize(
    ("spelling", "device_id"),
    [
        ("gfx942-304cu", "mi300x"),
        ("gfx942-80cu", "mi308x"),
        ("MI308X", "mi308x"),
        (INTEL_NAME, "arc-pro-b60"),
        ("Intel® Arc™ Pro B60 Graphics", "arc-pro-b60"),
        ("b60", "arc-pro-b60"),
    ],
)
def test_device_strings_resolve(catalog: Catalog, spelling: str, device_id: str) -> None:
    assert catalog.resolve(spelling).id == device_id


def test_a_cu_count_no_gpu_has_is_unknown(catalog: Catalog) -> None:
    with pytest.raises(UnknownDeviceError, match="gfx942-120cu"):
        catalog.resolve("gfx942-120cu")


def _intel_tree(root: Path) -> Path:
    """An AIConfigurator-layout tree: systems/b60.yaml, one GEMM table naming the B60 by its driver string."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = root / SYSTEMS / "data/b60/gemm/vllm/0.11.0"
    data.mkdir(parents=True)
    (root / SYSTEMS / "b60.yaml").write_text(B60_SHEET)
    table = pd.DataFrame(
        {
            "framework": "VLLM",
            "version": "0.11.0",
            "device": INTEL_NAME,
            "op_name": "gemm",
            "kernel_source": "torch.nn.functional.linear",
            "gemm_dtype": "float16",
            "m": [16, 256, 4096],
            "n": 4096,
            "k": 4096,
            "latency": [0.05, 0.21, 2.9],  # ms
        }
    )
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), data / "gemm_perf.parquet")
    return root


def test_intel_tables_beside_their_sheet_ingest_as_the_catalog_gpu(tmp_path: Path, catalog: Catalog) -> None:
    from components.ingest.aiconfigurator_canonical import ingest

    root = _intel_tree(tmp_path / "aic")
    out = ingest(root, catalog, max_kernels=None)
    assert len(out.rejects) == 0 and set(out.measurements["device_id"]) == {"arc-pro-b60"}
    assert set(out.measurements["device_name_raw"]) == {INTEL_NAME}
    # the catalog's figures are the sheet's (only the GPU-to-GPU link differs: the sheet's is PCIe, which the
    # catalog leaves out for a PCIe-only part)
    lines = compare_with_catalog(root / SYSTEMS / "b60.yaml", catalog.get("arc-pro-b60"))
    assert [line.split(":")[1].strip() for line in lines] == ["link_gbps"]


def test_without_the_catalog_entry_the_intel_rows_are_rejected_naming_the_device(
    tmp_path: Path, catalog: Catalog
) -> None:
    from components.ingest.aiconfigurator_canonical import ingest

    without = Catalog([d for d in catalog.all() if d.vendor != "intel"])
    out = ingest(_intel_tree(tmp_path / "aic"), without, max_kernels=None)
    assert len(out.measurements) == 0 and set(out.rejects["reason"]) == {f"unknown device '{INTEL_NAME}'"}
    assert any("b60" in note and "sheet" in note for note in out.notes)
