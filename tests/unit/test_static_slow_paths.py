"""The compiler's out-of-line slow paths (IEEE division's denormal path) are not counted as run by every
thread: a real NVRTC compile of a kernel that divides once."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

DIVIDE = """
__global__ void divide(float* a, const float* b, const float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = b[i] / c[i];
}
"""


def test_a_division_counts_its_fast_path_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from components.features.static.analyze import analyze_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    (kernel,) = analyze_source(DIVIDE, "sm_86", None, "divide.cu", use_cache=False).kernels
    # the fast path: a reciprocal and four FFMAs (8 FLOPs); the slow path would add a dozen more FFMAs
    assert 0 < kernel.flops["flop_fp32"] <= 10, kernel.flops


def test_a_kernel_calling_anything_else_keeps_every_instruction():
    from components.features.static.sass import slow_paths

    code = [
        {"opcode": "CALL.REL.NOINC", "operands": "my_device_function"},
        {"opcode": "EXIT", "operands": ""},
        {"opcode": "FFMA", "operands": "R1,R2,R3,R4"},
        {"opcode": "RET.REL.NODEC", "operands": "R4,k"},
    ]
    assert slow_paths(code) == set()
    code[0]["operands"] = "$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath"
    assert slow_paths(code) == {2, 3}
