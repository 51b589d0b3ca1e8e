"""Case selectors: a per-thread value compared with several constants sends each thread to one case
(gpuFLOPBench contract's layout, written out here)."""

from __future__ import annotations

CONTRACT = """
const int nCases = 3;
__global__ void contraction(const float* t, float* v, const int size, const int N, const int C) {
  int tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid < size) {
    int Y = C * nCases;
    int Case = (tid % Y) / C + 1;
    float sum = 0.f;
    int a, b;
    if (Case == 1) {
      for (a = 0; a < N; ++a) { sum += t[a]; }
    }
    if (Case == 2) {
      for (a = 0; a < N; ++a) { for (b = 0; b < N; ++b) { sum += t[a * N + b]; } }
    }
    if (Case == 3) {
      for (b = 0; b < N; ++b) { sum += t[b]; }
    }
    v[tid] = sum;
  }
}
"""


def _loops(source, args):
    from components.features.static.guards import guarded_loops
    from components.features.static.loops import Known, kernel_loops

    known = Known({}, args, (8, 1, 1), (64, 1, 1))
    loops = kernel_loops(source, "contraction", None, known)
    guarded_loops(source, "contraction", loops, known)
    return loops


def test_each_case_runs_for_its_share_of_the_threads_and_nested_loops_are_not_scaled_twice():
    loops = _loops(CONTRACT, {"N": 10, "C": 4, "size": 512})
    import pytest

    assert [lp.trips for lp in loops] == pytest.approx([10 / 3, 10 / 3, 10.0, 10 / 3])
    assert "(under Case == 1: 33.33% of the threads)" in loops[0].header


def test_no_selector_when_the_value_is_uniform_is_a_loop_variable_or_is_compared_with_one_constant():
    from components.features.static.selectors import case_shares, thread_varying
    from components.features.static.source import code_mask

    uniform = CONTRACT.replace("int Case = (tid % Y) / C + 1;", "int Case = C % nCases + 1;")
    assert [lp.trips for lp in _loops(uniform, {"N": 10, "C": 4, "size": 512})] == [10.0] * 4
    reassigned = CONTRACT.replace("float sum = 0.f;", "float sum = 0.f; Case += 1;")
    assert [lp.trips for lp in _loops(reassigned, {"N": 10, "C": 4, "size": 512})] == [10.0] * 4
    one = "__global__ void k(float* x) { int w = threadIdx.x / 32; if (w == 1) { x[0] = 1.f; } }"
    assert thread_varying(one) == {"w"}
    assert case_shares(one, code_mask(one), one.index("{"), len(one) - 1) == {}
    looped = (
        "__global__ void k(float* x) { for (int i = threadIdx.x; i < 9; i++) "
        "{ if (i == 1) x[i] = 0.f; if (i == 2) x[i] = 1.f; } }"
    )
    assert "i" not in thread_varying(looped)
