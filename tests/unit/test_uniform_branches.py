"""Uniform branches on kernel scalar arguments of known value (gpuFLOPBench adam's ``mode``, written
out here): only the side every thread takes is counted."""

from __future__ import annotations

from pathlib import Path

import pytest

ADAM = """
typedef enum {
  MODE_0 = 0, // eps under the square root
  MODE_1      // eps outside it
} mode_t;
__global__ void adam(float* p, const float* v, const int steps, const int n, mode_t mode, const float eps) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int t = 1; t <= steps; t++) {
    float denom;
    if (mode == MODE_0)
      denom = sqrtf(v[i] + eps);
    else {
      float s = 0.f;
      for (int k = 0; k < 4; k++) s += v[i] * (float)k + eps;
      denom = sqrtf(s) + eps;
    }
    p[i] -= 0.5f / denom;
  }
}
"""


def test_the_untaken_side_is_emptied_and_named():
    from components.features.static.uniform import fold_uniform_branches

    taken, folded = fold_uniform_branches(ADAM, {"mode": 0, "n": 64, "steps": 3})
    assert folded == ["mode == MODE_0 (taken)"]
    assert "sqrtf(v[i] + eps)" in taken and "sqrtf(s)" not in taken and "for (int k" not in taken
    other, folded = fold_uniform_branches(ADAM, {"mode": 1})
    assert folded == ["mode == MODE_0 (not taken)"]
    assert "sqrtf(v[i] + eps)" not in other and "for (int k" in other


def test_branches_on_thread_indices_unknown_or_assigned_arguments_are_left_alone():
    from components.features.static.uniform import fold_uniform_branches

    assert fold_uniform_branches(ADAM, {}) == (ADAM, [])
    assert fold_uniform_branches(ADAM, {"n": 64}) == (ADAM, [])  # i >= n reads a thread index
    assigned = ADAM.replace("const int i =", "mode = MODE_1;\n  const int i =")
    assert fold_uniform_branches(assigned, {"mode": 0})[1] == []


def test_an_enum_argument_set_on_the_host_is_known_through_its_enumerator():
    from components.features.static.host_env import host_locals
    from components.features.static.loops import file_macros

    macros = file_macros(ADAM, {})
    assert host_locals(ADAM + "\nmode_t mode = MODE_1;\n", macros)["mode"] == 1


def test_a_given_mode_counts_one_side_of_the_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from components.devices import load_catalog
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    spec = [load_catalog().resolve("RTX 3080")]

    def flops(args: dict) -> tuple[float, str]:
        launch = {"grid": [1], "block": [64], "args": {"n": 64, "steps": 3, **args}}
        (answer,) = predict_source(ADAM, "cuda", launch, "fp32", spec, None)
        return answer["gflops"] * answer["duration_us"] * 1e3, answer["note"]

    cheap, note = flops({"mode": 0})
    costly, _ = flops({"mode": 1})
    both, _ = flops({})
    assert "uniform branches on given arguments: mode == MODE_0 (taken)" in note
    assert cheap < costly <= both  # the mode-1 side holds the inner loop; unknown mode counts both
