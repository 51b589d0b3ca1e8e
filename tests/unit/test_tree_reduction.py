"""Tree reductions (``if (tid < s)`` in a loop where ``s`` halves): the guarded work counted for the
threads that pass it at each step, (B - 1) / B of one pass per thread, not log2(B) passes."""

from __future__ import annotations

from pathlib import Path

import pytest

REDUCE = """
__global__ void reduce(const float* in, float* out, int n) {
  extern __shared__ float cache[];
  const int tid = threadIdx.x;
  cache[tid] = in[blockIdx.x * blockDim.x + tid];
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      cache[tid] += cache[tid + s];
    }
    // wait for the step
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = cache[0];
}
"""


def _loops(source: str, block: int):
    from components.features.static.loops import Known, kernel_loops
    from components.features.static.reduction import tree_reductions

    known = Known({}, {}, (4, 1, 1), (block, 1, 1))
    loops = kernel_loops(source, "reduce", None, known)
    tree_reductions(source, "reduce", loops, known)
    return loops


def test_a_halving_guarded_loop_runs_the_active_share_of_its_steps():
    (loop,) = _loops(REDUCE, 256)
    assert loop.trips == pytest.approx(255 / 256)  # 128 + 64 + ... + 1 of 256 threads
    assert "tree reduction: tid < s" in loop.header


def test_work_beside_the_guard_or_a_loop_that_does_not_halve_keeps_its_trips():
    beside = REDUCE.replace("// wait for the step", "cache[tid] *= 2.0f;")
    assert _loops(beside, 256)[0].trips == 8
    growing = REDUCE.replace("s = blockDim.x / 2; s > 0; s >>= 1", "s = 1; s < blockDim.x; s <<= 1")
    assert _loops(growing, 256)[0].trips == 8


def test_a_reduction_kernel_counts_one_add_per_element_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from components.devices import load_catalog
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    spec = [load_catalog().resolve("RTX 3080")]
    (answer,) = predict_source(REDUCE, "cuda", {"grid": [4], "block": [256]}, "fp32", spec, None)
    flops = answer["gflops"] * answer["duration_us"] * 1e3
    assert flops == pytest.approx(4 * 255, rel=0.02), answer["note"]  # 255 adds per block, not 256 * 8
