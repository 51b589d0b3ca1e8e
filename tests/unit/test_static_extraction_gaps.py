"""What kept gpuFLOPBench programs from compiling under NVRTC: <cub/cub.cuh> (an #error in CCCL), host
launchers declared ``extern "C"`` kept as device code, the mask-less warp shuffles and ``std::uint8_t``."""

from __future__ import annotations


def test_cub_umbrella_header_becomes_its_device_headers():
    from components.features.static.source import PreparedSource, inline_includes

    prepared = PreparedSource(text="")
    text = inline_includes('#include <cub/cub.cuh>\n#include "cub/cub.cuh"\n', None, (), prepared)
    assert "cub/cub.cuh" not in text
    assert text.count("#include <cub/block/block_reduce.cuh>") == 2
    assert prepared.dropped_includes == [] and prepared.missing_includes == []


SOURCE = """
__global__ void k(float* x, unsigned n) {
  x[0] = __shfl_down(x[threadIdx.x], 1);
  std::uint8_t b = 3;
  x[1] = b;
}

extern "C" void run_k(float* x, unsigned n, dim3 grid, dim3 block)
{
  k<<<grid, block>>>(x, n);
}

extern "C" {
__device__ float twice(float v) { return 2 * v; }
}
"""


def test_an_extern_c_host_launcher_is_dropped_and_an_extern_c_block_kept():
    from components.features.static.source import prepare_source

    prepared = prepare_source(SOURCE)
    assert "<<<" not in prepared.text and "run_k" in prepared.dropped_functions
    assert "twice" in prepared.text


def test_shims_only_when_the_device_code_needs_them():
    from components.features.static.source import LEGACY_SHUFFLE_SHIM, STD_INT_SHIM, prepare_source

    text = prepare_source(SOURCE).text
    assert LEGACY_SHUFFLE_SHIM in text and STD_INT_SHIM in text
    plain = prepare_source("__global__ void k(float* x) { x[0] = 1.0f; }").text
    assert LEGACY_SHUFFLE_SHIM not in plain and STD_INT_SHIM not in plain
    own = "__device__ float4 __shfl_down(const float4 v, unsigned d) { return v; }\n"
    own += "__global__ void k(float4* x) { x[0] = __shfl_down(x[1], 1); }\n"
    assert LEGACY_SHUFFLE_SHIM not in prepare_source(own).text  # the program's own overload stands


def test_the_source_compiles_with_nvrtc_and_its_kernel_is_analysed():
    from components.features.static.analyze import analyze_source

    cub = "#include <cub/cub.cuh>\n__global__ void r(float* x) { typedef cub::BlockReduce<float, 128> R;\n"
    cub += "__shared__ typename R::TempStorage t; float s = R(t).Sum(x[threadIdx.x]);\n"
    cub += "if (!threadIdx.x) x[0] = s; }\n"
    report = analyze_source(SOURCE + cub, name="t.cu", use_cache=False)
    assert sorted(k.short_name for k in report.kernels) == ["k", "r"]


def test_host_prototypes_pull_no_host_type_in_and_unused_aliases_go():
    from components.features.static.analyze import analyze_source
    from components.features.static.source import prepare_source

    source = """
struct Option { std::string inputFile; int threshold; };
void checkOption(int argc, char **argv, Option &option);
typedef high_resolution_clock myclock;
typedef float real;
__global__ void k(real* x, int n) { x[threadIdx.x] = n; }
"""
    text = prepare_source(source).text
    assert "std::string" not in text and "checkOption" not in text and "myclock" not in text
    assert "typedef float real;" in text  # an alias the kernel names stays
    assert [kern.short_name for kern in analyze_source(source, name="t.cu", use_cache=False).kernels] == ["k"]
