"""Compiler-made atomic retry loops (static.atomics): their rounds come from how many threads of a block
share the address, read from the source; a real NVRTC compile of a shared-memory double atomicAdd (no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.features.static.atomics import atomic_contention, cas_retries
from components.features.static.loops import Known

ATOMICS = """
__global__ void shared_sum(const double* a, double* out, int offset) {
  __shared__ double one;
  __shared__ double words[256];
  int tid = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&one, a[tid]);
  atomicAdd(words + threadIdx.x, a[tid]);
  atomicAdd(words + (tid & 0x1F), a[tid]);
  atomicAdd(&words[offset], a[tid]);
  if (threadIdx.x == 0) out[blockIdx.x] = one + words[0];
}
"""


def test_contention_follows_the_address() -> None:
    known = Known(block=(256, 1, 1), grid=(10, 1, 1))
    # one word for the block; one per thread; 32 words (256 / 32 = 8 per word); a uniform offset
    assert atomic_contention(ATOMICS, "shared_sum", known) == [256.0, 1.0, 8.0, 256.0]
    assert cas_retries([256.0, 1.0], 2) == [128.5, 1.0]
    assert cas_retries([256.0, 1.0], 3) == [64.75] * 3  # numbers disagree: the mean for every loop
    assert cas_retries([], 1) is None


def test_retry_loops_are_counted_by_contention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One shared word per block: the DADD of the retry loop runs (block + 1) / 2 times per thread, so the
    counted FLOPs grow with the block's threads (at a fixed thread count), not 8 runs whatever the block."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from components.devices import load_catalog
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    src = """
__global__ void block_sum(const double* a, double* out) {
  __shared__ double s;
  if (threadIdx.x == 0) s = 0;
  __syncthreads();
  atomicAdd(&s, a[blockIdx.x * blockDim.x + threadIdx.x]);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
"""
    spec = [load_catalog().resolve("RTX 3080")]

    def flops(block: int) -> tuple[float, str]:
        launch = {"grid": [65536 // block], "block": [block]}
        (answer,) = predict_source(src, "cuda", launch, "fp64", spec, None)
        return answer["gflops"] * answer["duration_us"] * 1e3, answer["note"]

    wide, note = flops(256)
    narrow, _ = flops(32)
    assert "atomic retry loops: 128.5 rounds per thread" in note
    # the add in the retry loop: 128.5 vs 16.5 rounds per thread over the same 65536 threads
    assert wide / narrow == pytest.approx(128.5 / 16.5, rel=0.05)
    assert 65536 * 128.5 <= wide <= 65536 * 128.5 * 1.1
