"""`kernelcast evaluate` on KernelBench programs: scored by the bench's own function, and every timing
row without an answer counted by its reason (real KernelBench rows, a few programs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.platform.config import get_settings


@pytest.fixture(scope="module")
def kernelbench() -> tuple[pd.DataFrame, pd.DataFrame]:
    from components.devices import load_catalog
    from components.ingest.stage import ingest_tables

    root = get_settings().datasets_dir / "kernelbench"
    if not root.is_dir():
        pytest.skip(f"KernelBench dataset not found at {root}")
    out = ingest_tables(["kernelbench"], {"kernelbench": root}, load_catalog())
    return out.measurements, out.kernels


def test_program_rows_are_scored_by_the_bench_and_each_unanswered_row_has_its_reason(
    kernelbench: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path
) -> None:
    from components.evaluation.stage import NO_DURATION, NOT_A_FOLD, program_answers
    from components.programs.kernelbench_data import SOURCE

    measurements, kernels = kernelbench
    with_text = kernels[(kernels["source"] == SOURCE) & kernels["source_text"].notna()]
    chosen = sorted(with_text["kernel_id"])[:3]
    rows = measurements[measurements["kernel_id"].isin(chosen)].copy()
    rows.loc[rows.index[0], "duration_us"] = np.nan  # a timing the data does not have
    unbundled = chosen[2]
    kernels = kernels[kernels["kernel_id"].isin(chosen)].copy()
    kernels.loc[kernels["kernel_id"] == unbundled, "source_text"] = (
        None  # a program without its module source
    )

    answers = program_answers(rows, kernels, tmp_path / "cache")
    assert answers is not None and answers["split"] == "kernelbench"
    assert answers["n_rows"] == len(rows)
    assert answers["n_answered"] + sum(answers["unanswered"].values()) == len(rows)  # none without a reason
    assert answers["unanswered"][NO_DURATION] == 1
    unbundled_rows = int((rows["kernel_id"] == unbundled).sum()) - int(rows["kernel_id"].iloc[0] == unbundled)
    assert (
        answers["unanswered"]["no bundled module source (problem tree not in the bundle)"] == unbundled_rows
    )
    # Three programs give no GPU the 20 rows a leave-one-GPU-out fold needs: said so, not silently dropped.
    assert answers["n_answered"] == 0 and answers["unanswered"][NOT_A_FOLD] > 0
    assert any("with a stated reason" in note for note in answers["notes"])


def test_rows_of_other_sources_are_not_programs(
    kernelbench: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path
) -> None:
    from components.evaluation.stage import program_answers

    measurements, kernels = kernelbench
    assert program_answers(measurements.assign(source="neusight"), kernels, tmp_path) is None


def test_the_bench_program_split_is_a_split_evaluate_knows(tmp_path: Path) -> None:
    from components.evaluation.kernelbench_bench import read_program_tables
    from components.evaluation.stage import EvaluateInputs, check_inputs

    check_inputs(EvaluateInputs(model="roofline", out_file=tmp_path / "r.json", split="kernelbench"))
    with pytest.raises(ValueError, match=r"unknown split 'nope'; choose one of .*kernelbench"):
        check_inputs(EvaluateInputs(model="roofline", out_file=tmp_path / "r.json", split="nope"))
    with pytest.raises(FileNotFoundError, match=r"no measurements\.parquet in"):
        read_program_tables(tmp_path)


def test_program_rows_the_op_model_leaves_silent_say_where_they_are_answered() -> None:
    from components.evaluation.stage import PROGRAM_NOTE, _program_rows_noted
    from components.models.cuda_runtime import unpredicted_reasons

    frame = pd.DataFrame(
        {
            "family": ["program", "program", "gemm", "gemm"],
            "duration_us": [5.0, 6.0, 7.0, 8.0],
            "pred_duration_us": [np.nan, np.nan, np.nan, 8.0],
            "pred_note": [pd.NA, "GPU not in the device catalog", pd.NA, pd.NA],
        }
    )
    assert unpredicted_reasons(_program_rows_noted(frame, True)) == {
        PROGRAM_NOTE: 1,
        "GPU not in the device catalog": 1,
        "no reason given": 1,
    }
    assert (
        unpredicted_reasons(_program_rows_noted(frame, False))["no reason given"] == 2
    )  # no program path ran
