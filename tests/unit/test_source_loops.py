"""Loop trip counts of CUDA sources from what the question makes known (constants, #define and
--define, template and scalar arguments, the launch): the tiled matmul fixture's work grows as N^3
whichever way N is given, and the answer never drops below the roofline of that work."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.features.static.loops import Known, evaluate, kernel_loops, kernel_parameters, pin_loops
from components.programs.errors import ProgramError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
MATMUL = (FIXTURES / "tiled_matmul.cu").read_text()
# The same kernel with N a macro (default 1024, overridden by --define N=...) instead of an argument.
MATMUL_DEFINE = (
    MATMUL.replace("#define TILE 16", "#define TILE 16\n#ifndef N\n#define N 1024\n#endif")
    .replace(", int N) {", ") {")
    .replace("matmul<<<grid, block>>>(a, b, c, n);", "matmul<<<grid, block>>>(a, b, c);")
)
TEMPLATED = """template <typename T, int BS, int ITER = 3>
__global__ void k(T* x, int n, long m) {
  int nt = (n + BS - 1) / BS;
  for (int i = threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    for (int j = 0; j < nt; j++)
      for (unsigned s = 1; s < BS; s <<= 1) x[i] += 1;
  }
  for (int s = BS / 2; s > 0; s >>= 1) { x[s] = 0; }
  int q = 0; while (q < ITER) { q++; }
  for (int r = 0; r < m; ++r) x[r] = 1;
}"""


def test_c_expressions_evaluate_with_c_integer_division() -> None:
    assert evaluate("(N + TILE - 1) / TILE", {"N": 1000, "TILE": 16}) == 63
    assert evaluate("-7 / 2", {}) == -3  # C truncates toward zero
    assert evaluate("min(n, 64u) * sizeof(float)", {"n": 100}) == 256
    assert evaluate("BS >> 1", {}, {"BS": "(2 * HALF)", "HALF": "128"}) == 128


def test_trip_counts_from_scalar_args_template_args_and_the_launch() -> None:
    loops = kernel_loops(TEMPLATED, "k", "k<float, 256>", Known({}, {"n": 1 << 20}, (64, 1, 1), (256, 1, 1)))
    assert loops is not None
    trips = [lp.trips for lp in loops]
    # grid-stride: 2^20 / (256 x 64); nt = 2^20 / 256; 1,2,..,128 (8 doublings below 256); 128..1 halving
    assert trips[:4] == [64.0, 4096.0, 8.0, 8.0]
    assert [lp.parent for lp in loops] == [-1, 0, 1, -1, -1, -1]
    assert trips[4] == 3.0  # a while loop stepping q once: its for loop, to ITER's default 3
    assert trips[5] is None and loops[5].unknown == ["m"]  # names the argument it lacks
    assert kernel_parameters(TEMPLATED, "k") == (["n", "m"], {"BS": "", "ITER": "3"})


def test_define_and_command_line_define() -> None:
    default = kernel_loops(MATMUL_DEFINE, "matmul", None, Known({}, {}, (64, 64, 1), (16, 16, 1)))
    given = kernel_loops(MATMUL_DEFINE, "matmul", None, Known({"N": "4096"}, {}, (64, 64, 1), (16, 16, 1)))
    assert default is not None and given is not None
    assert [lp.trips for lp in default] == [64.0, 16.0]  # #define N 1024 (the #ifndef default)
    assert [lp.trips for lp in given] == [256.0, 16.0]  # --define N=4096 wins


def test_pin_loops_marks_each_loop_once_and_drops_earlier_unroll_pragmas() -> None:
    pinned = pin_loops(MATMUL)
    assert pinned.count("#pragma unroll 1") == 2 and "#pragma unroll\n" not in pinned


nvrtc = pytest.importorskip  # the tests below compile with NVRTC (no GPU needed)


@pytest.fixture(scope="module")
def h100() -> object:
    nvrtc("cuda.bindings.nvrtc")
    from components.devices import load_catalog

    return load_catalog().resolve("H100")


def _ask(source: str, n: int, spec: object, **extra: object) -> dict:
    from components.programs.source_predict import predict_source

    launch = {"grid": [n // 16, n // 16], "block": [16, 16], **extra}
    (answer,) = predict_source(source, "cuda", launch, "fp32", [spec], None)
    return answer


@pytest.mark.parametrize(
    ("source", "how"),
    [
        (MATMUL, lambda n: {"args": {"N": n}}),
        (MATMUL_DEFINE, lambda n: {"defines": {"N": str(n)}}),
    ],
    ids=["arg", "define"],
)
def test_matmul_work_grows_as_n_cubed_and_stays_above_its_roofline(
    source: str, how: object, h100: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    small, large = (_ask(source, n, h100, **how(n)) for n in (1024, 4096))  # type: ignore[operator]
    flops = [a["gflops"] * a["duration_us"] * 1e3 for a in (small, large)]
    assert flops[1] == pytest.approx(2 * 4096**3, rel=1e-6)  # one FFMA per (i, j, k): 137 GFLOP
    assert flops[1] / flops[0] == pytest.approx(64.0, rel=1e-6)  # (4096 / 1024)^3
    fp32_floor_us = 2 * 4096**3 / (h100.peak_tflops.fp32 * 1e12) * 1e6  # type: ignore[attr-defined]
    assert large["duration_us"] >= large["roofline_us"] >= fp32_floor_us  # >= 2.05 ms on H100
    assert large["duration_us_lo"] >= fp32_floor_us
    assert "from the source" in large["note"] and "x256" in large["note"]


def test_unknown_bound_is_named_and_widens_the_interval(
    h100: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    unknown = _ask(MATMUL, 4096, h100)
    known = _ask(MATMUL, 4096, h100, args={"N": 4096})
    assert "unknown (N)" in unknown["note"] and "--arg" in unknown["note"]
    width = lambda a: a["duration_us_hi"] / a["duration_us_lo"]  # noqa: E731
    assert width(known) < width(unknown)


def test_an_argument_the_kernel_does_not_take_is_one_clear_error(
    h100: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    with pytest.raises(ProgramError, match=r"'M' is no scalar parameter.*\(N\)"):
        _ask(MATMUL, 1024, h100, args={"M": 3})
    with pytest.raises(ProgramError, match="not a number"):
        _ask(MATMUL, 1024, h100, args={"N": "big"})


HOST_PROGRAM = """#define BS 256
__global__ void scale(float* y, int n, int reps) {
  for (int r = 0; r < reps; r++)
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] *= 2.f;
}
int main(int argc, char** argv) {
  const int n = atoi(argv[1]);
  int reps = atoi(argv[2]) * 2;
  float* y; cudaMalloc(&y, n * sizeof(float));
  scale<<<(n + BS - 1) / BS, BS>>>(y, n, reps);
}
"""


def test_host_launch_site_arguments_from_recorded_command_line() -> None:
    from components.evaluation.gpuflopbench_flops import host_args

    assert host_args(HOST_PROGRAM, "scale", ["4096", "5"]) == {"n": 4096, "reps": 10}
    assert host_args(HOST_PROGRAM, "scale", []) == {}  # argv not recorded: nothing made known


def test_compiled_loops_split_by_the_compiler_take_their_depths_trips() -> None:
    from components.features.static.loops import SourceLoop
    from components.programs.source_loops import _trips_by_depth

    loops = [SourceLoop(0, 9, -1, "j", 1.0), SourceLoop(1, 8, 0, "t", 200.0)]
    unswitched = [{"parent": -1}, {"parent": 0}, {"parent": 0}]  # the inner loop duplicated
    assert _trips_by_depth(loops, unswitched) == [1.0, 200.0, 200.0]
    two_inner = [*loops, SourceLoop(2, 7, 0, "u", 3.0)]
    assert _trips_by_depth(two_inner, [{"parent": -1}, {"parent": 0}]) is None  # depth 1 disagrees


GUARDED = """__global__ void scale(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = 2.f * y[i] + 1.f;
}
"""
GUARDED_2D = """__global__ void fill(float* y, int w, int h) {
  const int idx = blockIdx.x*blockDim.x + threadIdx.x;
  const int idy = blockIdx.y*blockDim.y + threadIdx.y;
  if (idx < w && idy < h) {
    y[idy*w+idx] = 1.f;
  }
}
"""


def test_thread_index_guards_give_the_share_of_threads_that_work() -> None:
    from components.features.static.guards import thread_guard

    assert thread_guard(GUARDED, "scale", Known({}, {"n": 1000}, (8, 1, 1), (256, 1, 1))) == (
        1000 / 2048,
        "if (i >= n)",
    )
    assert thread_guard(GUARDED, "scale", Known({}, {}, (8, 1, 1), (256, 1, 1))) is None  # n not given
    share, _ = thread_guard(GUARDED_2D, "fill", Known({}, {"w": 100, "h": 10}, (8, 4, 1), (16, 16, 1)))
    assert share == pytest.approx((100 / 128) * (10 / 64))
    # lower bounds too, and an axis bounded on both sides (gpuFLOPBench frechet's 1-based indices)
    both = GUARDED_2D.replace("if (idx < w && idy < h)", "if (idy >= 1 && idy <= h && idx >= 1 && idx <= w)")
    share, _ = thread_guard(both, "fill", Known({}, {"w": 4, "h": 4}, (1, 1, 1), (16, 16, 1)))
    assert share == pytest.approx((4 / 16) * (4 / 16))


def test_guarded_threads_do_no_work(h100: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from components.programs.source_predict import predict_source

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))

    def flops(n: int) -> float:
        launch = {"grid": [4096], "block": [256], "args": {"n": n}}
        (answer,) = predict_source(GUARDED, "cuda", launch, "fp32", [h100], None)
        return answer["gflops"] * answer["duration_us"] * 1e3

    # one FMA per element: 2 FLOP for each of the n elements, whatever the launch's 1M threads
    assert flops(1000) == pytest.approx(2 * 1000)
    assert flops(1 << 20) == pytest.approx(2 * (1 << 20))
