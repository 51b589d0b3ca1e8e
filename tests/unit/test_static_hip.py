"""HIP static analysis: AMDGPU ISA classes, occupancy, arch mapping (no compiler needed) and real
compiles of benchmark_hub's HIP kernels with Debian's hipcc + rocm-device-libs (skipped without them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from components.devices import load_catalog
from components.features.static.amdgpu import (
    analyze_function,
    classify_instruction,
    occupancy,
    split_functions,
    waves_per_simd_by_registers,
)
from components.features.static.compile import CompileError
from components.features.static.hip import (
    HipToolchainMissing,
    hip_arch_for_device,
    hip_compile_arch,
    hip_toolchain,
)
from components.features.static.hip_translate import untranslatable_reason

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
CONV_HIP = DATASETS / "benchmark_hub" / "kernels" / "convolution_milo.cu.hip"
DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc")
needs_hip = pytest.mark.skipif(
    shutil.which("hipcc") is None or not DEVICE_LIBS.is_file(),
    reason="HIP compiler absent: apt-get install hipcc rocm-device-libs",
)


@pytest.mark.parametrize(
    ("mnemonic", "shared", "amd"),
    [
        ("v_fmac_f32_e32", "fp32", "valu"),
        ("v_fma_f64", "fp64", "valu"),
        ("v_pk_fma_f16", "fp16", "valu"),
        ("v_add_u32_e32", "int", "valu"),
        ("v_cvt_f32_i32_e32", "convert", "valu"),
        ("v_exp_f32_e32", "sfu", "valu"),
        ("v_mfma_f32_32x32x8f16", "tensor", "matrix"),
        ("v_dot2_f32_f16", "fp16", "matrix"),
        ("global_load_dwordx4", "global_ld", "vmem"),
        ("buffer_store_dword", "global_st", "vmem"),
        ("global_atomic_add_f32", "atomic", "vmem"),
        ("scratch_load_dword", "local_ld", "vmem"),
        ("ds_read2_b32", "shared_ld", "lds"),
        ("ds_write_b32", "shared_st", "lds"),
        ("ds_bpermute_b32", "shuffle", "lds"),
        ("s_load_dwordx4", "other", "smem"),
        ("s_add_u32", "other", "salu"),
        ("s_barrier", "barrier", "salu"),
        ("s_cbranch_execz", "branch", "branch"),
        ("s_waitcnt", "other", "waitcnt"),
        ("v_mov_b32_e32", "other", "valu"),
    ],
)
def test_amdgpu_mnemonics_map_to_the_sass_classes(mnemonic: str, shared: str, amd: str) -> None:
    assert classify_instruction(mnemonic) == (shared, amd)
    assert classify_instruction("s_nop") == (None, None)


def test_backward_branch_is_a_loop_and_labels_are_not_functions() -> None:
    asm = """\t.type\tk,@function
k:
\ts_mov_b32 s0, 0
.LBB0_1:
\tv_fmac_f32_e32 v1, v2, v3
\tglobal_load_dword v4, v[0:1], off
\ts_cbranch_scc1 .LBB0_1
\ts_endpgm
.Lfunc_end0:
obj_not_a_function:
\t.zero 4
"""
    (fn,) = split_functions(asm)
    isa = analyze_function(fn)
    assert fn.name == "k" and isa.loops == {"count": 1, "max_depth": 1}
    assert isa.loop_instructions["fp32"] == 1 and isa.loop_instructions["global_ld"] == 1
    assert isa.instructions["total"] == 5 and isa.amd["salu"] == 1 and isa.amd["branch"] == 2


def test_occupancy_from_the_isa_register_file_and_the_catalog() -> None:
    catalog = load_catalog()
    mi250x, w6600 = catalog.resolve("MI250X"), catalog.resolve("W6600")
    assert waves_per_simd_by_registers("gfx90a", 128) == 4  # 512-entry unified file / 128
    assert waves_per_simd_by_registers("gfx90a", 64, agprs=64) == 4  # AGPRs share the file on CDNA2
    assert waves_per_simd_by_registers("gfx908", 128, agprs=64) == 2  # separate 256-entry files on CDNA1
    heavy = occupancy("gfx90a", 128, 0, 0, 256, mi250x)  # 4 waves/block, 16 waves/CU by registers
    assert heavy["waves_per_cu"] == 16 and heavy["limiter"] == "registers"
    lds = occupancy("gfx1032", 16, 0, 48 * 1024, 256, w6600)  # one 48 KB block per 64 KB CU
    assert lds["blocks_per_cu"] == 1 and lds["waves_per_cu"] == 8 and lds["limiter"] == "lds"
    assert 0 < lds["occupancy"] <= 1


def test_catalog_gpus_map_to_an_isa_the_compiler_knows() -> None:
    catalog = load_catalog()
    assert hip_arch_for_device(catalog.resolve("MI250X")) == ("gfx90a", None)
    arch, note = hip_arch_for_device(catalog.resolve("MI300X"))
    assert arch == "gfx940" and "gfx942" in note and "nearest" in note
    assert hip_compile_arch("gfx1100")[0] == "gfx1030" and hip_compile_arch("gfx1032") == ("gfx1032", None)
    with pytest.raises(ValueError, match="AMD arch"):
        hip_compile_arch("sm_90")
    assert "PTX" in untranslatable_reason('__global__ void k() { asm volatile("nop;"); }')


def test_missing_compiler_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELCAST_HIP_CLANG", "/nonexistent/clang++")
    hip_toolchain.cache_clear()
    try:
        with pytest.raises(HipToolchainMissing) as info:
            hip_toolchain()
        assert (
            "\n" not in str(info.value)
            and "hipcc" in str(info.value)
            and "rocm-device-libs" in str(info.value)
        )
    finally:
        hip_toolchain.cache_clear()


@needs_hip
@pytest.mark.parametrize(("arch", "wave"), [("gfx908", 64), ("gfx90a", 64), ("gfx940", 64), ("gfx1030", 32)])
def test_benchmark_hub_convolution_compiles_per_arch_with_its_macros(
    arch: str, wave: int, tmp_path: Path
) -> None:
    from components.features.static.hip import analyze_hip_file

    if not CONV_HIP.is_file():
        pytest.skip(f"dataset not present: {CONV_HIP}")
    defines = {"block_size_x": "32", "block_size_y": "8", "filter_width": "15", "filter_height": "15"}
    report = analyze_hip_file(CONV_HIP, arch, "convolution_kernel", defines=defines, cache_dir=tmp_path)
    (k,) = report.kernels
    assert report.arch == arch and k.extra["wave_size"] == wave and k.registers > 0
    # shared tile (8 + 14) x (32 + 14) floats (no padding: block_size_x is a multiple of 32)
    assert k.shared_bytes == 22 * 46 * 4 and k.barriers >= 1
    assert k.instructions["fp32"] > 0 and k.instructions["shared_ld"] > 0 and k.loops["count"] >= 1
    again = analyze_hip_file(CONV_HIP, arch, "convolution_kernel", defines=defines, cache_dir=tmp_path)
    assert again.cached and again.kernels[0].to_dict() == k.to_dict()


@needs_hip
def test_cuda_source_through_the_hip_translation(tmp_path: Path) -> None:
    from components.features.static.hip import analyze_hip_source

    cuda = """#include <cuda_runtime.h>
#include <vector>
template <typename T> __global__ void scale(T* a, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  T v = __shfl_down_sync(0xffffffff, a[i], 1);
  if (i < n) a[i] = v * s;
}
int main() { std::vector<float> h(16); float* d; cudaMalloc(&d, 64); scale<float><<<1, 16>>>(d, 2.f, 16); }
"""
    report = analyze_hip_source(cuda, "gfx90a", from_cuda=True, cache_dir=tmp_path)
    (k,) = report.kernels
    assert k.short_name == "scale" and k.instance == "scale<float>" and k.instructions["fp32"] >= 1
    # gpuFLOPBench's jaccard: its extracted device code lacks the host's <vector>; the whole program compiles
    jaccard = DATASETS / "gpuflopbench" / "src" / "jaccard-cuda" / "main.cu"
    if jaccard.is_file():
        from components.features.static.hip import analyze_hip_file

        report = analyze_hip_file(jaccard, "gfx1030", "jaccard_row_sum", cache_dir=tmp_path)
        assert report.kernels and all(k.extra["wave_size"] == 32 for k in report.kernels)
    with pytest.raises(CompileError, match="no HIP translation"):
        analyze_hip_source(
            '__global__ void k(int* a) { asm("mov.u32 %0, 1;" : "=r"(a[0])); }',
            "gfx90a",
            from_cuda=True,
            cache_dir=tmp_path,
        )


@needs_hip
def test_hip_question_on_amd_and_nvidia_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    hip = """#include <hip/hip_runtime.h>
__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() { float* x; hipMalloc(&x, 4); hipLaunchKernelGGL(saxpy, dim3(1), dim3(1), 0, 0, 1, 2.f, x, x); }
"""
    catalog = load_catalog()
    specs = [catalog.resolve("MI250X"), catalog.resolve("MI300X")]
    mi250x, mi300x = predict_source(hip, "hip", {"grid": [65536], "block": [256]}, "fp32", specs, None)
    assert "gfx90a ISA" in mi250x["note"] and "wave64" in mi250x["note"]
    assert "gfx940" in mi300x["note"] and "gfx942" in mi300x["note"]
    assert mi250x["bound_pipe"] == "dram" and mi250x["duration_us"] >= mi250x["roofline_us"] > 0
    assert mi250x["achieved_gbps"] <= catalog.resolve("MI250X").dram_gbps
    assert json.loads(mi250x["breakdown"])[0]["op"] == "saxpy"
    # CUDA asked on an AMD GPU goes through HIP; HIP asked on an NVIDIA GPU goes through NVRTC
    (cuda_on_amd,) = predict_source(
        hip.replace("hip/hip_runtime.h", "cuda_runtime.h"),
        "cuda",
        {"grid": [64], "block": [256]},
        None,
        specs[:1],
        None,
    )
    assert "HIP translation" in cuda_on_amd["note"]
    pytest.importorskip("cuda.bindings.nvrtc")
    (h100,) = predict_source(
        hip, "hip", {"grid": [64], "block": [256]}, None, [catalog.resolve("H100")], None
    )
    assert "compiled as CUDA" in h100["note"] and h100["duration_us"] > 0
