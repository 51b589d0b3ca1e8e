"""A module's training step (``predict --train``): forward, autograd's backward traced on fake
tensors and an Adam step, with the memory it needs checked against each GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.programs.errors import ProgramError

MLP = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

def get_inputs():
    return [torch.randn(512, D)]

def get_init_inputs():
    return [D]
"""
NO_PARAMS = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    + ("def get_inputs():\n    return [torch.randn(8, 8)]\ndef get_init_inputs():\n    return []\n")
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_training_trace_has_backward_gemms_and_adam_over_every_parameter(home: Path) -> None:
    from components.programs.trace import trace_module

    trace = trace_module(MLP.replace("D", "1024"), per_module_s=60.0, train=True)
    kernels = [op for op in trace.ops if not op.get("view")]
    phase = {
        p: [op["aten"] for op in kernels if op["phase"] == p] for p in ("forward", "backward", "optimizer")
    }
    assert phase["forward"].count("addmm") == 2
    assert phase["backward"].count("mm") == 3  # dW2, dX1, dW1 (the input needs no gradient)
    assert phase["optimizer"].count("addcdiv_") == 4  # one update per parameter tensor
    assert "zeros_like" not in phase["optimizer"]  # the moments exist before a step
    params = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4
    assert trace.memory["params"] == trace.memory["grads"] == params
    assert trace.memory["optimizer"] == 2 * params and trace.memory["activations"] > 0


def test_a_training_step_costs_more_than_its_forward_and_its_memory_is_checked(home: Path) -> None:
    from components.devices import load_catalog
    from components.models.roofline import RooflinePredictor
    from components.programs.module_predict import predict_module

    catalog = load_catalog()
    h100 = catalog.resolve("H100")
    module = MLP.replace("D", "1024")
    (forward,) = predict_module(module, None, [h100], RooflinePredictor())
    (step,) = predict_module(module, None, [h100], RooflinePredictor(), train=True)
    # backward runs two GEMMs per forward GEMM: the step's GEMM roofline is about 3x the forward's
    assert step["roofline_us"] > 2.5 * forward["roofline_us"]
    assert step["duration_us"] > forward["duration_us"]
    assert "memory fits" in step["note"] and "backward calls" in step["note"]
    # 16384 x 65536 x 2 weights in fp32: 8.6 GB of parameters, 34 GB with gradients and Adam's moments
    (t4,) = predict_module(
        MLP.replace("D", "16384"), None, [catalog.resolve("T4")], RooflinePredictor(), train=True
    )
    assert "does NOT fit" in t4["note"] and t4["ood"]


def test_training_a_module_without_parameters_is_one_clear_error(home: Path) -> None:
    from components.devices import load_catalog
    from components.models.roofline import RooflinePredictor
    from components.programs.module_predict import predict_module

    with pytest.raises(ProgramError, match="nothing to train"):
        predict_module(NO_PARAMS, None, [load_catalog().resolve("H100")], RooflinePredictor(), train=True)


def test_train_applies_to_module_questions_only() -> None:
    from components.serving.query import QueryError
    from components.serving.question_forms import parse_questions

    (question,) = parse_questions([{"module": MLP, "device": "H100", "train": True}])
    assert (
        question.train
        and question.kernel_key() != parse_questions([{"module": MLP, "device": "H100"}])[0].kernel_key()
    )
    with pytest.raises(QueryError, match="train: applies to a module question"):
        parse_questions([{"op": "gemm", "shape": {"M": 8, "N": 8, "K": 8}, "device": "H100", "train": True}])
