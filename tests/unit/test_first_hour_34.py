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


# ------------------------------------------------------------- bound and class consistent by construction

SHARED_KERNEL = """__global__ void sum_shared(float* out) {
    __shared__ float tile[256];
    tile[threadIdx.x] = out[threadIdx.x];
    __syncthreads();
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) acc += tile[i];
    out[threadIdx.x] = acc;
}
"""
TINY_KERNEL = "__global__ void one(float* x) { x[threadIdx.x] += 1.0f; }\n"
MLP_MODULE = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(1000, 400), torch.nn.ReLU(), torch.nn.Linear(400, 10)
        )
    def forward(self, x):
        return self.layers(x)
def get_inputs():
    return [torch.randn(1, 1000)]
def get_init_inputs():
    return []
"""


def _answers(args: list[str], tmp_path, monkeypatch) -> list[dict]:
    result = _run(["predict", *args, "--json", *ROOF], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["predictions"]


def _consistent(answer: dict) -> None:
    from components.physics.bounds import BOUNDS

    assert answer["bound_pipe"] in BOUNDS, answer["bound_pipe"]
    assert answer["roofline_class"] == BOUNDS[answer["bound_pipe"]][0], (
        answer["roofline_class"],
        answer["bound_pipe"],
    )
    for item in answer.get("breakdown") or []:
        assert item["bound"] in BOUNDS, item


def test_a_launch_bound_module_is_latency_class_not_compute_or_bandwidth(tmp_path, monkeypatch) -> None:
    module = tmp_path / "mlp.py"
    module.write_text(MLP_MODULE)
    (answer,) = _answers([str(module), "--device", "H100"], tmp_path, monkeypatch)
    assert answer["bound_pipe"] == "launch" and answer["roofline_class"] == "latency"
    _consistent(answer)


@pytest.mark.parametrize(
    ("text", "launch", "bound"), [(SHARED_KERNEL, "4096/256", "shared"), (TINY_KERNEL, "1/32", "launch")]
)
def test_every_bound_of_a_source_is_documented_with_its_class(
    tmp_path, monkeypatch, text, launch, bound
) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    source = tmp_path / "k.cu"
    source.write_text(text)
    (answer,) = _answers([str(source), "--launch", launch, "--device", "H100"], tmp_path, monkeypatch)
    assert answer["bound_pipe"] == bound
    _consistent(answer)


def test_every_op_answer_names_a_documented_bound_of_its_class(tmp_path, monkeypatch) -> None:
    from components.serving.query import DTYPES, GEMM_ONLY_DTYPES

    csv_file = tmp_path / "ops.csv"
    rows = ["op,shape,dtype"]
    for dtype in DTYPES:
        rows.append(f'gemm,"M=1,N=4096,K=4096",{dtype}')
        rows.append(f'gemm,"M=8192,N=8192,K=8192",{dtype}')
        if dtype not in GEMM_ONLY_DTYPES:
            rows += [f"add,N=4096,{dtype}", f'softmax,"B=4096,H=4096",{dtype}']
    rows.append('allreduce,"bytes=1073741824,gpus=8",bf16')
    csv_file.write_text("\n".join(rows) + "\n")
    answers = _answers(
        ["--batch", str(csv_file), "--device", "H100", "--device", "MI300X", "--device", "T4"],
        tmp_path,
        monkeypatch,
    )
    assert len(answers) == 3 * (len(rows) - 1)
    for answer in answers:
        _consistent(answer)


def test_the_documented_bounds_are_generated_from_the_one_table() -> None:
    from pathlib import Path

    from components.common.marked_blocks import markers
    from components.physics.bounds import bounds_table

    text = (Path(__file__).resolve().parents[2] / "docs" / "answers.md").read_text()
    start, end = markers("bounds")
    assert start in text and end in text, "docs/answers.md lacks the generated bounds block"
    assert text.split(start)[1].split(end)[0].strip() == bounds_table()


def test_every_pipe_the_physics_can_choose_is_a_documented_bound() -> None:
    from components.devices import load_catalog
    from components.physics.bounds import BOUNDS
    from components.physics.roofline import GEMM_DTYPE_TRAITS, PhysicsError, pipe_for

    for spec in load_catalog().all():
        for dtype in GEMM_DTYPE_TRAITS:
            try:
                pipe = pipe_for(dtype, spec).pipe
            except PhysicsError:
                continue
            assert pipe in BOUNDS, (spec.id, dtype, pipe)


# ------------------------------------------------------------------ help generated from the one dtype list


@pytest.mark.parametrize("command", ["predict", "rank"])
def test_dtype_help_lists_every_accepted_dtype(tmp_path, monkeypatch, command) -> None:
    import re

    from components.serving.query import DTYPES

    monkeypatch.setenv("COLUMNS", "250")
    result = _run([command, "--help"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.lstrip("│ ").startswith("--dtype")]
    listed = re.findall(r"[a-z0-9_]+", line.split("--dtype", 1)[1])
    assert set(DTYPES) <= set(listed), (sorted(set(DTYPES) - set(listed)), line)


# ---------------------------------------------------------------- bundled model configs: exact names, a list

LLM = ["--isl", "1024", "--osl", "128", "--device", "H100", "--json"]


def _deployment(name: str, tmp_path, monkeypatch) -> dict:
    result = _run(["predict", "--llm", name, *LLM], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    (answer,) = json.loads(result.output)["deployments"]
    return answer


def test_an_exact_bundled_name_wins_over_its_quantised_variant(tmp_path, monkeypatch) -> None:
    answer = _deployment("Qwen3-30B-A3B", tmp_path, monkeypatch)
    assert answer["deployment"]["model"] == "Qwen/Qwen3-30B-A3B", answer["deployment"]
    assert not any("exact name" in n for n in answer["notes"]), answer["notes"]


def test_a_variant_picked_for_a_name_is_said(tmp_path, monkeypatch) -> None:
    answer = _deployment("Qwen3-32B-Instruct", tmp_path, monkeypatch)
    assert answer["deployment"]["model"] == "Qwen3-32B", answer["deployment"]
    assert (
        "model 'Qwen3-32B-Instruct': no bundled config of that exact name; answered with Qwen3-32B"
        in " ".join(answer["notes"])
    ), answer["notes"]


def test_models_list_shows_every_bundled_config_with_dtype_and_size(tmp_path, monkeypatch) -> None:
    from components.deployments.config import bundled_names

    result = _run(["models", "list", "--json"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    models = {m["name"]: m for m in json.loads(result.output)["models"]}
    assert len(models) >= 70
    qwen = models["Qwen/Qwen3-30B-A3B"]
    assert qwen["dtype"] == "bf16" and 29 < qwen["parameters_b"] < 32 and qwen["moe"], qwen
    assert models["Qwen/Qwen3-30B-A3B-FP8"]["dtype"] == "fp8_block"  # fp8 weights with 128x128 block scales
    assert models["Qwen2.5-14B"]["parameters_b"] == pytest.approx(14.77, abs=0.01)
    # every name the list gives is one `--llm` resolves exactly
    from components.deployments.config import find_bundled

    for name in models:
        _, note = find_bundled(name)
        assert note is None, (name, note)
    table = _run(["models", "list"], tmp_path, monkeypatch)
    assert table.exit_code == 0 and "Qwen/Qwen3-30B-A3B-FP8" in table.output and "fp8_block" in table.output
    assert bundled_names()  # the close-name hints of an unknown model come from the same configs


# ------------------------------------------------------------------ disagg answers state the GPU split

DISAGG = [
    "predict",
    "--llm",
    "Qwen2.5-14B",
    "--isl",
    "2048",
    "--osl",
    "256",
    "--concurrency",
    "32",
    "--tp",
    "2",
]


def test_a_disagg_answer_says_how_the_gpus_are_split(tmp_path, monkeypatch) -> None:
    result = _run([*DISAGG, "--mode", "disagg", "--device", "H100"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "disagg split: 2 prefill GPUs (1 worker of tp 2) + 2 decode GPUs (1 worker of tp 2) = 4 GPUs" in (
        result.output
    ), result.output
    as_json = _run([*DISAGG, "--mode", "disagg", "--device", "H100", "--json"], tmp_path, monkeypatch)
    (answer,) = json.loads(as_json.output)["deployments"]
    assert answer["deployment"]["split"] == {
        "prefill_gpus": 2,
        "decode_gpus": 2,
        "prefill_workers": 1,
        "decode_workers": 1,
        "gpus_per_worker": 2,
    }


def test_the_user_sets_the_disagg_split(tmp_path, monkeypatch) -> None:
    args = [*DISAGG, "--mode", "disagg", "--prefill-gpus", "4", "--decode-gpus", "2", "--device", "H100"]
    result = _run([*args, "--json"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    (answer,) = json.loads(result.output)["deployments"]
    assert answer["deployment"]["split"]["prefill_workers"] == 2
    assert answer["deployment"]["split"]["decode_gpus"] == 2
    odd = _run(
        [*DISAGG, "--mode", "disagg", "--prefill-gpus", "3", "--device", "H100"], tmp_path, monkeypatch
    )
    assert odd.exit_code == 2 and "--prefill-gpus 3: not a multiple of the 2 GPUs of one worker" in odd.output
    agg = _run([*DISAGG, "--prefill-gpus", "2", "--device", "H100"], tmp_path, monkeypatch)
    assert agg.exit_code == 2 and "--prefill-gpus applies to --mode disagg" in agg.output, agg.output
