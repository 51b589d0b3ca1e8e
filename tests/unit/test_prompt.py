"""Prompt builder: sections present, truncation keeps the kernel body, bad input gives clear errors."""

from __future__ import annotations

import pytest

from components.devices import load_catalog
from components.models.llm.prompt import (
    MAX_SOURCE_CHARS,
    PromptError,
    build_prompt,
    decode_source,
    extract_kernel_body,
)

KERNEL = """
__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[i] = a * x[i] + y[i]; }
}
"""
LAUNCH = {"grid_x": 4096, "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1}


class WordTokenizer:
    """Deterministic stand-in counting whitespace words (the real tokenizer is used in tests/model)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [0] * len(text.split())


@pytest.fixture(scope="module")
def h100():
    return load_catalog().get("h100-sxm")


def test_prompt_has_source_launch_and_device_specs(h100) -> None:
    prompt = build_prompt(KERNEL, None, LAUNCH, h100, "zero-shot", 2000, WordTokenizer(), kernel_name="saxpy")
    assert not prompt.truncated and prompt.note == ""
    for expected in (
        "saxpy",
        "grid (4096, 1, 1)",
        "block (256, 1, 1)",
        f"SMs: {h100.sms}",
        f"{h100.dram_gbps:g} GB/s",
        "Ridge points",
        "fp64",
        "Bandwidth or Compute",
    ):
        assert expected in prompt.text
    assert prompt.n_tokens <= 2000


def test_op_and_shapes_without_source(h100) -> None:
    prompt = build_prompt(
        None,
        {"op": "gemm", "M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"},
        None,
        h100,
        "zero-shot",
        500,
        WordTokenizer(),
        kernel_name="gemm",
    )
    assert '"M": 4096' in prompt.text and "Launch configuration: unknown" in prompt.text


def test_huge_source_is_cut_but_keeps_the_kernel_body(h100) -> None:
    filler = "".join(f"static int helper_{i}(int v) {{ return v * {i} + {i}; }}\n" for i in range(20000))
    source = filler + KERNEL + filler
    prompt = build_prompt(source, None, LAUNCH, h100, "fine-tune", 400, WordTokenizer(), kernel_name="saxpy")
    assert prompt.truncated
    assert "y[i] = a * x[i] + y[i]" in prompt.text  # the whole __global__ body survived
    assert "kernel body kept whole" in prompt.note and "[cut:" in prompt.text
    assert prompt.n_tokens <= 400


def test_kernel_body_longer_than_budget_is_cut_and_says_so(h100) -> None:
    body = "__global__ void big(float *x) {\n" + "".join(f"  x[{i}] += {i};\n" for i in range(3000)) + "}\n"
    prompt = build_prompt(body, None, None, h100, "zero-shot", 300, WordTokenizer(), kernel_name="big")
    assert prompt.truncated and "kernel body cut" in prompt.note and prompt.n_tokens <= 300


def test_empty_source_names_the_kernel(h100) -> None:
    with pytest.raises(PromptError, match=r"'empty_kernel'.*empty"):
        build_prompt(
            "   \n", None, LAUNCH, h100, "zero-shot", 500, WordTokenizer(), kernel_name="empty_kernel"
        )
    with pytest.raises(PromptError, match="neither source nor op"):
        build_prompt(None, None, LAUNCH, h100, "zero-shot", 500, WordTokenizer(), kernel_name="k")


def test_absurdly_large_source_is_refused(h100) -> None:
    with pytest.raises(PromptError, match=r"'giant'.*limit"):
        build_prompt(
            "x" * (MAX_SOURCE_CHARS + 1),
            None,
            None,
            h100,
            "zero-shot",
            500,
            WordTokenizer(),
            kernel_name="giant",
        )


def test_non_utf8_source_is_decoded_with_a_note(h100) -> None:
    raw = KERNEL.encode() + b"// author: Jos\xe9 \xff\n"
    prompt = build_prompt(raw, None, LAUNCH, h100, "zero-shot", 2000, WordTokenizer(), kernel_name="saxpy")
    assert "non-UTF-8" in prompt.note and "Note:" in prompt.text and "saxpy" in prompt.text
    with pytest.raises(PromptError, match=r"'saxpy'.*not UTF-8"):
        decode_source(raw, "saxpy", strict=True)


def test_profiled_scenario_requires_and_shows_metrics(h100) -> None:
    with pytest.raises(PromptError, match="profile_metrics"):
        build_prompt(KERNEL, None, None, h100, "profiled", 500, WordTokenizer(), kernel_name="saxpy")
    prompt = build_prompt(
        KERNEL,
        None,
        None,
        h100,
        "profiled",
        800,
        WordTokenizer(),
        kernel_name="saxpy",
        profile_metrics={"fp32_arith_intensity": 0.0833, "achieved_gbps": 2900.0},
    )
    assert "FP32 arithmetic intensity (FLOP/B): 0.0833" in prompt.text


def test_tight_budget_uses_compact_device_line_and_rejects_impossible_budget(h100) -> None:
    prompt = build_prompt(
        KERNEL, None, LAUNCH, h100, "fine-tune", 90, WordTokenizer(), kernel_name="saxpy", question=False
    )
    assert "Peak TFLOP/s" not in prompt.text and "ridge FLOP/B" in prompt.text
    with pytest.raises(PromptError, match="max_tokens=5"):
        build_prompt(KERNEL, None, LAUNCH, h100, "fine-tune", 5, WordTokenizer(), kernel_name="saxpy")


def test_extract_kernel_body_picks_the_named_kernel_and_omp_regions() -> None:
    two = KERNEL + "\n__global__ void other(float *z) { z[0] = 1.f; }\n"
    assert "z[0] = 1.f" in extract_kernel_body(two, "other")
    assert "saxpy" in extract_kernel_body(two, "saxpy") and "z[0]" not in extract_kernel_body(two, "saxpy")
    omp = (
        "int main() {\n#pragma omp target teams distribute parallel for\n"
        "for (int i=0;i<n;i++) { y[i] += x[i]; }\n}\n"
    )
    assert "y[i] += x[i]" in extract_kernel_body(omp)
    assert extract_kernel_body("int f() { return 1; }") is None


def test_kernel_names_that_end_in_a_namespace_fall_back_to_the_op() -> None:
    import pandas as pd

    from components.models.llm.model import _short_kernel_name

    assert _short_kernel_name(pd.Series({"name": "void ns::foo<float>(int, float*)"})) == "foo"
    assert (
        _short_kernel_name(pd.Series({"name": "void at::native::(anonymous namespace)::k()", "op": "relu"}))
        == "relu"
    )
    assert _short_kernel_name(pd.Series({"name": "", "op": None})) is None


def test_library_kernel_names_lose_their_argument_list_only() -> None:
    from components.models.llm.model import without_arguments

    assert (
        without_arguments("void implicit_convolve_sgemm<float, 128, 5>(int, float const*, bool)")
        == "void implicit_convolve_sgemm<float, 128, 5>"
    )
    assert (
        without_arguments("void (anonymous namespace)::softmax_warp_forward<float, 8>(float*, int)")
        == "void (anonymous namespace)::softmax_warp_forward<float, 8>"
    )
    assert without_arguments("ampere_sgemm_64x32_sliced1x4_tn") == "ampere_sgemm_64x32_sliced1x4_tn"
    assert without_arguments("(int)") == "(int)"  # nothing but arguments: kept as is
