"""Loops of the ``__device__`` functions a kernel calls (gpuFLOPBench cbsfil's spline filter, written out
here): counted in the kernel's nest with the callee's parameters bound to the call's arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

FILTER = """
#define POLE (sqrtf(3.0f)-2.0f)
__device__ void recurse(
    float* c,         // samples --> coefficients
    int length,       // number of samples
    int step)
{
  float previous = *c;
  for (int n = 1; n < length; n++) {
    c += step;
    *c = previous = POLE * previous + *c;
  }
  for (int n = length - 2; 0 <= n; n--) {
    c -= step;
    *c = previous = POLE * (previous - *c);
  }
}

__global__ void filter(float* image, int width, int height, int passes) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x < width) {
    for (int p = 0; p < passes; p++) {
      recurse(image + x, height, width);
    }
  }
}
"""


def test_a_called_functions_loops_nest_under_the_call_with_bound_parameters():
    from components.features.static.loops import Known, kernel_loops

    known = Known({}, {"width": 64, "height": 100, "passes": 3}, (1, 1, 1), (64, 1, 1))
    outer, forward, backward = kernel_loops(FILTER, "filter", None, known)
    assert (outer.trips, forward.trips, backward.trips) == (3, 99, 99)
    assert (outer.parent, forward.parent, backward.parent) == (-1, 0, 0)
    unknown = kernel_loops(FILTER, "filter", None, Known({}, {"passes": 3}, (1, 1, 1), (64, 1, 1)))
    assert unknown[1].trips is None and unknown[1].unknown == ["length"]


def test_the_filters_flops_follow_the_column_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from components.devices import load_catalog
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    spec = [load_catalog().resolve("RTX 3080")]

    def flops(height: int) -> tuple[float, str]:
        launch = {"grid": [1], "block": [64], "args": {"width": 64, "height": height, "passes": 1}}
        (answer,) = predict_source(FILTER, "cuda", launch, "fp32", spec, None)
        return answer["gflops"] * answer["duration_us"] * 1e3, answer["note"]

    short, note = flops(101)
    long, _ = flops(1001)
    assert "loop trip counts from the source" in note, note
    assert long / short == pytest.approx(10, rel=0.02)  # the FLOPs sit in the two loops of 100 vs 1000 trips


def test_a_conditional_bound_evaluates_both_ways():
    from components.features.static.loops import Known, kernel_loops

    clamped = FILTER.replace(
        "float previous = *c;", "float previous = *c;\n  const uint horizon = 12 < length ? 12 : length;"
    ).replace("n < length; n++", "n < horizon; n++")
    one = (1, 1, 1)
    short = kernel_loops(clamped, "filter", None, Known({}, {"height": 5, "passes": 1}, one, one))
    long = kernel_loops(clamped, "filter", None, Known({}, {"height": 500, "passes": 1}, one, one))
    assert (short[1].trips, long[1].trips) == (4, 11)  # n from 1 below min(12, length)
