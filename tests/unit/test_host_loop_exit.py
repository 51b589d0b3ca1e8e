"""Host values a finished for loop leaves (gpuFLOPBench fwt's layout, written out here)."""

from __future__ import annotations

FWT = """
#define ELEMENTARY_LOG2SIZE 11
void fwtBatchGPU(float *d, int M, int log2N) {
  int N = 1 << log2N;
  for (; log2N > ELEMENTARY_LOG2SIZE; log2N -= 2, N >>= 2, M <<= 2) {
    batch2<<<N / 1024, 256>>>(d, N / 4);
  }
  batch1<<<M, N / 4>>>(d, log2N);
}
int main() { fwtBatchGPU(0, 1, 23); }
"""


def _env(text, launch):
    from components.features.static.host_env import env_at
    from components.features.static.loops import file_macros

    env = env_at(text, text.index(launch), file_macros(text, {}))
    return {k: v for k, v in env.items() if not k.startswith("__")}


def test_the_step_clause_runs_once_per_pass_before_a_launch_after_the_loop():
    assert _env(FWT, "batch1<<<") == {"d": 0, "log2N": 11, "N": 2048, "M": 4096}  # six passes
    # inside the loop the first pass is read, as before
    assert _env(FWT, "batch2<<<") == {"d": 0, "log2N": 23, "N": 1 << 23, "M": 1}


def test_counting_up_with_inclusive_bounds_and_increments():
    text = "void h() { int i, s = 3; for (i = 0; i <= 9; i++, s += 2) { } k<<<1, 1>>>(i, s); }"
    assert _env(text, "k<<<") == {"i": 10, "s": 23}
    never = "void h() { int i = 5; for (; i < 2; ++i) { } k<<<1, 1>>>(i); }"
    assert _env(never, "k<<<") == {"i": 5}


def test_a_step_it_cannot_follow_makes_its_target_unknown():
    text = "void h() { int n = 4, m = 1; for (; n < 100; n *= 2, m++) { } k<<<1, 1>>>(n, m); }"
    assert _env(text, "k<<<") == {}
    skipped = "void h(int c) { int n = 4; if (c) { for (; n < 100; n += 2) { } } k<<<1, 1>>>(n); }"
    assert _env(skipped, "k<<<") == {"n": 4}  # the loop may not run: the reading keeps its first value
