"""Static analysis on real-code patterns: -D/-I, build-file and #error-guard defaults, template
kernels instantiated from launch sites, every catalog arch, and "no kernel found" as an error.

Real NVRTC compiles (no GPU needed); each source is a few lines, so each test takes ~1 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from components.features.static.analyze import NoKernelError, analyze_file, analyze_source
from components.features.static.build import guard_defaults, parse_build_file
from components.features.static.compile import CompileError, arch_for_device, check_arch, compile_arch
from components.features.static.templates import resolve_launches

NEEDS_N = "__global__ void fill(float* a) { a[threadIdx.x] = N; }\n"
HOST_TEMPLATE = """
template <typename T>
__global__ void scale(T* x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a;
}

template <typename T>
void run(T* d, int n) { scale<<<(n + 255) / 256, 256>>>(d, (T)2, n); }

template <int BS, typename T>
__global__ void blocked(T* x) { x[threadIdx.x % BS] += 1; }

int main() {
  const int BLOCK = 128;
  float* f; double* g; int n = 1024;
  cudaMalloc(&f, n * sizeof(float));
  run<float>(f, n);
  run<double>(g, n);
  blocked<BLOCK><<<1, BLOCK>>>(f);
  return 0;
}
"""


def test_defines_and_include_dirs(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(NEEDS_N)
    with pytest.raises(CompileError) as info:
        analyze_file(src, use_cache=False)
    assert "-D" in str(info.value)  # the message names the fix
    report = analyze_file(src, defines={"N": "3"}, use_cache=False)
    assert [k.short_name for k in report.kernels] == ["fill"]
    assert report.defines["N"] == "3"
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "size.h").write_text("#define N 7\n")
    src.write_text('#include "size.h"\n' + NEEDS_N)
    with pytest.raises(CompileError, match="-I"):
        analyze_file(src, use_cache=False)
    assert analyze_file(src, include_dirs=[inc], use_cache=False).kernels


def test_build_file_and_error_guard_defaults(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("CFLAGS = -O3 -DN=5 -I inc $(EXTRA)\nall:\n\tnvcc $(CFLAGS) k.cu\n")
    (tmp_path / "inc").mkdir()
    found = parse_build_file(tmp_path / "Makefile")
    assert found.defines == {"N": "5"} and found.include_dirs == [(tmp_path / "inc").resolve()]
    src = tmp_path / "k.cu"
    src.write_text(NEEDS_N)
    assert analyze_file(src, use_cache=False).defines["N"] == "5"  # taken from the Makefile
    assert analyze_file(src, defines={"N": "9"}, use_cache=False).defines["N"] == "9"  # -D wins
    guarded = (
        "#if defined(FLOAT)\ntypedef float real;\n#elif defined(DOUBLE)\ntypedef double real;\n#else\n"
        "#error Must define one of FLOAT, DOUBLE\n#endif\n#ifndef MKX\n#error need MKX\n#endif\n"
    )
    chosen, required = guard_defaults(guarded, {})
    assert chosen == {"FLOAT": ""} and required == ["MKX"]
    assert guard_defaults(guarded, {"DOUBLE": "", "MKX": "4"}) == ({}, [])


def test_template_kernels_instantiated_from_launch_sites(tmp_path: Path) -> None:
    exprs = resolve_launches(HOST_TEMPLATE, HOST_TEMPLATE)
    assert "scale<float>" in exprs and "scale<double>" in exprs  # from run<float>/run<double>
    assert "blocked<128, float>" in exprs  # host constant substituted, T deduced from 'float* f'
    report = analyze_source(HOST_TEMPLATE, name="t.cu", use_cache=False)
    instances = sorted(k.instance for k in report.kernels)
    assert instances == ["blocked<128,float>", "scale<double>", "scale<float>"]
    fp64 = next(k for k in report.kernels if k.instance == "scale<double>")
    assert fp64.instructions["fp64"] >= 1  # the double instantiation really is double code


@pytest.mark.parametrize(
    ("arch", "compiled"), [("sm_60", "sm_75"), ("sm_70", "sm_75"), ("7.0", "sm_75"), ("sm_90", "sm_90")]
)
def test_every_catalog_arch_is_accepted(arch: str, compiled: str) -> None:
    assert compile_arch(arch)[0] == compiled
    report = analyze_source(NEEDS_N, arch, defines={"N": "1"}, use_cache=False)
    assert report.arch == compiled and report.requested_arch == check_arch(arch)
    assert (report.arch_note is None) == (compiled == check_arch(arch))


def test_catalog_gpus_map_to_a_compiler_arch() -> None:
    from components.devices import load_catalog

    for spec in load_catalog().all():
        arch, _ = arch_for_device(spec)
        assert arch.startswith("sm_"), spec.id
    with pytest.raises(ValueError, match="unknown arch"):
        check_arch("gfx942")


def test_no_kernel_found_is_an_error_saying_why(tmp_path: Path) -> None:
    with pytest.raises(NoKernelError, match="defines no __global__"):
        analyze_source("int helper(int x) { return x + 1; }\n", name="h.cu", use_cache=False)
    lonely = "template <typename T> __global__ void never(T* x) { x[0] = 1; }\n"
    with pytest.raises(NoKernelError, match="never are never instantiated"):
        analyze_source(lonely, name="t.cu", use_cache=False)


def test_cli_defines_and_one_line_errors(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from kernelcast.commands.features_static import static_command

    app = typer.Typer()
    app.command()(static_command)
    app.command("noop")(lambda: None)
    src = tmp_path / "k.cu"
    src.write_text(NEEDS_N)
    ok = CliRunner().invoke(app, ["static-command", str(src), "-D", "N=2", "--arch", "sm_70"])
    assert ok.exit_code == 0, ok.output
    assert "fill" in ok.stdout
    empty = tmp_path / "t.cu"
    empty.write_text("template <typename T> __global__ void never(T* x) { x[0] = 1; }\n")
    result = CliRunner().invoke(app, ["static-command", str(empty)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no kernel found" in lines[0]
    bad_define = CliRunner().invoke(app, ["static-command", str(src), "-D", "1X=2"])
    assert bad_define.exit_code == 2 and "-D" in bad_define.output
