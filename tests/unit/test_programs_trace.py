"""The sandboxed module tracer: real torch (CPU, fake tensors) in a real child process.

One child traces every module of the batch (torch imports once); each case checks what the
tracer recorded or the reason it gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.programs.errors import ProgramError
from components.programs.ops import map_op
from components.programs.trace import ModuleJob, module_job, trace_many, trace_module

SMALL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, 2 * features)
    def forward(self, x):
        return torch.relu(self.fc(x)).sum(dim=1)

def get_inputs():
    return [torch.randn(64, 128)]

def get_init_inputs():
    return [128]
"""
LOOP = "import torch\nwhile True:\n    pass\n"
NETWORK = "import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=1)\n"
NO_MODEL = "import torch\n\ndef get_inputs():\n    return []\n"
SYNTAX = "class Model(:\n    pass\n"
MEMORY = "buffer = bytearray(10**11)\n"  # 100 GB of real (non-tensor) memory: over the address-space limit
# KernelBench-style modules that put their tensors on the GPU themselves, every way real ones do.
CUDA_MODULE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, 2 * features).cuda()
        self.bias = torch.zeros(2 * features, device="cuda")
        self.scale = torch.ones(2 * features).to("cuda")
    def forward(self, x):
        y = self.fc(x) * self.scale + self.bias
        return torch.relu(y).to(torch.device("cuda"), torch.float32).sum(dim=1)

def get_inputs():
    return [torch.randn(64, 128).cuda(), torch.randn(4).cuda(0)][:1]

def get_init_inputs():
    return [128]
"""
# Only the inputs on the GPU (the KernelBench harness moves the model there itself).
CUDA_INPUTS = SMALL.replace("torch.randn(64, 128)", "torch.randn(64, 128, device='cuda')")
HUGE = SMALL.replace("torch.randn(64, 128)", "torch.randn(1 << 40, 128)")  # 512 TiB: fake, never allocated


@pytest.fixture(scope="module")
def batch():
    jobs = [
        ModuleJob("small", text=SMALL),
        ModuleJob("loop", text=LOOP),
        ModuleJob("net", text=NETWORK),
        ModuleJob("nomodel", text=NO_MODEL),
        ModuleJob("syntax", text=SYNTAX),
        ModuleJob("huge", text=HUGE),
        ModuleJob("memory", text=MEMORY),
        ModuleJob("after", text=SMALL),
        ModuleJob("cuda", text=CUDA_MODULE),
        ModuleJob("cuda_inputs", text=CUDA_INPUTS),
    ]
    # Two children side by side (the way the KernelBench cache traces); results come back in order.
    results = trace_many(jobs, per_module_s=6.0, workers=2)
    assert [r.name for r in results] == [j.name for j in jobs]
    return {r.name: r for r in results}


def test_a_small_module_traces_into_its_aten_kernels(batch):
    result = batch["small"]
    assert result.ok, result.error
    kernels = [op["aten"] for op in result.ops if map_op(op).kind != "free"]  # views, x.device: no kernel
    assert kernels == ["addmm", "relu", "sum"]
    addmm = next(op for op in result.ops if op["aten"] == "addmm")
    assert addmm["outputs"][0][:2] == [[64, 256], "float32"]


def test_a_module_moving_its_tensors_to_cuda_traces_as_fake_cuda_tensors(batch):
    for name in ("cuda", "cuda_inputs"):
        result = batch[name]
        assert result.ok, f"{name}: {result.error}"
        kernels = [op["aten"] for op in result.ops if map_op(op).kind != "free"]
        assert "addmm" in kernels and "relu" in kernels and kernels[-1] == "sum", (name, kernels)
        addmm = next(op for op in result.ops if op["aten"] == "addmm")
        assert addmm["outputs"][0][:2] == [[64, 256], "float32"]


def test_fake_tensors_never_allocate_the_data(batch):
    # 2^40 x 128 floats would be 512 TiB: only fake tensors get through the memory limit.
    assert batch["huge"].ok, batch["huge"].error
    addmm = next(op for op in batch["huge"].ops if op["aten"] == "addmm")
    assert addmm["outputs"][0][0] == [1 << 40, 256]


def test_an_endless_loop_is_stopped_by_the_time_limit(batch):
    assert not batch["loop"].ok
    assert batch["loop"].reason == "timeout"
    assert "time limit" in batch["loop"].error
    assert batch["after"].ok  # the modules after it still trace


def test_network_access_is_refused(batch):
    assert not batch["net"].ok
    assert batch["net"].reason == "network"
    assert "network access is disabled" in batch["net"].error


def test_real_allocations_hit_the_memory_limit(batch):
    assert not batch["memory"].ok
    assert batch["memory"].reason == "memory"
    assert "memory limit" in batch["memory"].error


def test_a_module_without_model_names_what_is_missing(batch):
    assert batch["nomodel"].reason == "interface"
    assert "no Model defined" in batch["nomodel"].error


def test_a_syntax_error_gives_the_line(batch):
    assert batch["syntax"].reason == "syntax"
    assert "line 1" in batch["syntax"].error


def test_trace_module_raises_program_error_naming_the_file(tmp_path: Path):
    path = tmp_path / "broken_module.py"
    path.write_text(SYNTAX)
    with pytest.raises(ProgramError, match=r"broken_module\.py.*syntax error"):
        trace_module(str(path), per_module_s=10.0)


def test_a_missing_module_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(ProgramError, match="no such module file"):
        module_job(str(tmp_path / "absent.py"))
    with pytest.raises(ProgramError, match="empty module text"):
        module_job("   ")


# A module that casts a submodule in forward (HF MoE routers do: Switch-Transformer's router casts its
# classifier), which used to fail with "_apply(): Couldn't swap Linear.weight" on fake tensors.
CASTS_IN_FORWARD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(128, 64)
    def forward(self, x):
        self.fc = self.fc.to(torch.float64)
        return self.fc(x.to(torch.float64)).sum(dim=1)

def get_inputs():
    return [torch.randn(32, 128)]

def get_init_inputs():
    return []
"""


def test_a_module_cast_during_forward_traces_with_its_cast_kernels():
    result = trace_module(CASTS_IN_FORWARD, per_module_s=30.0)
    names = [op["aten"] for op in result.ops if not op.get("view")]
    assert any("addmm" in n for n in names), names
    assert any("_to_copy" in n for n in names), names  # the casts are kernels too


# An MoE's experts as one grouped GEMM (what Hugging Face's default experts_implementation="grouped_mm"
# runs): 96 tokens split over 3 experts of 128 -> 64. The fake kernel accepts only BF16, so an FP32 MoE
# (Mixtral, Qwen3-MoE, DeepSeek-V3 built in FP32) failed with "Expected inputs of BF16 type".
GROUPED = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 128, 64, dtype=DTYPE))
    def forward(self, x):
        offs = torch.tensor([32, 64, 96], dtype=torch.int32)
        return torch._grouped_mm(x, self.w, offs=offs)

def get_inputs():
    return [torch.randn(96, K, dtype=DTYPE)]

def get_init_inputs():
    return []
"""


def test_an_fp32_grouped_gemm_traces_in_its_own_dtype_and_a_bad_one_still_names_its_error():
    jobs = [
        ModuleJob(f"{dtype}-{k}", text=GROUPED.replace("DTYPE", f"torch.{dtype}").replace("K", str(k)))
        for dtype, k in (("float32", 128), ("bfloat16", 128), ("float32", 100))
    ]
    fp32, bf16, mismatched = trace_many(jobs, per_module_s=30.0)
    for result, dtype in ((fp32, "float32"), (bf16, "bfloat16")):
        assert result.ok, result.error
        op = next(op for op in result.ops if op["aten"] == "_grouped_mm")
        assert op["inputs"][0][:2] == [[96, 128], dtype]
        assert op["outputs"][0][:2] == [[96, 64], dtype]
        assert not any(op["aten"] == "_to_copy" for op in result.ops)  # the BF16 inference is not recorded
    assert not mismatched.ok and mismatched.reason == "error"  # 100 != 128: the meta kernel's own check
    assert "contraction dimension" in (mismatched.error or ""), mismatched.error
