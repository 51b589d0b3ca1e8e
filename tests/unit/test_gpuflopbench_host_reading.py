"""Recorded arguments that did not reach gpuFLOPBench kernels past the first 160 programs, and sources NVRTC
refused: ``sscanf(argv[k], ...)``, ``main`` in another file than the launch (its helper's prototype taken
for its call), ``getopt_long`` in a braced loop, a kernel's template head with ``__launch_bounds__``, the
``register`` storage class and host globals with braced initialisers."""

from __future__ import annotations

from pathlib import Path

KERNELS = """
long reference(const int repeat, const unsigned long num_rows, float *y);

__global__ void mv(const unsigned long num_rows, float *y) {
  for (unsigned long j = 0; j < num_rows; j++) y[j] += 1.0f;
}

long reference(const int repeat, const unsigned long num_rows, float *y) {
  for (int i = 0; i < repeat; i++)
    mv<<<4, 256>>>(num_rows, y);
  return 0;
}
"""

MAIN = """
int main(int argc, char *argv[]) {
  unsigned long num_rows = atol(argv[2]);
  int repeat = atoi(argv[3]);
  // call the reference
  long t = reference(repeat, num_rows, y);
}
"""


def test_main_in_another_file_reaches_the_helper_that_launches(tmp_path: Path) -> None:
    from components.evaluation.gpuflopbench_flops import host_args, main_file_text

    folder = tmp_path / "src" / "spmv-cuda"
    folder.mkdir(parents=True)
    (folder / "kernels.cu").write_text(KERNELS)
    (folder / "main.cpp").write_text(MAIN)
    main = main_file_text(tmp_path, "spmv-cuda", KERNELS)
    assert "argv[2]" in main
    assert host_args(KERNELS, "mv", ["100", "10240", "5"]) == {}  # the kernel's file alone: unknown
    assert host_args(KERNELS, "mv", ["100", "10240", "5"], main) == {"num_rows": 10240}
    # a file with its own main needs no other
    assert main_file_text(tmp_path, "spmv-cuda", KERNELS + MAIN) == ""


def test_a_declaration_is_no_call_site() -> None:
    from components.features.static.host_env import env_at

    text = KERNELS + MAIN.replace("atol(argv[2])", "10240")
    env = env_at(text, text.index("mv<<<"), {})
    assert env["num_rows"] == 10240  # bound from main's call, not from the prototype's parameters


def test_sscanf_of_a_recorded_argument_assigns_it() -> None:
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
__global__ void sum(float *x, int n) { for (int i = 0; i < n; i++) x[0] += x[i]; }
int main(int argc, char *argv[]) {
  int nx, np;
  if (sscanf(argv[2], "%d", &nx) == EOF) { return 0; }
  if (sscanf(argv[4], "%d", &np) == EOF) { return 0; }
  sum<<<1, 1>>>(x, np + nx);
}
"""
    assert host_args(text, "sum", ["-x", "128", "-np", "400000"]) == {"n": 400128}


def test_getopt_long_in_a_braced_loop_sets_the_given_options() -> None:
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
__global__ void map(float *x, int n) { for (int j = 0; j < n; ++j) x[0] += x[j]; }
int main(int argc, char **argv) {
  int n = 1000;
  int iter = 10;
  int opt, opt_index = 0;
  while ((opt = getopt_long(argc, argv, "::n:i:", size_opts, &opt_index)) != -1) {
    switch (opt) {
      case 'n':
        n = atoi(optarg);
        break;
      case 'i':
        iter = atoi(optarg);
        break;
      default:
        exit(1);
    }
  }
  map<<<n / 256, 256>>>(x, n * iter);
}
"""
    assert host_args(text, "map", ["-n", "20000"]) == {"n": 200000}  # -i not given: its default stands
    assert host_args(text, "map", ["-n", "20000", "-i", "3"]) == {"n": 60000}
    assert host_args(text, "map", []) == {"n": 10000}


def test_template_arguments_bind_through_launch_bounds() -> None:
    from components.features.static.loops import kernel_parameters

    text = """
template <class T, int BINS, int BLOCK_SIZE>
__launch_bounds__(BLOCK_SIZE)
__global__
void topk(const T *x, const int n) { for (int u = 0; u < BINS / BLOCK_SIZE; u++) {} }
"""
    scalars, template = kernel_parameters(text, "topk")
    assert scalars == ["n"] and set(template) == {"BINS", "BLOCK_SIZE"}


def test_register_and_host_globals_compile() -> None:
    from components.features.static.analyze import analyze_source
    from components.features.static.source import REGISTER_SHIM, prepare_source

    source = """
#include <getopt.h>
static struct option long_options[] = {
  {"input", 1, NULL, 'i'},
  {0, 0, 0, 0}
};
int do_verify = 0;
const int table[2] = {3, 4};
template <class T>
__global__ void add(T *data, int n) {
  register T s = data[threadIdx.x];
  for (int j = 0; j < n; ++j) s = s + table[j & 1];
  data[threadIdx.x] = s;
}
template <typename T>
void test(int n) { add<T><<<1, 256>>>(0, n); }
int main() { test<float>(5); }
"""
    text = prepare_source(source).text
    assert REGISTER_SHIM in text and "long_options" not in text and "table[2]" in text
    assert REGISTER_SHIM not in prepare_source("__global__ void k(float *x) { x[0] = 1; }").text
    report = analyze_source(source, name="t.cu", use_cache=False)
    assert [k.instance for k in report.kernels] == ["add<float>"]


def test_host_declarations_nvrtc_refuses_are_dropped_and_device_errors_stand() -> None:
    import pytest

    from components.features.static.analyze import analyze_source
    from components.features.static.compile import CompileError
    from components.features.static.prune import prune_failing

    host_class = """
using namespace std;
class Report { public: void print(string title, ostream &out); int rows; };
__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }
"""
    report = analyze_source(host_class, name="t.cu", use_cache=False)
    assert [k.short_name for k in report.kernels] == ["twice"]
    broken = "__global__ void twice(float *x) { x[threadIdx.x] = not_declared(x); }\n"
    with pytest.raises(CompileError, match="not_declared"):
        analyze_source(broken, name="t.cu", use_cache=False)
    prepared = "prelude\n#line 1\n" + broken
    assert prune_failing(prepared, 't.cu(1): error: identifier "not_declared" is undefined') is None


def test_a_local_handed_over_by_address_is_unknown_after_the_call() -> None:
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
__global__ void fan1(float *m, int size, int t) { for (int i = 0; i < size; i++) m[i] += t; }
void ForwardSub(float *m, int size) {
  for (int t = 0; t < size - 1; t++) fan1<<<16, 256>>>(m, size, t);
}
int main(int argc, char *argv[]) {
  int size = -1;
  if (parseCommandline(argc, argv, &size)) { return 0; }
  ForwardSub(m, size);
}
"""
    assert "size" not in host_args(text, "fan1", ["-s", "4096"])  # not the -1 the parser overwrote
    assert host_args(text.replace("&size", "&other"), "fan1", ["-s", "4096"])["size"] == -1
