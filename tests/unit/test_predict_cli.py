"""`kernelcast predict` with the training-free roofline predictor (no registry needed)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kernelcast.cli import app
from components.serving.query import QueryError, parse_shape


def test_parse_shape_and_its_errors() -> None:
    assert parse_shape("M=4096, N=1024,K=64") == {"M": 4096, "N": 1024, "K": 64}
    for bad in ("M=0", "M", "=4", "M=4x", ""):
        with pytest.raises(QueryError):
            parse_shape(bad)


def test_roofline_prediction_of_a_gemm_on_two_gpus(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["predict", "--op", "gemm", "--shape", "M=4096,N=4096,K=4096", "--dtype", "bf16",
                                      "--device", "H100", "--device", "A100-SXM4-80GB", "--model", "roofline", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["device"]: r for r in json.loads(result.output)["predictions"]}
    flops = 2 * 4096**3
    # A compute-bound GEMM at the catalog's dense bf16 tensor peak: time = FLOPs / peak.
    assert rows["h100-sxm"]["roofline_class"] == "compute"
    assert rows["h100-sxm"]["duration_us"] == pytest.approx(flops / 989.4e12 * 1e6, rel=0.02)
    assert rows["a100-sxm4-80gb"]["duration_us"] > rows["h100-sxm"]["duration_us"]


def test_unknown_device_and_op_are_one_line_errors(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    runner = CliRunner()
    bad_device = runner.invoke(app, ["predict", "--op", "gemm", "--shape", "M=1,N=1,K=1", "--device", "H999",
                                     "--model", "roofline"])
    assert bad_device.exit_code == 2 and "H999" in bad_device.output
    bad_op = runner.invoke(app, ["predict", "--op", "conv9", "--shape", "M=1", "--device", "H100", "--model", "roofline"])
    assert bad_op.exit_code == 2 and "conv9" in bad_op.output


def test_query_rows_carry_the_shapes_an_llm_prompt_reads() -> None:
    """The feature table has no shapes; a predictor reading the kernel itself (llm) gets them."""
    import pandas as pd

    from components.devices import load_catalog
    from components.models.llm.model import LLMConfig, row_prompt
    from components.serving.query import score

    class Recorder:
        def predict(self, features: pd.DataFrame) -> pd.DataFrame:
            self.seen = features
            return pd.DataFrame({"pred_duration_us": [1.0] * len(features)}, index=features.index)

    recorder = Recorder()
    results = score(recorder, "bmm", {"B": 8, "M": 64, "N": 48, "K": 32}, "fp16", ["H100", "A100"])
    assert [r["duration_us"] for r in results] == [1.0, 1.0] and len(recorder.seen) == 2
    assert recorder.seen["f_flops"].notna().all()  # still the feature rows, in device order
    text = row_prompt(recorder.seen.iloc[1], load_catalog(), LLMConfig(max_tokens=400), None)
    assert '"M": 64' in text and '"N": 48' in text and "A100" in text and "bmm" in text


@pytest.mark.parametrize(("shape", "fragments"), [
    ("M=64,N=64", ("missing K", "M, N, K")),
    ("N=1000,Q=3", ("unknown Q",)),
])
def test_a_shape_missing_or_adding_a_dimension_is_a_one_line_error(shape: str, fragments: tuple[str, ...], tmp_path,
                                                                    monkeypatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    op = "gemm" if "M=" in shape else "add"
    result = CliRunner().invoke(app, ["predict", "--op", op, "--shape", shape, "--device", "H100", "--model", "roofline"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and all(f in result.output for f in fragments), result.output
