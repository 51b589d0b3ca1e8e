"""gpuFLOPBench adapter on the real profiling file, an excerpt and corrupted copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from components.devices import load_catalog
from components.ingest.base import IngestError
from components.ingest.gpuflopbench import extract_kernel_body, ingest
from kernelcast.settings import DEFAULT_DATASETS_DIR

ROOT = DEFAULT_DATASETS_DIR / "gpuflopbench"
HEAD = "cuda-profiling/profiling-data.csv"


def _excerpt(tmp_path: Path, lines: int, mutate=None) -> Path:
    root = tmp_path / "gpuflopbench"
    (root / "cuda-profiling").mkdir(parents=True)
    text = (ROOT / HEAD).read_text().splitlines()[: lines + 1]
    if mutate:
        text = mutate(text)
    (root / HEAD).write_text("\n".join(text) + "\n")
    shutil.copytree(ROOT / "src" / "haccmk-cuda", root / "src" / "haccmk-cuda")
    return root


def test_full_file_matches_the_published_labelling() -> None:
    out = ingest(ROOT, load_catalog())
    head = out.measurements[out.measurements["upstream_file"] == HEAD]
    assert len(head) == 3436 and out.rows_in == len(out.measurements) + len(out.rejects)
    # MANIFEST: Bolet et al.'s rule gives 2,409 BB / 1,027 CB rows; 1,261 / 541 kernels (first row).
    assert head["roofline_class_published"].value_counts().to_dict() == {"bandwidth": 2409, "compute": 1027}
    first = head.sort_values("upstream_row").drop_duplicates("kernel_id")
    assert first["roofline_class_published"].value_counts().to_dict() == {"bandwidth": 1261, "compute": 541}
    assert out.measurements["measurement_id"].isna().all()  # ids are the runner's job
    assert not out.measurements.duplicated(["kernel_id", "device_id", "params_json", "run_id"]).any()


def test_excerpt_units_and_kernel_body(tmp_path: Path) -> None:
    out = ingest(_excerpt(tmp_path, 2), load_catalog())
    row = out.measurements.iloc[0]
    # First row of the file: xtime 2,990,880 ns, traffic 71,855,774.89 B/s, spPerf 133,681,937,309 FLOP/s.
    assert row["duration_us"] == pytest.approx(2990.88)
    assert row["achieved_gbps"] == pytest.approx(0.07185577489)
    assert row["fp32_gflops"] == pytest.approx(133.681937309)
    assert row["dram_bytes"] == pytest.approx(71855774.89 * 2990880e-9)
    assert row["roofline_class_published"] == "compute"  # spAI 1860 > 32.97
    assert (row["grid_x"], row["block_x"]) == (4, 256)
    kernel = out.kernels.iloc[0]
    assert kernel["source_text"].startswith("// ==== kernel haccmk_kernel")
    assert (
        "__global__" in kernel["source_text"].splitlines()[1] or "__global__" in kernel["source_text"][:400]
    )


def test_garbage_row_is_rejected_with_reason_and_balance_holds(tmp_path: Path) -> None:
    def corrupt(lines: list[str]) -> list[str]:
        lines[2] = lines[2].replace('"(256, 1, 1)"', '"(256, one, 1)"', 1)
        return lines

    out = ingest(_excerpt(tmp_path, 3, corrupt), load_catalog())
    assert len(out.measurements) == 2 and len(out.rejects) == 1
    assert "one" in out.rejects.iloc[0]["reason"] and out.rejects.iloc[0]["upstream_row"] == 1


def test_missing_column_names_the_file(tmp_path: Path) -> None:
    root = _excerpt(tmp_path, 2, lambda lines: [lines[0].replace('"xtime"', '"time"'), *lines[1:]])
    with pytest.raises(IngestError, match=r"profiling-data\.csv.*xtime"):
        ingest(root, load_catalog())


def test_extract_kernel_body_handles_templates_and_nesting() -> None:
    text = "int x;\ntemplate <int N>\n__global__ void k(float* a) { if (a) { a[0] = N; } }\nvoid host() {}\n"
    assert (
        extract_kernel_body(text, "k")
        == "template <int N>\n__global__ void k(float* a) { if (a) { a[0] = N; } }"
    )
    assert extract_kernel_body(text, "missing") is None
