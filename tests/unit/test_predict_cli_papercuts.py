"""Papercuts of `kernelcast predict`/`rank` a new user hits first (issue 26), on the roofline predictor."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kernelcast.cli import app

ROOF = ["--model", "roofline"]
MODULE = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 256)
    def forward(self, x):
        return torch.relu(self.fc(x))
def get_inputs():
    return [torch.randn(64, 256)]
def get_init_inputs():
    return []
"""


def _run(args: list[str], tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    return CliRunner().invoke(app, args)


def test_json_breakdown_is_a_nested_list_and_the_table_still_shows_it(tmp_path, monkeypatch) -> None:
    module = tmp_path / "model.py"
    module.write_text(MODULE)
    result = _run(["predict", str(module), "--device", "H100", "--json", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    (answer,) = json.loads(result.output)["predictions"]
    assert isinstance(answer["breakdown"], list) and answer["breakdown"][0]["op"].startswith("addmm")
    table = _run(["predict", str(module), "--device", "H100", *ROOF], tmp_path, monkeypatch)
    assert table.exit_code == 0 and "top ops on h100-sxm:" in table.output and "addmm" in table.output


def test_rank_ignores_prices_of_gpus_not_ranked(tmp_path, monkeypatch) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("H100: 2.5\nA100: 1.2\nB200: 6.0\nMI300X: 3.0\n")
    result = _run(
        [
            "rank",
            "--op",
            "gemm",
            "--shape",
            "M=4096,N=4096,K=4096",
            "--dtype",
            "bf16",
            "--device",
            "H100",
            "--device",
            "A100",
            "--prices",
            str(prices),
            *ROOF,
        ],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    assert "ranked by cost per run" in result.output
    assert "prices of GPUs not ranked ignored: B200, MI300X" in result.output, result.output


def test_rank_orders_unpriced_gpus_by_time_not_by_name(tmp_path, monkeypatch) -> None:
    result = _run(
        [
            "rank",
            "--op",
            "gemm",
            "--shape",
            "M=8192,N=8192,K=8192",
            "--dtype",
            "bf16",
            "--device",
            "T4",
            "--device",
            "B200",
            "--device",
            "A10",
            "--device",
            "H100",
            "--price",
            "H100=2.5",
            "--json",
            *ROOF,
        ],
        tmp_path,
        monkeypatch,
    )
    assert result.exit_code == 0, result.output
    ranking = json.loads(result.output)["ranking"]
    assert ranking[0]["device"] == "h100-sxm"  # the one priced GPU first
    unpriced = ranking[1:]
    times = [e["total_us"] for e in unpriced]
    assert times == sorted(times) and unpriced[0]["device"].startswith("b200"), unpriced


def test_batch_csv_takes_the_cli_shape_syntax(tmp_path, monkeypatch) -> None:
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text('op,shape,dtype,device\ngemm,"M=1024,N=1024,K=1024",bf16,H100\nadd,N=4096,,T4\n')
    result = _run(["predict", "--batch", str(csv_file), "--json", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["predictions"]
    assert [(r["kernel"], r["device"]) for r in rows] == [(0, "h100-sxm"), (1, "t4")]


def test_one_bad_batch_row_does_not_abort_the_file(tmp_path, monkeypatch) -> None:
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text(
        'op,shape,dtype\ngemm,"M=1024,N=1024,K=1024",bf16\ngemm,"M=4,N=4",fp16\n'
        'add,N=4096,banana\nsoftmax,"B=64,H=4096",fp16\n'
    )
    result = _run(["predict", "--batch", str(csv_file), "--device", "H100", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert "questions.csv line 3: shape for op gemm: missing K" in result.output
    assert "questions.csv line 4: dtype 'banana'" in result.output
    assert "2 of 4 rows failed" in result.output and "Traceback" not in result.output
    assert (
        sum(line.startswith("questions.csv line") for line in result.output.splitlines()) == 2
    )  # 2 answered
    as_json = _run(
        ["predict", "--batch", str(csv_file), "--device", "H100", "--json", *ROOF], tmp_path, monkeypatch
    )
    assert as_json.exit_code == 1
    data = json.loads(as_json.stdout)
    assert [p["kernel"] for p in data["predictions"]] == [0, 3]
    assert [e["row"] for e in data["errors"]] == ["questions.csv line 3", "questions.csv line 4"]


def test_a_bad_jsonl_line_is_listed_and_the_other_lines_answered(tmp_path, monkeypatch) -> None:
    jsonl = tmp_path / "questions.jsonl"
    jsonl.write_text(
        json.dumps({"op": "add", "shape": {"N": 4096}})
        + "\n{not json\n"
        + json.dumps({"op": "gelu", "shape": "N=65536", "colour": "red"})
        + "\n"
        + json.dumps({"op": "gemm", "shape": {"M": 64, "N": 64}})
        + "\n"
        + json.dumps({"op": "softmax", "shape": {"B": 8, "H": 1024}})
        + "\n"
    )
    result = _run(
        ["predict", "--batch", str(jsonl), "--device", "L4", "--json", *ROOF], tmp_path, monkeypatch
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert [p["row"] for p in data["predictions"]] == ["questions.jsonl line 1", "questions.jsonl line 5"]
    assert [e["row"] for e in data["errors"]] == [
        "questions.jsonl line 2",
        "questions.jsonl line 3",
        "questions.jsonl line 4",
    ]
    assert (
        "not valid JSON" in data["errors"][0]["error"]
        and "unknown field 'colour'" in data["errors"][1]["error"]
    )
    assert "missing K" in data["errors"][2]["error"]
    assert "3 of 5 rows failed" in result.output


def test_a_batch_row_without_a_device_is_listed_and_the_others_answered(tmp_path, monkeypatch) -> None:
    csv_file = tmp_path / "questions.csv"
    csv_file.write_text("op,shape,device\nadd,N=4096,H100\nadd,N=8192,\n")
    result = _run(["predict", "--batch", str(csv_file), "--json", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert [p["row"] for p in data["predictions"]] == ["questions.csv line 2"]
    assert data["errors"] == [
        {
            "row": "questions.csv line 3",
            "error": "questions.csv line 3: no device; give the row a device column or pass --device",
        }
    ]
