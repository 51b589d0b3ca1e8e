"""README blocks each bench command owns: a run of op-engine splits rewrites only the op-engine block."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.common.marked_blocks import write_marked_block
from components.evaluation.bench import BenchResult
from components.evaluation.opmodel_bench import ENGINE_FAMILY, split_opengine, write_opengine_markdown

README = (
    "intro\n<!-- bench:start -->\nold bench\n<!-- bench:end -->\nmid\n<!-- opengine:start -->\nold\n"
    "<!-- opengine:end -->\ntail\n"
)


def _row(split: str, scope: str, family: str, value: float) -> dict:
    return {
        "split": split,
        "scope": scope,
        "family": family,
        "target": "duration_us",
        "metric": "mape",
        "ours": value,
        "n": 400,
        "coverage": 1.0,
    }


def test_op_engine_rows_go_to_their_block_and_leave_the_bench_block_alone(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text(README)
    result = BenchResult(
        rows=[
            _row("aiconfigurator-unseen-gpu", "op=gemm", ENGINE_FAMILY, 0.316),
            _row("neusight", "all", "tabular", 0.2),
        ],
        notes=["aiconfigurator-unseen-gpu (spec tier): caps", "neusight: a note"],
    )
    rest, engine, notes = split_opengine(result)
    assert [r["split"] for r in rest.rows] == ["neusight"] and rest.notes == ["neusight: a note"]
    assert len(engine) == 1 and notes == ["aiconfigurator-unseen-gpu (spec tier): caps"]
    write_opengine_markdown(
        path, engine, notes, "kernelcast bench accuracy --split aiconfigurator-unseen-gpu"
    )
    text = path.read_text()
    assert "old bench" in text and "\nold\n" not in text and text.endswith("<!-- opengine:end -->\ntail\n")
    block = text[text.index("<!-- opengine:start -->") : text.index("<!-- opengine:end -->")]
    assert "31.6%" in block and "- aiconfigurator-unseen-gpu (spec tier): caps" in block


def test_a_file_without_the_block_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "NOTES.md"
    path.write_text("no markers here\n")
    with pytest.raises(ValueError, match=r"NOTES\.md has no single <!-- opengine:start -->"):
        write_marked_block(path, "opengine", "x")
    assert path.read_text() == "no markers here\n"  # nothing half-written
