"""predict_source on real CUDA (a HeCBench program from gpuFLOPBench): compiled in the sandboxed
NVRTC subprocess, never run; answers follow the shared answer schema; bad questions are ProgramErrors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from components.devices import load_catalog
from components.programs.errors import ProgramError
from components.programs.source_predict import predict_source

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
BABELSTREAM = DATASETS / "gpuflopbench" / "src" / "babelstream-cuda" / "main.cu"
ANSWER_KEYS = {
    "question",
    "device",
    "device_name",
    "kind",
    "duration_us",
    "duration_us_lo",
    "duration_us_hi",
    "achieved_gbps",
    "gflops",
    "l1_hit_rate",
    "l2_hit_rate",
    "arith_intensity",
    "roofline_class",
    "bound_pipe",
    "roofline_us",
    "headroom",
    "ood",
    "note",
    "model_version",
    "breakdown",
}


@pytest.fixture(scope="module")
def source() -> str:
    if not BABELSTREAM.is_file():
        pytest.skip(f"dataset not present: {BABELSTREAM}")
    return BABELSTREAM.read_text()


def test_real_program_one_kernel_on_two_gpus(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    catalog = load_catalog()
    specs = [catalog.resolve("H100"), catalog.resolve("V100")]
    launch = {"grid": [32768], "block": [1024], "kernel": "copy_kernel"}
    h100, v100 = predict_source(source, "cuda", launch, "fp32", specs, None)
    assert set(h100) == ANSWER_KEYS and h100["kind"] == "source" and h100["device"] == specs[0].id
    # A copy kernel (template, instantiated from its launch site) streams memory: DRAM-bound.
    assert h100["bound_pipe"] == "dram" and h100["roofline_class"] == "bandwidth"
    assert 0 < h100["duration_us"] < v100["duration_us"]  # H100 has 3.7x V100's bandwidth
    assert h100["duration_us_lo"] < h100["duration_us"] < h100["duration_us_hi"]
    assert "sm_75" in v100["note"]  # Volta compiled as the nearest arch NVRTC 13 emits
    (entry,) = json.loads(h100["breakdown"])
    assert entry["op"] == "copy_kernel<float>" and entry["bound"] == "dram"


def test_several_kernels_get_a_breakdown(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    (answer,) = predict_source(
        source, "cuda", {"grid": [1024], "block": [256]}, None, [load_catalog().resolve("H100")], None
    )
    ops = [entry["op"] for entry in json.loads(answer["breakdown"])]
    assert len(ops) >= 4 and "copy_kernel<float>" in ops and "kernels in the source" in answer["note"]


@pytest.mark.parametrize(
    ("source", "language", "launch", "match"),
    [
        ("__global__ void k(float* a) { a[0] = 1; }", "fortran", {"grid": [1], "block": [1]}, "language"),
        ("__global__ void k(float* a) { a[0] = 1; }", "cuda", {"grid": [1]}, "missing block"),
        ("__global__ void k(float* a) { a[0] = 1; }", "cuda", {"grid": [1], "block": [2048]}, "at most 1024"),
        (
            "__global__ void k(float* a) { a[0] = 1; }",
            "cuda",
            {"grid": [1], "block": [1], "kernel": "nope"},
            "nope",
        ),
        ("int helper(int x) { return x; }", "cuda", {"grid": [1], "block": [1]}, "no __global__"),
        (
            "__global__ void k(float* a) { a[0] = ; }",
            "cuda",
            {"grid": [1], "block": [1]},
            "compilation failed",
        ),
    ],
)
def test_bad_questions_are_program_errors(
    source: str, language: str, launch: dict, match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    with pytest.raises(ProgramError, match=match):
        predict_source(source, language, launch, None, [load_catalog().resolve("H100")], None)


SAXPY = (
    'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {\n'
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];\n}\n"
)
GRID_STRIDE = (
    'extern "C" __global__ void scale(int n, float a, float* y) {\n'
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
    "        y[i] = a * y[i];\n}\n"
)


def test_a_kernel_without_a_loop_gets_no_loop_note_and_no_interval_below_its_roofline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: saxpy --launch 65536/256 answered 6.86-54,886 us, noting loop bodies on a
    loop-free kernel."""
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    (answer,) = predict_source(
        SAXPY, "cuda", {"grid": [65536], "block": [256]}, "fp32", [load_catalog().resolve("H100")], None
    )
    assert "loop bodies assumed" not in answer["note"], answer["note"]
    assert "no loops" in answer["note"]
    assert answer["duration_us_lo"] >= answer["roofline_us"] > 0  # never below the roofline time
    (looped,) = predict_source(
        GRID_STRIDE, "cuda", {"grid": [1024], "block": [256]}, "fp32", [load_catalog().resolve("H100")], None
    )
    # its bound n is a kernel argument not given: the note names it and the assumed trip count
    assert "scale: for (" in looped["note"] and "unknown (n)" in looped["note"], looped["note"]
    assert "assumed 8" in looped["note"] and "--arg" in looped["note"]


TAIL = """
__global__ void tail(const int n, const double* a, double* out) {
  const int lane = threadIdx.x;
  if (lane == 0) {
    out[blockIdx.x] = a[blockIdx.x] * 3.0 + a[blockIdx.x + 1] * 5.0;
  }
}
"""


def test_a_branch_one_thread_per_block_takes_is_counted_for_that_thread_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpuFLOPBench's damage: the thread-0 tail of a block was counted for all 256 threads (596x)."""
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    spec = [load_catalog().resolve("RTX 3080")]

    def flops(block: int) -> tuple[float, str]:
        (answer,) = predict_source(TAIL, "cuda", {"grid": [1000], "block": [block]}, "fp64", spec, None)
        return answer["gflops"] * answer["duration_us"] * 1e3, answer["note"]

    wide, note = flops(256)
    narrow, _ = flops(32)
    # one FMA-pair per block (a mul and an FMA: 3 FLOPs) whatever the block size, not per thread
    assert wide == pytest.approx(narrow, rel=1e-6) and 0 < wide <= 1000 * 4
    assert "branches under lane == 0: counted for 0.39% of the threads" in note
