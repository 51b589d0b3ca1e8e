"""The HIP runtime header precompiled once per sweep (static.hip_pch): the same assembler text as a plain
compile, for several tuning configurations of benchmark_hub's real HIP kernel; a source the header cannot
serve compiles as before. Real clang compiles (skipped without Debian's hipcc + rocm-device-libs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
CONV_HIP = DATASETS / "benchmark_hub" / "kernels" / "convolution_milo.cu.hip"
DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc")
pytestmark = pytest.mark.skipif(
    shutil.which("hipcc") is None or not DEVICE_LIBS.is_file() or not CONV_HIP.is_file(),
    reason="HIP compiler or benchmark_hub's HIP source absent",
)
CONFIGS = (
    {"block_size_x": "32", "block_size_y": "8", "filter_width": "15", "filter_height": "15"},
    {"block_size_x": "16", "block_size_y": "16", "filter_width": "17", "filter_height": "9"},
)


def _asm(defines: dict[str, str]) -> str:
    from components.features.static.hip import build_hip_options, compile_to_asm, hip_source_text
    from components.features.static.hip_table import kernel_tuner_source

    text, macros = kernel_tuner_source(CONV_HIP.read_text(), defines)
    options = build_hip_options("gfx1030", [CONV_HIP.parent], macros)
    return compile_to_asm(hip_source_text(text), "convolution_milo.cu.hip", options)


def test_the_precompiled_header_gives_the_plain_compiles_assembler_text() -> None:
    from components.features.static import hip_pch

    plain = [_asm(c) for c in CONFIGS]
    built: list[list[str]] = []
    real = hip_pch.pch_args

    def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(real(*args, **kwargs))
        return built[-1]

    hip_pch.pch_args = recorded
    try:
        with hip_pch.header_pch():
            precompiled = [_asm(c) for c in CONFIGS]
    finally:
        hip_pch.pch_args = real
    assert precompiled == plain and plain[0] != plain[1]
    # both compiles used one header built for their shared options (the -D macros aside)
    assert len(built) == 2 and built[0] and built[0] == built[1]


def test_a_source_without_the_runtime_header_first_compiles_plain() -> None:
    from components.features.static.hip_pch import header_pch, pch_args

    with header_pch():
        assert pch_args("clang++", ["-x", "hip"], "__global__ void k() {}\n", 60.0) == []
    assert pch_args("clang++", ["-x", "hip"], "#include <hip/hip_runtime.h>\n", 60.0) == []  # outside a sweep
