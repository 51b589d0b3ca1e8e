"""`kernelcast bench serve`'s per-stage rates and the README speed table it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.serving.bench import raw_throughput
from components.serving.bench_readme import MARKER_END, MARKER_START, readme_block, write_readme_block


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
    assert raw["end_to_end_rows_per_cpu_s"] < min(
        raw["featurise_rows_per_cpu_s"], raw["model_rows_per_cpu_s"]
    )


def test_readme_block_is_written_between_the_markers_only(roofline_raw: dict, tmp_path: Path) -> None:
    result = {
        "model_version": "roofline",
        "machine": {"cpus": 2, "load_average": [0.5, 0, 0], "load_average_after": [0.7, 0, 0]},
        "targets": {
            "end_to_end_rows_per_cpu_s": 1_000_000,
            "share_of_roofline_rate": 0.5,
            "server_p99_ms_at_100rps": 10.0,
        },
        "raw": {
            "model": {**roofline_raw, "trees": "lleaves (400 trees)"},
            "roofline": roofline_raw,
            "model_over_roofline_end_to_end": 1.0,
        },
        "server_op": {
            "rate_rps": 100.0,
            "achieved_rps": 99.0,
            "errors": 0,
            "server_cpu_ms_per_request": 2.0,
            "p50_ms": 3.0,
            "p95_ms": 5.0,
            "p99_ms": 7.5,
            "max_ms": 9.0,
            "n": 1000,
        },
        "llm": {"skipped": True},
        "engine_tiers": {
            "rows": 1000,
            "devices": ["h100-sxm"],
            "measured_hits": 990,
            "measured_rows_per_cpu_s": 7_000.0,
            "spec_rows_per_cpu_s": 350_000.0,
            "engine_rows_per_cpu_s": 6_500.0,
            "measured_over_spec": 0.02,
        },
        "single_question": {"p50_ms": 2.5, "p99_ms": 6.0, "n": 300},
        "deployments": {
            "llm": "Llama-3.1-70B",
            "device": "h100-sxm",
            "params": {"isl": 2048, "osl": 256, "concurrency": 32, "tp": 4},
            "deployments_per_cpu_s": 230.0,
            "p50_ms": 4.0,
            "p99_ms": 9.0,
            "rank_gpus": 96,
            "rank_options": 384,
            "rank_fitting": 130,
            "rank_s": 0.75,
            "rank_cpu_s": 0.35,
        },
    }
    block = readme_block(result, "kernelcast bench serve --rows 3000")
    assert "measured-tier lookup 7k, the spec model it replaces 350k" in block
    assert "**is slower than the model it replaces**" in block
    assert "230 deployments per CPU-second" in block and "0.75 s" in block and "-- met |" in block
    assert "`kernelcast bench serve --rows 3000`" in block
    assert "lleaves (400 trees)" in block and "7.5 ms" in block
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


def test_deployment_rates_time_the_public_composition() -> None:
    from components.serving.bench import deployment_rates

    rates = deployment_rates(repeats=2)
    assert rates["deployments_per_cpu_s"] > 0 and rates["n"] == 2 and rates["p99_ms"] >= rates["p50_ms"] > 0
    # every catalog GPU x TP option was asked; the 70B model fits on some of them, not on all
    assert rates["rank_options"] >= rates["rank_gpus"] and 0 < rates["rank_fitting"] < rates["rank_options"]


def test_engine_tier_rates_say_why_without_a_measured_store(tmp_path, monkeypatch) -> None:
    from components.serving.bench import engine_tier_rates

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    assert "no measured op store" in engine_tier_rates(1000)["unavailable"]
