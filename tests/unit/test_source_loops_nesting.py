"""Loops counted with what encloses them: a lane guard or a thread-index range holding a loop (its trips
scaled by the share of threads that pass), unknown loops inside unknown loops (the 8-run guess not
compounded), and the host reading that hands a launch its arguments (a helper past a function-like macro,
a kernel parameter shadowing a host constant of that name)."""

from __future__ import annotations

from components.features.static.guards import guarded_loops
from components.features.static.loops import Known, SourceLoop, kernel_loops
from components.models.cuda_estimate import LOOP_TRIPS

GUARDED_LOOPS = """
__device__ void solve(float* a, int iters) {
  for (int it = 0; it < iters; ++it) a[it] += 1.f;
}
__global__ void k(float* a, int n_steps, int dim) {
  if (threadIdx.x < n_steps) {
    for (int i = 0; i < dim; i++) a[i] += 1.f;
  }
  if (threadIdx.x == 0) {
    for (int j = 0; j < 256; j++)
      for (int q = 0; q < 4; q++) a[j] += 2.f;
    solve(a, 16);
  }
  for (int r = 0; r < 3; r++) a[r] = 0.f;
}
"""


def test_loops_under_a_lane_guard_run_for_its_share_of_threads() -> None:
    known = Known(args={"n_steps": 9, "dim": 256}, block=(256, 1, 1), grid=(64, 1, 1))
    loops = kernel_loops(GUARDED_LOOPS, "k", None, known)
    assert loops is not None
    guarded_loops(GUARDED_LOOPS, "k", loops, known)
    trips = [lp.trips for lp in loops]
    # dim under a 9-of-256 range; j under thread 0 only, q inside it not scaled again (its runs multiply
    # j's); the device function's loop under thread 0 by its call; r unguarded
    assert trips == [256 * 9 / 256, 256 / 256, 4.0, 16 / 256, 3.0]
    assert "under threadIdx.x < n_steps: 3.52% of the threads" in loops[0].header
    unknown_range = Known(args={"dim": 256}, block=(256, 1, 1), grid=(64, 1, 1))
    loops = kernel_loops(GUARDED_LOOPS, "k", None, unknown_range)
    assert loops is not None
    guarded_loops(GUARDED_LOOPS, "k", loops, unknown_range)
    assert loops[0].trips == 256.0  # n_steps not given: the range's share is not known, nothing scaled


def test_unknown_loops_inside_unknown_loops_do_not_compound_the_guess() -> None:
    from components.programs.source_loops import _assumed

    nest = [{"parent": -1}, {"parent": 0}, {"parent": 1}, {"parent": -1}, {"parent": 3}]
    # a chain of three unknown loops: the outer one guessed, the inner ones once per its run; a known
    # loop keeps its count, and an unknown loop inside a known one is guessed again
    assert _assumed(nest, [None, None, None, 10.0, None]) == [LOOP_TRIPS, 1.0, 1.0, 10.0, LOOP_TRIPS]


HOST = """
#define check(ans) ans
void run(float* d, int n, int reps) {
  check( cudaMemset(d, 0, n) );
  scale<<<n / 256, 256>>>(d, n, reps);
}
__global__ void scale(float* y, int n, int reps) {
  for (int r = 0; r < reps; r++) y[r] *= 2.f;
  for (int i = 0; i < n; i++) y[i] += 1.f;
}
int main(int argc, char** argv) {
  const int n = atoi(argv[1]);
  run(0, n, 7);
}
"""


def test_a_helper_after_a_function_like_macro_hands_its_arguments_to_the_launch() -> None:
    from components.evaluation.gpuflopbench_flops import host_args

    assert host_args(HOST, "scale", ["4096"]) == {"n": 4096, "reps": 7}


def test_a_kernel_parameter_shadows_a_host_constant_of_its_name() -> None:
    # main's `const int n = atoi(argv[1])` is no value of the kernel's parameter n
    loops = kernel_loops(HOST, "scale", None, Known(block=(256, 1, 1)))
    assert loops is not None
    assert loops[1].trips is None and loops[1].unknown == ["n"]
    assert isinstance(loops[0], SourceLoop) and loops[0].trips is None and loops[0].unknown == ["reps"]


def test_a_while_loop_with_one_counted_step_is_counted_as_its_for_loop() -> None:
    src = """
__device__ float blend(int k, float mu, int n) {
  int nn, kn;
  float b = 1;
  nn = n;
  kn = k;
  while (nn >= 1) { b *= nn; nn--; if (kn > 1) { b /= kn; kn--; } }
  return b;
}
__global__ void k(float* out, int n, float t) {
  int q = 1;
  float sum = 0.f;
  while (sum < t && q < n) { sum += out[q]; q++; }
  int r = 0;
  while (out[r] > 0.f) { r++; r += 2; }
  out[0] = blend(2, 0.5f, 5) + sum;
}
"""
    loops = kernel_loops(src, "k", None, Known(args={"n": 9}, block=(32, 1, 1)))
    assert loops is not None
    # q from 1 below n = 9 (the sum clause only stops it earlier: an upper bound); r changes twice in its
    # loop: unknown; the device function's nn from n = 5 down to 1
    assert [lp.trips for lp in loops] == [8.0, None, 5.0]
    assert loops[1].unknown == ["while-loop condition"]
