"""The host side of a traced forward: the tracer's Python-side counts (nn.Module calls, torch calls from
Python) and the program model's learned per-count host cost (the timed call itself)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from components.programs.ops import program_ops
from components.programs.overheads import HOST_COUNTS, ConfigModel, ProgramModel, fit_config
from tests.unit.test_programs_ops import _small_programs  # KernelBench-like rows, GEMM time + counts

MODULE = """
import torch
import torch.nn as nn
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
    def forward(self, x):
        return torch.relu(self.fc(x)) + 1.0
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.sum()
def get_inputs():
    return [torch.randn(4, 32)]
def get_init_inputs():
    return []
"""


def test_the_tracer_counts_module_calls_and_python_torch_calls_on_the_ops(tmp_path: Path):
    from components.programs.trace import trace_module

    path = tmp_path / "blocks.py"
    path.write_text(MODULE)
    trace = trace_module(str(path))
    program = program_ops(trace.ops)
    # Model + 3 x (Block + Linear): 7 module calls; per block linear, relu, add, then a sum: 10 torch calls
    assert program.n_modules == 7
    assert program.n_pycalls >= 10
    assert program.n_pycalls < program.n_aten + program.n_modules  # counted once each, not per aten call
    assert sum(op.get("mods", 0) for op in trace.ops) == 7


def _op(mods: int, fns: int) -> dict:
    return {
        "aten": "relu",
        "overload": "default",
        "view": False,
        "inputs": [[[8, 8], "float32", True]],
        "outputs": [[[8, 8], "float32", True]],
        "scalars": [],
        "kwargs": {},
        **({"mods": mods} if mods else {}),
        **({"fns": fns} if fns else {}),
    }


def test_program_ops_sums_the_host_counts_and_older_traces_count_zero():
    program = program_ops([_op(2, 1), _op(0, 3), _op(1, 0)])
    assert (program.n_modules, program.n_pycalls, program.n_aten) == (3, 4, 3)
    old = program_ops([_op(0, 0)])
    assert (old.n_modules, old.n_pycalls) == (0, 0)


def test_the_program_model_learns_the_host_cost_of_the_timed_call_and_never_goes_below_the_ops():
    frame, _ = _small_programs(300, seed=1)  # GEMM rows on 3 GPUs; their own truth is replaced below
    frame["n_forwards"] = 1.0
    # Truth: GEMMs at their basis time, 4 us per kernel on the GPU; on the host 3 us per aten call and
    # 40 us for the timed call itself (event records, the top-level call, the wait for the first kernel).
    gpu = frame["pred_gemm"] + 4.0 * frame["n_kernels"]
    cpu = 3.0 * frame["n_aten"] + 40.0
    true = ((gpu**4 + cpu**4) ** 0.25).to_numpy()
    model = fit_config(frame, true, residual=False, stands=["gemm"])
    assert "n_forwards" in HOST_COUNTS
    assert abs(model.call_us["n_forwards"] - 40.0) < 8.0
    pred = ProgramModel("roofline", {"eager": model}).predict(frame)
    assert np.mean(np.abs(pred - true) / true) < 0.05
    assert np.all(pred >= model.ops(frame, "pred"))
    # saved and loaded with the rest of the model
    assert ConfigModel(**model.to_json()).call_us == model.call_us
