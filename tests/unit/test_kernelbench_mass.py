"""The KernelBench error-mass tables: shares, terms and the per-GPU MAPE add up from the scored rows."""

from __future__ import annotations

import pandas as pd
import pytest

from components.evaluation.kernelbench_mass import (
    BETWEEN_OPS,
    OP_TIME,
    error_mass,
    mass_lines,
    module_class,
    scored_rows,
)


def _predictions() -> pd.DataFrame:
    # gpu a: a host-bound program 2x over (ops 10 of 200 us), a GPU-bound one 10% under;
    # gpu b: both right but the host-bound one 50% under. A level-2 row and a compiled row are not scored.
    return pd.DataFrame(
        {
            "kernel_id": ["mlp", "resnet", "mlp", "resnet", "mlp", "mlp"],
            "device_id": ["a", "a", "b", "b", "a", "a"],
            "level": ["3", "3", "3", "3", "2", "3"],
            "config": ["eager", "eager", "eager", "eager", "eager", "inductor-default"],
            "duration_us": [100.0, 1000.0, 100.0, 1000.0, 50.0, 80.0],
            "pred_model": [200.0, 900.0, 50.0, 1000.0, 10.0, 5.0],
            "pred_ops": [10.0, 800.0, 5.0, 900.0, 1.0, 1.0],
        }
    )


def test_each_row_has_its_error_mass_and_term() -> None:
    rows = scored_rows(_predictions(), "3", pd.Series({"mlp": "level3/1_MLP.py"}))
    assert len(rows) == 4  # level 2 and the compiled run are not this level's eager rows
    assert rows["mass"].round(6).tolist() == [1.0, 0.1, 0.5, 0.0]
    assert rows["term"].tolist() == [BETWEEN_OPS, OP_TIME, BETWEEN_OPS, OP_TIME]
    assert rows["program"].tolist() == ["level3/1_MLP.py", "resnet", "level3/1_MLP.py", "resnet"]


def test_tables_rank_gpus_programs_and_terms_by_their_share_of_the_mass() -> None:
    mass = error_mass(scored_rows(_predictions(), "3"))
    total = 1.6
    assert mass.by_gpu.index.tolist() == ["a", "b"]
    assert mass.by_gpu.loc["a", "mape"] == pytest.approx(0.55)  # the bench's per-GPU MAPE
    assert mass.by_gpu.loc["a", "mass_share"] == pytest.approx(1.1 / total)
    assert mass.by_gpu.loc["a", "between_ops_mass_share"] == pytest.approx(1.0 / 1.1)
    assert mass.by_gpu.loc["b", "between_ops_mass_share"] == pytest.approx(1.0)
    assert mass.by_term.loc[BETWEEN_OPS, "mass_share"] == pytest.approx(1.5 / total)
    assert mass.by_term.loc[OP_TIME, "median_signed"] == pytest.approx(-0.05)
    assert mass.by_program.index[0] == "mlp"
    assert mass.by_program["mass_share"].sum() == pytest.approx(1.0)
    text = "\n".join(mass_lines(mass, top=1))
    assert "by term" in text and "resnet" not in text  # only the top program is listed


def test_rows_that_are_not_the_bench_scored_rows_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="pred_ops"):
        scored_rows(_predictions().drop(columns="pred_ops"), "3")
    with pytest.raises(ValueError, match="no scored rows"):
        error_mass(scored_rows(_predictions(), "1"))


def test_programs_fall_into_module_classes_whose_tables_add_up() -> None:
    names = pd.Series({"mlp": "level3/1_MLP@v0.0", "resnet": "level3/10_ResNet101@v0.1+"})
    mass = error_mass(scored_rows(_predictions(), "3", names))
    assert mass.by_class.index.tolist() == ["mlp", "cnn"]  # ranked by their share of the mass
    assert mass.by_class.loc["mlp", "mass_share"] == pytest.approx(1.5 / 1.6)
    assert mass.class_by_gpu.loc["mlp", "a"] == pytest.approx(2.0)  # too slow on a, too fast on b
    assert mass.class_by_gpu.loc["mlp", "b"] == pytest.approx(0.5)
    assert [module_class(n) for n in ("level3/39_GRU@v0.0", "35_LTSM", "33_VanillaRNN", "Foo")] == [
        "rnn (cuDNN LSTM/GRU)",
        "rnn (cuDNN LSTM/GRU)",
        "rnn cell",
        "other",
    ]
    assert "module class x GPU" in "\n".join(mass_lines(mass))
