"""`kernelcast bench serve`'s per-stage rates and the README speed table it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.serving.bench import MARKER_END, MARKER_START, raw_throughput, readme_block, write_readme_block


@pytest.fixture(scope="module")
def roofline_raw() -> dict:
    from components.models.roofline import RooflinePredictor

    return raw_throughput(RooflinePredictor(), 3000, chunk=1000)


def test_raw_throughput_reports_each_stage_per_cpu_second(roofline_raw: dict) -> None:
    raw = roofline_raw
    assert raw["rows"] == 3000 and raw["answered"] > 2000
    for stage in ("featurise", "model", "end_to_end"):
        assert raw[f"{stage}_rows_per_cpu_s"] > 0 and raw[f"{stage}_rows_per_s"] > 0
    # End to end is both stages one after the other: slower than either alone.
    assert raw["end_to_end_rows_per_cpu_s"] < min(raw["featurise_rows_per_cpu_s"], raw["model_rows_per_cpu_s"])


def test_readme_block_is_written_between_the_markers_only(roofline_raw: dict, tmp_path: Path) -> None:
    result = {"model_version": "roofline", "machine": {"cpus": 2, "load_average": [0.5, 0, 0],
                                                       "load_average_after": [0.7, 0, 0]},
              "targets": {"end_to_end_rows_per_cpu_s": 1_000_000, "share_of_roofline_rate": 0.5,
                          "server_p99_ms_at_100rps": 10.0},
              "raw": {"model": {**roofline_raw, "trees": "compiled C (400 trees)"}, "roofline": roofline_raw,
                      "model_over_roofline_end_to_end": 1.0},
              "server_op": {"rate_rps": 100.0, "achieved_rps": 99.0, "errors": 0, "server_cpu_ms_per_request": 2.0,
                            "p50_ms": 3.0, "p95_ms": 5.0, "p99_ms": 7.5, "max_ms": 9.0, "n": 1000},
              "llm": {"skipped": True}}
    block = readme_block(result, "kernelcast bench serve --rows 3000")
    assert "`kernelcast bench serve --rows 3000`" in block
    assert "compiled C (400 trees)" in block and "7.5 ms" in block
    expected = "met" if roofline_raw["end_to_end_rows_per_cpu_s"] >= 1e6 else "**not met**"
    assert f"end to end -- {expected} (" in block and "roofline model's rate -- met (100%)" in block
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{MARKER_START}\nold table\n{MARKER_END}\nafter\n")
    write_readme_block(readme, block)
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n") and text.endswith(f"{MARKER_END}\nafter\n")
    assert "old table" not in text and block in text
    write_readme_block(readme, block)  # idempotent: a second run replaces its own block
    assert readme.read_text() == text
    (tmp_path / "bare.md").write_text("no markers\n")
    with pytest.raises(ValueError, match="bench-serve:start"):
        write_readme_block(tmp_path / "bare.md", block)
