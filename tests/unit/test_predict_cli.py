"""`kernelcast predict` with the training-free roofline predictor (no registry needed)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from components.serving.query import QueryError, parse_shape
from kernelcast.cli import app

ROOF = ["--model", "roofline"]


def test_parse_shape_and_its_errors() -> None:
    assert parse_shape("M=4096, N=1024,K=64") == {"M": 4096, "N": 1024, "K": 64}
    for bad in ("M=0", "M", "=4", "M=4x", ""):
        with pytest.raises(QueryError):
            parse_shape(bad)


def test_roofline_prediction_of_a_gemm_on_two_gpus(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    result = CliRunner().invoke(
        app,
        [
            "predict",
            "--op",
            "gemm",
            "--shape",
            "M=4096,N=4096,K=4096",
            "--dtype",
            "bf16",
            "--device",
            "H100",
            "--device",
            "A100-SXM4-80GB",
            "--model",
            "roofline",
            "--json",
        ],
    )
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
    bad_device = runner.invoke(
        app, ["predict", "--op", "gemm", "--shape", "M=1,N=1,K=1", "--device", "H999", "--model", "roofline"]
    )
    assert bad_device.exit_code == 2 and "H999" in bad_device.output
    bad_op = runner.invoke(
        app, ["predict", "--op", "conv9", "--shape", "M=1", "--device", "H100", "--model", "roofline"]
    )
    assert bad_op.exit_code == 2 and "conv9" in bad_op.output


def test_query_rows_carry_the_shapes_an_llm_prompt_reads() -> None:
    """The feature table has no shapes; a predictor reading the kernel itself (llm) gets them."""
    import pandas as pd

    from components.devices import load_catalog
    from components.models.llm.model import LLMConfig, row_prompt
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    class Recorder:
        family = "llm"

        def predict(self, features: pd.DataFrame) -> pd.DataFrame:
            self.seen = features
            return pd.DataFrame({"pred_duration_us": [1.0] * len(features)}, index=features.index)

    recorder = Recorder()
    # fp32: a vector-pipe product the champion answers (tensor-dtype GEMMs go to the op engine)
    questions = parse_questions(
        [
            {"op": "bmm", "shape": {"B": 8, "M": 64, "N": 48, "K": 32}, "dtype": "fp32", "device": d}
            for d in ("H100", "A100")
        ]
    )
    results = answer_questions(recorder, questions, model_version="test")
    assert [r["duration_us"] for r in results] == [1.0, 1.0] and len(recorder.seen) == 2
    assert recorder.seen["f_flops"].notna().all()  # still the feature rows, in device order
    text = row_prompt(recorder.seen.iloc[1], load_catalog(), LLMConfig(max_tokens=400), None)
    assert '"M": 64' in text and '"N": 48' in text and "A100" in text and "bmm" in text


@pytest.mark.parametrize(
    ("shape", "fragments"),
    [
        ("M=64,N=64", ("missing K", "M, N, K")),
        ("N=1000,Q=3", ("unknown Q",)),
    ],
)
def test_a_shape_missing_or_adding_a_dimension_is_a_one_line_error(
    shape: str, fragments: tuple[str, ...], tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    op = "gemm" if "M=" in shape else "add"
    result = CliRunner().invoke(
        app, ["predict", "--op", op, "--shape", shape, "--device", "H100", "--model", "roofline"]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and all(f in result.output for f in fragments), result.output


def _run(args: list[str], tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    return CliRunner().invoke(app, args)


def test_device_all_and_the_readable_table(tmp_path, monkeypatch) -> None:
    result = _run(
        ["predict", "--op", "softmax", "--shape", "B=64,H=4096", "--dtype", "fp16", "--device", "all", *ROOF],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:6] == ["device", "runtime_us", "interval_us", "class", "bound", "headroom"]
    from components.devices import load_catalog

    assert len(lines) == 1 + len(load_catalog()) + 1 and lines[-1] == "model: roofline"
    assert any(line.startswith("h100-sxm ") and "bandwidth" in line and "dram" in line for line in lines)


def test_batch_csv_and_jsonl_with_json_output(tmp_path, monkeypatch) -> None:
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text(
        "op,shape,dtype,device\n"
        'gemm,"{""M"": 1024, ""N"": 1024, ""K"": 1024}",bf16,H100\n'
        'add,"{""N"": 4096}",,\n'
    )
    result = _run(
        ["predict", "--batch", str(csv_file), "--device", "T4", "--device", "A100", "--json", *ROOF],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["predictions"]
    # Row 1 names its device; row 2 has none and is asked on every --device.
    assert [(r["kernel"], r["device"]) for r in rows] == [(0, "h100-sxm"), (1, "t4"), (1, "a100-sxm4-80gb")]
    assert all(r["duration_us"] > 0 and r["bound_pipe"] for r in rows)
    jsonl = tmp_path / "questions.jsonl"
    jsonl.write_text(
        json.dumps({"op": "layernorm", "shape": {"B": 128, "H": 1024}, "device": "MI300X"})
        + "\n\n"
        + json.dumps({"op": "gelu", "shape": '{"N": 65536}', "dtype": "bfloat16"})
        + "\n"
    )
    table = _run(["predict", "--batch", str(jsonl), "--device", "L4", *ROOF], tmp_path, monkeypatch)
    assert table.exit_code == 0, table.output
    assert "questions.jsonl line 1" in table.output and "mi300x" in table.output and "l4" in table.output


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('op,shape,colour\ngemm,"{}",red\n', "unknown column 'colour'"),
        ("op,shape\n", "no questions"),
    ],
)
def test_bad_batch_files_are_one_line_errors(content: str, fragment: str, tmp_path, monkeypatch) -> None:
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text(content)
    result = _run(["predict", "--batch", str(csv_file), "--device", "H100", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and fragment in result.output, result.output
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (
            'op,shape,dtype\ngemm,"{""M"": 4, ""N"": 4}",fp16\n',
            "questions.csv line 2: shape for op gemm: missing K",
        ),
        ('op,shape,dtype\ngemm,"{""M"": 4, ""N"": 4, ""K"": 4}",banana\n', "line 2: dtype 'banana'"),
        ('op,shape\ngemm,"{""M"": 4, ""N"": 4, ""K"": 4}"\nadd,"{""N"": 1e12}"\n', "line 3: shape.N"),
        ('op,shape\nadd,"N=4x"\n', "line 2: shape.N: 4x is not a number"),
    ],
)
def test_bad_batch_rows_are_listed_naming_the_line(
    content: str, fragment: str, tmp_path, monkeypatch
) -> None:
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text(content)
    result = _run(["predict", "--batch", str(csv_file), "--device", "H100", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "error: questions.csv line" in result.output, result.output
    assert fragment in result.output and "rows failed" in result.output, result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--op", "gemm", "--device", "H100"], "--op and --shape go together"),
        (["--device", "H100"], "exactly one of"),
        (["--op", "gemm", "--shape", "M=1,N=1,K=1", "--device", "H100", "--launch", "1/1"], "--launch"),
        (["--op", "gemm", "--shape", "M=1,N=1,K=1"], "no device"),
        (
            ["--op", "gemm", "--shape", "M=1,N=1,K=1", "--device", "H100", "--model", "/nonexistent"],
            "/nonexistent",
        ),
    ],
)
def test_bad_options_are_one_line_errors(args: list[str], fragment: str, tmp_path, monkeypatch) -> None:
    result = _run(["predict", *args, *([] if "--model" in args else ROOF)], tmp_path, monkeypatch)
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output, (
        result.output
    )


def test_a_source_file_needs_a_launch_and_a_known_suffix(tmp_path, monkeypatch) -> None:
    kernel = tmp_path / "saxpy.cu"
    kernel.write_text("__global__ void saxpy(int n, float a, float* x) { }")
    no_launch = _run(["predict", str(kernel), "--device", "H100", *ROOF], tmp_path, monkeypatch)
    assert no_launch.exit_code == 2 and "--launch" in no_launch.output
    bad_launch = _run(
        ["predict", str(kernel), "--launch", "4096x256", "--device", "H100", *ROOF], tmp_path, monkeypatch
    )
    assert bad_launch.exit_code == 2 and "GRID/BLOCK" in bad_launch.output
    other = tmp_path / "kernel.f90"
    other.write_text("x")
    assert _run(["predict", str(other), "--device", "H100", *ROOF], tmp_path, monkeypatch).exit_code == 2


def test_rank_cli_by_time_and_cost(tmp_path, monkeypatch) -> None:
    workload = tmp_path / "workload.csv"
    workload.write_text(
        'op,shape,dtype,count\ngemm,"{""M"": 4096, ""N"": 4096, ""K"": 4096}",bf16,10\n'
        'add,"{""N"": 16777216}",bf16,100\n'
    )
    result = _run(
        [
            "rank",
            "--batch",
            str(workload),
            "--device",
            "H100",
            "--device",
            "A100",
            "--device",
            "T4",
            "--price",
            "H100=100",
            "--price",
            "A100=1",
            "--price",
            "T4=0.5",
            "--json",
            *ROOF,
        ],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ranked_by"] == "cost" and data["ranking"][-1]["device"] == "h100-sxm"
    table = _run(
        ["rank", "--op", "gemm", "--shape", "M=4096,N=4096,K=4096", "--dtype", "bf16", "--top", "3", *ROOF],
        tmp_path,
        monkeypatch,
    )
    assert table.exit_code == 0 and "ranked by predicted time" in table.output
    assert len(table.output.strip().splitlines()) == 1 + 3 + 1
    bad = _run(
        ["rank", "--op", "gemm", "--shape", "M=1,N=1,K=1", "--price", "H100=cheap", *ROOF],
        tmp_path,
        monkeypatch,
    )
    assert bad.exit_code == 2 and "--price" in bad.output


def test_a_cuda_source_file_is_predicted_with_its_breakdown(tmp_path, monkeypatch) -> None:
    kernel = tmp_path / "saxpy.cu"
    kernel.write_text(
        'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];\n}\n"
    )
    result = _run(
        [
            "predict",
            str(kernel),
            "--launch",
            "4096/256",
            "--device",
            "H100",
            "--device",
            "A100",
            "--json",
            *ROOF,
        ],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["predictions"]
    assert [r["kind"] for r in rows] == ["source", "source"] and [r["kernel"] for r in rows] == [0, 0]
    assert all(r["duration_us"] > 0 and r["breakdown"] for r in rows)
    broken = tmp_path / "broken.cu"
    broken.write_text("__global__ void broken( {")
    failed = _run(
        ["predict", str(broken), "--launch", "1/32", "--device", "H100", *ROOF], tmp_path, monkeypatch
    )
    assert failed.exit_code == 2 and "broken.cu" in failed.output and "Traceback" not in failed.output, (
        failed.output
    )
