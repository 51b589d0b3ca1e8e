"""Many cubins through one nvdisasm process (static.elf_batch) give each cubin the functions its own
nvdisasm call gives, byte for byte; and the static sweep's two passes (static.prefetch) give the reports a
single pass gives. Real NVRTC compiles and real nvdisasm runs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

# Kernels that exercise what the merge renumbers or renames: the division's local slow-path helper (the same
# local symbol in every cubin that divides), device globals (.nv.global, .nv.global.init and the address
# bank .nv.constant4 in several cubins), a non-inlined device function (a call relocation), a loop, and
# the same kernel name in two cubins (never in one batch).
SOURCES = {
    "divide.cu": """
__global__ void divide(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int j = 0; j < n; ++j) a[i] = a[i] / b[j];
}""",
    "globals.cu": """
__device__ int counter;
__device__ float table[4] = {1.f, 2.f, 3.f, 4.f};
__global__ void bump(float* a, float d) {
  atomicAdd(&counter, 1);
  a[threadIdx.x] = table[threadIdx.x & 3] / d;
}
""",
    "globals2.cu": """
__device__ int hits[32];
__global__ void count(const int* x) { atomicAdd(&hits[x[threadIdx.x] & 31], 1); }
""",
    "call.cu": """
__device__ __noinline__ float helper(float x) { return x * x + 1.0f; }
__global__ void apply(float* a) { a[threadIdx.x] = helper(a[threadIdx.x]) / 3.0f; }
""",
    "same_name.cu": """
__global__ void divide(float* a, const float* b, int n) { a[threadIdx.x] = b[n] * 0.5f; }
""",
}


def _cubins() -> list[bytes]:
    from components.features.static.compile import build_options, compile_to_cubin, cuda_include_dirs

    options = build_options("sm_90", cuda_include_dirs())
    return [compile_to_cubin(text, name, options).cubin for name, text in SOURCES.items()]


def test_batched_disassembly_equals_one_call_per_cubin() -> None:
    from components.features.static.compile import nvdisasm_path
    from components.features.static.elf_batch import disassemble_many, parse_cubin, plan_batches
    from components.features.static.sass import run_nvdisasm

    cubins = _cubins()
    batches = plan_batches([parse_cubin(c) for c in cubins])
    # the two kernels named divide never share a batch; the rest do: fewer nvdisasm calls than cubins
    assert len(batches) == 2, batches
    assert not any({0, 4} <= set(b) for b in batches)
    single = [run_nvdisasm(c, nvdisasm_path()) for c in cubins]
    assert all(single)
    assert disassemble_many(cubins, nvdisasm_path()) == single
    # the repeated local slow-path helper was renamed in the ELF and restored in the operands
    calls = [i["operands"] for i in single[0][0]["sass-instructions"] if i["opcode"].startswith("CALL")]
    assert calls and all("slowpath" in c and "__kcbatch" not in c for c in calls)


def test_the_two_pass_sweep_reports_what_a_single_pass_reports(tmp_path: Path, monkeypatch) -> None:
    from components.features.static import analyze, prefetch

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    program = tmp_path / "program-cuda"
    program.mkdir()
    for name, text in SOURCES.items():
        (program / name).write_text(text)

    def sweep(cache: str) -> list[object]:
        # as the static stage's sweep: every file of a program folder, failures as results
        return [
            r.to_dict() | {"compile_seconds": 0} if isinstance(r, analyze.StaticReport) else str(r)
            for r in analyze.analyze_program(program, "sm_90", cache_dir=tmp_path / cache)
        ]

    from components.features.static import elf_batch

    batched: list[int] = []
    real = elf_batch.disassemble_many

    def counted(cubins, *args, **kwargs):  # type: ignore[no-untyped-def]
        batched.append(len(cubins))
        return real(cubins, *args, **kwargs)

    monkeypatch.setattr(elf_batch, "disassemble_many", counted)
    two = prefetch.two_passes(lambda: sweep("two"))
    assert batched == [len(SOURCES)]  # every cubin disassembled in the batch, between the passes
    one = sweep("one")
    assert two == one and all(isinstance(r, dict) for r in one)

    # the second pass cached what the single pass cached (the first pass nothing)
    def cached(cache: str) -> list[str]:
        return sorted(p.name for p in (tmp_path / cache).iterdir())

    assert cached("two") == cached("one") and len(cached("one")) == len(SOURCES)
