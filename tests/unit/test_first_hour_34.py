"""A new user's first hour, second pass (issue 34): `kernelcast predict`/`rank` on the roofline predictor."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kernelcast.cli import app

ROOF = ["--model", "roofline"]


def _run(args: list[str], tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    return CliRunner().invoke(app, args)


# ------------------------------------------------------------------ one shape syntax in every batch format


def test_jsonl_takes_the_cli_shape_syntax_like_csv(tmp_path, monkeypatch) -> None:
    jsonl = tmp_path / "questions.jsonl"
    jsonl.write_text(
        json.dumps({"op": "gemm", "shape": "M=1,N=4096,K=4096", "dtype": "bf16"})
        + "\n"
        + json.dumps({"op": "gemm", "shape": {"M": 1, "N": 4096, "K": 4096}, "dtype": "bf16"})
        + "\n"
    )
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text('op,shape,dtype\ngemm,"M=1,N=4096,K=4096",bf16\n')
    answers = {}
    for path in (jsonl, csv_file):
        result = _run(
            ["predict", "--batch", str(path), "--device", "H100", "--json", *ROOF], tmp_path, monkeypatch
        )
        assert result.exit_code == 0, result.output
        answers[path.suffix] = [r["duration_us"] for r in json.loads(result.output)["predictions"]]
    assert len(answers[".jsonl"]) == 2 and answers[".jsonl"][0] == answers[".jsonl"][1] == answers[".csv"][0]


# ------------------------------------------------------------ numeric errors name the field and the limit


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--shape", "M=1e30,N=4096,K=4096"],
            "--shape.M: 1e30 is above the largest size accepted (2**36 = 68,719,476,736)",
        ),
        (["--shape", "M=0,N=4096,K=4096"], "--shape.M: 0 is below the smallest size accepted (1)"),
    ],
)
def test_cli_shape_errors_name_the_field_and_the_limit(tmp_path, monkeypatch, args, expected) -> None:
    result = _run(
        ["predict", "--op", "gemm", *args, "--dtype", "bf16", "--device", "H100", *ROOF],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 2, result.output
    assert expected in result.output, result.output


def test_batch_shape_errors_name_the_field_and_the_limit(tmp_path, monkeypatch) -> None:
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text(
        json.dumps({"op": "gemm", "shape": {"M": 1e30, "N": 4096, "K": 4096}})
        + "\n"
        + json.dumps({"op": "gemm", "shape": "M=1e30,N=4096,K=4096"})
        + "\n"
    )
    result = _run(["predict", "--batch", str(jsonl), "--device", "H100", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert (
        "q.jsonl line 1: shape.M: 1e+30 is above the largest size accepted (2**36 = 68,719,476,736)"
        in result.output
    )
    assert (
        "q.jsonl line 2: shape.M: 1e30 is above the largest size accepted (2**36 = 68,719,476,736)"
        in result.output
    )


# ------------------------------------------------------------------ one prices rule for every rank

PRICES_NOTE = (
    "note: prices of GPUs not ranked ignored: L4; prices of names not in the catalog ignored: TPU-v5e"
)


def test_kernel_rank_ignores_and_names_a_price_the_catalog_does_not_know(tmp_path, monkeypatch) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("H100: 2.5\nTPU-v5e: 1.0\nL4: 0.5\n")
    shape = ["--op", "gemm", "--shape", "M=4096,N=4096,K=4096", "--dtype", "bf16"]
    devices = ["--device", "H100", "--device", "A100"]
    result = _run(["rank", *shape, *devices, "--prices", str(prices), *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "ranked by cost per run" in result.output and PRICES_NOTE in result.output, result.output


def test_llm_rank_names_the_prices_it_ignores(tmp_path, monkeypatch) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("H100: 2.5\nTPU-v5e: 1.0\nL4: 0.5\n")
    llm = ["--llm", "Qwen2.5-14B", "--isl", "1024", "--osl", "128", "--concurrency", "4", "--tp", "1"]
    result = _run(
        ["rank", *llm, "--device", "H100", "--device", "A100", "--prices", str(prices), "--by", "cost"],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    assert PRICES_NOTE in result.output, result.output
    rows = [line.split() for line in result.output.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [r[1] for r in rows] == ["h100-sxm", "a100-sxm4-80gb"] and rows[1][-1] == "-", result.output
