"""Static analysis: real NVRTC compiles of tiny kernels whose SASS mix is known (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from components.features.static.analyze import analyze_file, analyze_source
from components.features.static.compile import CompileError
from components.features.static.frames import static_feature_frame
from components.features.static.names import kernel_instance, kernel_key, short_kernel_name
from components.features.static.sass import classify_opcode, loop_structure, parse_ptxas_log
from components.features.static.source import prepare_source

FP32 = """
__global__ void fma_loop(float* a, int n) {
  float s = a[threadIdx.x], t = 1.0f;
  for (int i = 0; i < n; i++) { s = fmaf(s, t, 0.5f); t = fmaf(t, s, 0.25f); }
  a[threadIdx.x] = s + t;
}
"""
FP64 = """
__global__ void dfma_loop(double* a, int n) {
  double s = a[threadIdx.x], t = 1.0;
  for (int i = 0; i < n; i++) { s = fma(s, t, 0.5); t = fma(t, s, 0.25); }
  a[threadIdx.x] = s + t;
}
"""
SHARED = """
__global__ void reverse(float* a) {
  __shared__ float tile[256];
  tile[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  a[threadIdx.x] = tile[255 - threadIdx.x];
}
"""
ATOMIC = """
__global__ void histo(const int* x, int* bins, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[x[i] & 255], 1);
}
"""
LOCAL = """
__global__ void local_array(const int* idx, float* out) {
  float buf[2048];
  for (int i = 0; i < 2048; i++) buf[(i * 7) & 2047] = out[i];
  out[threadIdx.x] = buf[idx[threadIdx.x] & 2047];
}
"""
HOST_PROGRAM = """
#include <stdio.h>
#include <vector>
#include <chrono>
template <typename T, int B>
__global__ void scale(T* a, T f) { a[blockIdx.x * B + threadIdx.x] *= f; }
__device__ float helper(float x) { return x * x; }
inline float sq(float x) { return x * x; }   // unannotated, used by a kernel: kept (-default-device)
__global__ void use_helper(float* a) { a[threadIdx.x] = helper(a[threadIdx.x]) + sq(a[0]); }
double host_only(std::vector<double>& v) { return v[0]; }
int main() {
  std::vector<double> v(4);
  float* d; cudaMalloc(&d, 1024);
  scale<float, 256><<<4, 256>>>(d, 2.0f);
  scale<double, 128><<<4, 128>>>((double*)d, 2.0);
  use_helper<<<1, 32>>>(d);
  auto t = std::chrono::steady_clock::now();
  printf("%f\\n", host_only(v));
  return 0;
}
"""


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))


def _only(source: str, **kw: object):
    report = analyze_source(source, "sm_90", **kw)
    assert len(report.kernels) == 1
    return report.kernels[0]


def test_fp32_fma_loop_is_ffma_dominant() -> None:
    k = _only(FP32)
    ins = k.instructions
    assert ins["fp32"] > 0 and ins["fp64"] == 0
    assert ins["fp32"] >= max(ins[c] for c in ("fp64", "fp16", "tensor", "sfu", "global_ld"))
    assert k.loops["count"] >= 1 and k.loop_instructions["fp32"] > 0


def test_double_kernel_uses_dfma() -> None:
    k = _only(FP64)
    assert k.instructions["fp64"] > 0 and k.instructions["fp32"] == 0


def test_shared_memory_kernel() -> None:
    k = _only(SHARED)
    assert k.shared_bytes == 256 * 4
    assert k.instructions["shared_st"] >= 1 and k.instructions["shared_ld"] >= 1
    assert k.instructions["barrier"] >= 1 and k.barriers == 1
    assert k.loops["count"] == 0


def test_atomic_kernel() -> None:
    assert _only(ATOMIC).instructions["atomic"] >= 1


def test_large_local_array_goes_to_local_memory() -> None:
    k = _only(LOCAL)
    assert k.stack_bytes >= 2048 * 4
    assert k.instructions["local_st"] >= 1 and k.instructions["local_ld"] >= 1


def test_syntax_error_raises_compile_error_with_log() -> None:
    with pytest.raises(CompileError) as info:
        analyze_source("__global__ void broken(float* a) { a[0] = ; }", name="broken.cu")
    assert "broken.cu" in str(info.value)
    assert "expected an expression" in info.value.log


def test_time_limit() -> None:
    # A limit no compile can meet (the child Python alone takes milliseconds to start), not 0.05 s that a
    # fast machine could beat: the outcome does not depend on the machine's speed or load.
    with pytest.raises(CompileError) as info:
        analyze_source(LOCAL, timeout_s=1e-6, use_cache=False)
    assert info.value.reason == "time limit exceeded"


def test_cache_hit_returns_same_report() -> None:
    first = analyze_source(SHARED, name="shared.cu")
    second = analyze_source(SHARED, name="shared.cu")
    assert not first.cached and second.cached
    assert [k.to_dict() for k in first.kernels] == [k.to_dict() for k in second.kernels]


def test_cache_lives_where_the_caller_says(tmp_path: Path) -> None:
    folder = tmp_path / "static-cache"
    default = tmp_path / "home" / "cache" / "static"
    assert not analyze_source(SHARED, name="s.cu", cache_dir=folder).cached
    assert analyze_source(SHARED, name="s.cu", cache_dir=folder).cached
    entries = list(folder.iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".json" and json.loads(entries[0].read_text())["report"]
    assert not default.exists()  # an explicit folder is the only one written
    assert not analyze_source(SHARED, name="s.cu", cache_dir=folder, use_cache=False).cached
    analyze_source(SHARED, name="other.cu")
    assert len(list(default.iterdir())) == 1  # no folder named: <KERNELCAST_HOME>/cache/static


def test_host_code_is_stripped_and_template_launches_instantiated(tmp_path: Path) -> None:
    path = tmp_path / "prog-cuda" / "main.cu"
    path.parent.mkdir()
    path.write_text(HOST_PROGRAM)
    report = analyze_file(path, "sm_80")
    assert report.source_id == "prog-cuda"
    assert {k.instance for k in report.kernels} == {"scale<float,256>", "scale<double,128>", None}
    assert {"main", "host_only"} <= set(report.dropped_functions)
    assert "sq" not in report.dropped_functions
    by_instance = {k.instance: k for k in report.kernels}
    assert by_instance["scale<double,128>"].instructions["fp64"] >= 1
    only = analyze_file(path, "sm_80", kernel="use_helper")
    assert [k.short_name for k in only.kernels] == ["use_helper"]
    with pytest.raises(LookupError, match="available: scale, use_helper"):
        analyze_file(path, "sm_80", kernel="nope")


def test_prepare_source_keeps_directives_balanced() -> None:
    src = (
        "#ifdef FOO\nint host(){ return cudaGetLastError(); }\n#endif\n__global__ void k(int* a){ a[0]=1; }\n"
    )
    text = prepare_source(src).text
    assert "cudaGetLastError" not in text and "#ifdef FOO" in text and "#endif" in text


def test_feature_frame_and_keys() -> None:
    report = analyze_source(FP32 + ATOMIC, source_id="demo-cuda")
    frame = static_feature_frame([report])
    assert set(frame["kernel_key"]) == {"demo-cuda::fma_loop", "demo-cuda::histo"}
    assert {"s_registers", "s_shared_bytes", "s_fp32", "s_frac_fp32", "s_loops", "s_loop_depth"} <= set(frame)
    assert kernel_key("demo-cuda", "void histo(const int *, int *, int)") == "demo-cuda::histo"


def test_name_helpers() -> None:
    assert short_kernel_name("_Z4kernPf") == "kern"
    assert short_kernel_name("_ZN2ns4kernIfLi256EEEvPT_") == "kern"
    assert short_kernel_name("_Z8fma_loopIfLi256EEvPT_i") == "fma_loop"
    assert (
        kernel_instance("void hmax<__half2>(const T1 *, const T1 *, T1 *, unsigned long)") == "hmax<__half2>"
    )
    assert kernel_instance("void SoAKernel<4096>(const ApplesOnTrees *, int *)") == "SoAKernel<4096>"


def test_sass_helpers() -> None:
    assert classify_opcode("FFMA.FTZ") == "fp32"
    assert classify_opcode("HGMMA.64x128x16.F32") == "tensor"
    assert classify_opcode("LDG.E.128.CONSTANT") == "global_ld"
    assert classify_opcode("HFMA2.MMA", "R3, -RZ, RZ, 1.5, 0") == "other"
    assert classify_opcode("NOP") is None
    instrs = [
        {"opcode": "IADD3"},
        {"opcode": "FFMA"},
        {"opcode": "BRA", "operands": "0x10"},
        {"opcode": "BRA", "operands": "0x0"},
        {"opcode": "EXIT"},
        {"opcode": "BRA", "operands": "0x50"},
    ]
    loops, depth = loop_structure(instrs)
    assert loops == {"count": 2, "max_depth": 2} and depth[:5] == [1, 2, 2, 1, 0]
    log = (
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 16 bytes cumulative stack size, "
        "1024 bytes smem\n"
    )
    res = parse_ptxas_log(log)["_Z1kPf"]
    assert (res.registers, res.shared_bytes, res.spill_store_bytes, res.spill_load_bytes, res.barriers) == (
        40,
        1024,
        8,
        4,
        1,
    )


def test_cli_json_and_error(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from kernelcast.commands.features_static import static_command

    app = typer.Typer()
    app.command()(static_command)
    app.command("noop")(lambda: None)  # two commands so typer keeps the subcommand name
    good = tmp_path / "k.cu"
    good.write_text(SHARED)
    result = CliRunner().invoke(app, ["static-command", str(good), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (entry,) = data["kernels"].values()
    assert {"registers", "shared_bytes", "spills", "instructions", "loops"} <= set(entry)
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k( { }")
    result = CliRunner().invoke(app, ["static-command", str(bad)])
    assert result.exit_code == 2
