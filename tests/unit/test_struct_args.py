"""A kernel's struct argument (``const params p``) counted by its fields: the host's aggregate initialiser
and member assignments give ``p.k`` values (static.host_structs), ``--arg p.k=V`` gives them by hand, and
the kernel's loops read ``p.k`` -- through a one-argument math call such as ``(int)sqrtf(float(k))``."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.features.static.loops import Known, evaluate, kernel_loops
from components.programs.errors import ProgramError

PROGRAM = """
typedef struct {
  int batch;
  int kernel_size, width;   // two fields on one line
} params;

__global__ void conv(const float* img, float* out, const params p, const int unit, const size_t n) {
  size_t i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i >= n) return;
  const int k_size = (int)sqrtf(float(p.kernel_size));
  float acc = 0.f;
  for (int y = 0; y < k_size; ++y)
    for (int x = 0; x < k_size; ++x)
      acc += img[i + y * p.width + x] * unit;
  out[i] = acc;
}

void run(const float* img, float* out, params q, int reps) {
  q.width = 64;
  for (int r = 0; r < reps; r++)
    conv<<<q.batch * 4, 256>>>(img, out, q, 1, // unit,
        (size_t)q.batch * 1024);
}

int main(int argc, char** argv) {
  params p = {2, 9, 32};
  run(0, 0, p, atoi(argv[1]));
}
"""


def test_the_host_hands_the_struct_fields_to_the_launch() -> None:
    from components.evaluation.gpuflopbench_flops import host_args

    # the aggregate initialiser, the helper's member assignment (width), and a comment between arguments
    # that must not shift them
    assert host_args(PROGRAM, "conv", ["5"]) == {
        "p.batch": 2,
        "p.kernel_size": 9,
        "p.width": 64,
        "unit": 1,
        "n": 2048,
    }


def test_loops_read_struct_fields_and_name_the_missing_one() -> None:
    assert evaluate("(int)sqrtf(float(p.kernel_size))", {"p__kernel_size": 16}) == 4
    loops = kernel_loops(PROGRAM, "conv", None, Known(args={"p.kernel_size": 9}, block=(256, 1, 1)))
    assert loops is not None and [lp.trips for lp in loops] == [3.0, 3.0]
    loops = kernel_loops(PROGRAM, "conv", None, Known(block=(256, 1, 1)))
    assert loops is not None and loops[0].unknown == ["k_size"]  # the local it bounds by


def test_a_struct_field_argument_counts_the_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from components.devices import load_catalog
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    spec = [load_catalog().resolve("RTX 3080")]

    def answer(args: dict) -> dict:
        launch = {"grid": [8], "block": [256], "kernel": "conv", "args": args}
        (a,) = predict_source(PROGRAM, "cuda", launch, "fp32", spec, None)
        return a

    sizes = [answer({"p.kernel_size": k * k, "n": 2048}) for k in (2, 3, 4)]
    assert [f"x{k}" in a["note"] for k, a in zip((2, 3, 4), sizes, strict=True)] == [True] * 3
    assert "loop trip counts from the source" in sizes[0]["note"]
    f2, f3, f4 = (a["gflops"] * a["duration_us"] for a in sizes)
    # the window's body runs k^2 times beside one-off work: 16 - 9 against 9 - 4 more bodies
    assert (f4 - f3) / (f3 - f2) == pytest.approx(7 / 5, rel=1e-6)
    with pytest.raises(ProgramError, match=r"'q\.kernel_size' is no scalar parameter"):
        answer({"q.kernel_size": 4})


CHAI = """
struct Params {
  int groups;
  int in_size, out_size;
  Params(int argc, char **argv) {
    groups = 256;
    in_size = 3;
    out_size = in_size * 100;
    int opt;
    while ((opt = getopt(argc, argv, "hg:m:n:")) >= 0) {
      switch (opt) {
        case 'h': usage(); exit(0); break;
        case 'g': groups = atoi(optarg); break;
        case 'm': in_size = atoi(optarg); break;
        case 'n': out_size = atoi(optarg); break;
      }
    }
  }
};
__global__ void blend(float* out, const int n_in, const int n_out) {
  int i;
  i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i >= n_out) return;
  for (int k = 0; k <= n_in; k++) out[i] += k;
}
int main(int argc, char **argv) {
  const Params p(argc, argv);
  blend<<<(p.out_size + p.groups - 1) / p.groups, p.groups>>>(0, p.in_size, p.out_size);
}
"""


def test_getopt_options_and_constructor_defaults_reach_the_launch() -> None:
    from components.evaluation.gpuflopbench_flops import host_args
    from components.features.static.host_options import recorded_options

    assert recorded_options("hg:m:n:", ["-m", "5", "-n200", "-h", "file.txt"]) == {"m": "5", "n": "200"}
    # no options recorded (file names only): the constructor's defaults, out_size computed from in_size
    assert host_args(CHAI, "blend", ["in.pgm", "out.pgm"]) == {"n_in": 3, "n_out": 300}
    assert host_args(CHAI, "blend", ["-m", "7", "-n", "50"]) == {"n_in": 7, "n_out": 50}


def test_a_thread_index_assigned_after_its_declaration_guards_the_threads() -> None:
    from components.features.static.guards import thread_guard

    guard = thread_guard(CHAI, "blend", Known(args={"n_out": 300}, grid=(2, 1, 1), block=(256, 1, 1)))
    assert guard == (300 / 512, "if (i >= n_out)")
