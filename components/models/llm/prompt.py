"""Prompt text for the LLM family: kernel source (or op + shapes), launch config, device specs.

One builder serves every scenario (profiled / zero-shot / few-shot / fine-tune): the scenarios
differ only in which optional sections are present. Source is cut to a token budget with the
kernel body (the ``__global__`` function, or the ``omp target`` region) kept and the cut stated in
the prompt itself, so a reader of the prompt (model or person) knows something is missing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from components.common.braces import closing_brace

if TYPE_CHECKING:
    from components.devices.catalog import DeviceSpec

SCENARIOS: tuple[str, ...] = ("profiled", "zero-shot", "few-shot", "fine-tune")
ANSWERS: dict[str, str] = {"bandwidth": "Bandwidth", "compute": "Compute"}  # Bolet's answer words
# Sources beyond this are refused outright: tokenizing many MB only to cut it away is wasted time,
# and no real kernel file (gpuFLOPBench caps at 256 KB) comes near it.
MAX_SOURCE_CHARS = 4_000_000
# Characters per token is ~3-4 for code; pre-cut context to this many chars per budget token so
# tokenizing a huge file stays cheap, then cut exactly with the tokenizer.
_CHARS_PER_TOKEN_CEILING = 8


class PromptError(ValueError):
    """The kernel cannot be turned into a prompt; the message names the kernel and the reason."""


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


@dataclass(frozen=True)
class Prompt:
    text: str
    truncated: bool
    note: str  # what was cut or repaired ("" when nothing was)
    n_tokens: int


def decode_source(raw: bytes | str, kernel: str, strict: bool = False) -> tuple[str, str]:
    """Text of a source file and a note on repairs; non-UTF-8 bytes are replaced and counted.

    ``strict=True`` raises ``PromptError`` instead (naming the kernel and the byte offset).
    """
    if isinstance(raw, str):
        return raw, ""
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        if strict:
            raise PromptError(
                f"kernel {kernel!r}: source is not UTF-8 (byte {exc.start}: {exc.reason})"
            ) from exc
        text = raw.decode("utf-8", errors="replace")
        bad = text.count("\ufffd")
        return text, f"{bad} non-UTF-8 byte sequence(s) replaced with U+FFFD (first at byte {exc.start})"


def _matching_brace(text: str, open_index: int) -> int:
    """Index just past the brace closing the one at ``open_index`` (end of text if unbalanced)."""
    close = closing_brace(text, open_index)
    return len(text) if close is None else close + 1


_GLOBAL_RE = re.compile(r"__global__[^;{]*?\b(?P<name>[A-Za-z_]\w*)\s*(?:<[^<>;{]*>)?\s*\(", re.S)
_OMP_RE = re.compile(r"#\s*pragma\s+omp\s+target\b[^\n]*\n", re.S)


def extract_kernel_body(source: str, kernel_name: str | None = None) -> str | None:
    """The ``__global__`` function named ``kernel_name`` (else the first one), or the first
    ``#pragma omp target`` region for OpenMP offload programs; None when there is neither."""
    matches = list(_GLOBAL_RE.finditer(source))
    if matches:
        chosen = next((m for m in matches if kernel_name and m.group("name") == kernel_name), matches[0])
        brace = source.find("{", chosen.end())
        if brace != -1:
            # Keep a preceding template<...> line: it says what the kernel is instantiated with.
            line_start = source.rfind("\n", 0, chosen.start()) + 1
            prev_start = source.rfind("\n", 0, max(line_start - 1, 0)) + 1
            start = (
                prev_start if source[prev_start:line_start].lstrip().startswith("template") else line_start
            )
            return source[start : _matching_brace(source, brace)]
    omp = _OMP_RE.search(source)
    if omp:
        brace = source.find("{", omp.end())
        # A target region is the pragma plus the next statement/block; cap a runaway block at 200 lines.
        end = _matching_brace(source, brace) if brace != -1 else source.find("\n", omp.end())
        return source[omp.start() : end if end != -1 else len(source)]
    return None


def _fmt(value: float | None, unit: str = "", digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}g}{unit}"


def device_section(device: DeviceSpec) -> str:
    """Catalog specs a roofline judgement needs: SMs, clocks, peaks per precision, DRAM, ridges."""
    lines = [
        f"GPU: {device.name} ({device.architecture}, compute capability {device.compute_capability})",
        f"SMs: {device.sms}; FP32 lanes/SM: {device.fp32_lanes_per_sm}; "
        f"boost clock {device.boost_clock_mhz:g} MHz"
        + (f"; base clock {device.base_clock_mhz:g} MHz" if device.base_clock_mhz else ""),
        f"DRAM: {device.memory_gb:g} GB {device.memory_type}, {device.dram_gbps:g} GB/s; "
        f"L2 {device.l2_mb:g} MB",
    ]
    peaks = []
    for precision in ("fp64", "fp32", "fp16", "bf16"):
        if device.has_pipe(precision, tensor=False):
            peaks.append(f"{precision} {device.peak_flops(precision, tensor=False) / 1e12:.3g}")
    for precision in ("fp16", "bf16", "tf32", "fp8"):
        if device.has_pipe(precision, tensor=True):
            peaks.append(f"{precision}-tensor {device.peak_flops(precision, tensor=True) / 1e12:.3g}")
    lines.append("Peak TFLOP/s (boost, FMA=2): " + ", ".join(peaks))
    ridges = []
    # Bolet et al. put the balance points at the base clock; give both so either reading works.
    base_scale = (device.base_clock_mhz / device.boost_clock_mhz) if device.base_clock_mhz else None
    for precision in ("fp64", "fp32"):
        if device.has_pipe(precision, tensor=False):
            ridge = device.ridge_point(precision, tensor=False)
            text = f"{precision} {ridge:.4g}"
            if base_scale:
                text += f" (base clock {ridge * base_scale:.4g})"
            ridges.append(text)
    lines.append("Ridge points, FLOP/byte: " + ", ".join(ridges))
    return "\n".join(lines)


def compact_device_section(device: DeviceSpec) -> str:
    """One-line device summary for tight token budgets (same facts a roofline needs)."""
    ridges = ", ".join(
        f"{p} {device.ridge_point(p, tensor=False):.3g}"
        for p in ("fp64", "fp32")
        if device.has_pipe(p, tensor=False)
    )
    return (
        f"GPU: {device.name}; {device.sms} SMs; {device.dram_gbps:g} GB/s; "
        f"fp32 {device.peak_flops('fp32', tensor=False) / 1e12:.3g} TFLOP/s; ridge FLOP/B {ridges}"
    )


def launch_section(launch: Mapping[str, Any] | None) -> str:
    if not launch:
        return "Launch configuration: unknown"
    grid = tuple(launch.get(f"grid_{a}") for a in "xyz")
    block = tuple(launch.get(f"block_{a}") for a in "xyz")
    parts = []
    if any(v is not None for v in grid):
        parts.append(f"grid ({', '.join(str(v) if v is not None else '?' for v in grid)})")
    if any(v is not None for v in block):
        parts.append(f"block ({', '.join(str(v) if v is not None else '?' for v in block)})")
    extra = {k: v for k, v in launch.items() if not re.fullmatch(r"(grid|block)_[xyz]", k) and v is not None}
    if extra:
        parts.append("params " + json.dumps(extra, sort_keys=True, default=str))
    return "Launch configuration: " + ("; ".join(parts) if parts else "unknown")


def op_section(op: Mapping[str, Any]) -> str:
    return "Operation: " + json.dumps(dict(op), sort_keys=True, default=str)


def profile_section(metrics: Mapping[str, float | None]) -> str:
    """Measured counters (scenario 'profiled'): with these the class follows from the ridges."""
    labels = {
        "fp32_arith_intensity": "FP32 arithmetic intensity (FLOP/B)",
        "fp64_arith_intensity": "FP64 arithmetic intensity (FLOP/B)",
        "int_arith_intensity": "integer intensity (intop/B)",
        "fp32_gflops": "achieved FP32 GFLOP/s",
        "fp64_gflops": "achieved FP64 GFLOP/s",
        "int_gops": "achieved integer Gop/s",
        "achieved_gbps": "achieved DRAM GB/s",
        "duration_us": "duration (us)",
    }
    lines = [f"- {labels.get(k, k)}: {_fmt(v)}" for k, v in metrics.items()]
    return "Profiling metrics (Nsight Compute):\n" + "\n".join(lines)


QUESTION = (
    "Question: is this kernel bandwidth-bound or compute-bound on this GPU "
    "(roofline model, using the ridge points above)? Answer with one word: Bandwidth or Compute."
)


def _count(tokenizer: Tokenizer | None, text: str) -> int:
    if tokenizer is None:
        return math.ceil(len(text) / 4)  # rough code-token estimate when no tokenizer is given
    return len(tokenizer.encode(text, add_special_tokens=False))


def _cut_to_tokens(tokenizer: Tokenizer | None, text: str, budget: int) -> str:
    """Longest prefix of ``text`` (whole lines) that fits ``budget`` tokens."""
    if budget <= 0:
        return ""
    text = text[: budget * _CHARS_PER_TOKEN_CEILING]
    lines = text.splitlines(keepends=True)
    lo, hi = 0, len(lines)
    while lo < hi:  # binary search on the number of lines kept
        mid = (lo + hi + 1) // 2
        if _count(tokenizer, "".join(lines[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return "".join(lines[:lo])


def _source_block(
    source: str, kernel_name: str | None, budget: int, tokenizer: Tokenizer | None
) -> tuple[str, bool, str]:
    """Kernel body first, then as much of the rest of the program as fits; (text, truncated, note)."""
    body = extract_kernel_body(source, kernel_name)
    if body is None:
        if _count(tokenizer, source[: budget * _CHARS_PER_TOKEN_CEILING + 1]) <= budget:
            return source, False, ""
        kept = _cut_to_tokens(tokenizer, source, budget - 16)
        total = source.count("\n") + 1
        note = f"no kernel body found; kept the first {kept.count(chr(10))} of {total} source lines"
        return kept + f"\n// [cut: {note}]\n", True, note
    rest = source.replace(body, "", 1)
    body_text = "// kernel body\n" + body.strip() + "\n"
    body_tokens = _count(tokenizer, body_text)
    if body_tokens > budget:
        kept = _cut_to_tokens(tokenizer, body_text, budget - 24)
        note = (
            f"kernel body cut: kept {kept.count(chr(10))} of {body_text.count(chr(10))} lines; "
            f"program context ({rest.count(chr(10)) + 1} lines) omitted"
        )
        return kept + f"\n// [cut: {note}]\n", True, note
    rest_budget = budget - body_tokens - 32
    if not rest.strip():
        return body_text, False, ""
    rest_text = "// program context\n" + rest.strip() + "\n"
    if _count(tokenizer, rest_text[: max(rest_budget, 0) * _CHARS_PER_TOKEN_CEILING + 1]) <= rest_budget:
        return body_text + rest_text, False, ""
    kept = _cut_to_tokens(tokenizer, rest_text, rest_budget)
    note = (
        f"kernel body kept whole; program context cut to {kept.count(chr(10))} of "
        f"{rest_text.count(chr(10))} lines"
    )
    return body_text + kept + f"// [cut: {note}]\n", True, note


def build_prompt(
    kernel_source: str | bytes | None,
    op_shapes: Mapping[str, Any] | None,
    launch: Mapping[str, Any] | None,
    device: DeviceSpec,
    scenario: str,
    max_tokens: int,
    tokenizer: Tokenizer | None,
    *,
    kernel_name: str | None = None,
    profile_metrics: Mapping[str, float | None] | None = None,
    question: bool = True,
) -> Prompt:
    """Prompt for one kernel on one device; the whole text fits ``max_tokens`` (tokenizer count).

    Either ``kernel_source`` or ``op_shapes`` is required. ``scenario='profiled'`` requires
    ``profile_metrics``. Errors name ``kernel_name``.
    """
    name = kernel_name or "<unnamed kernel>"
    if scenario not in SCENARIOS:
        raise PromptError(
            f"kernel {name!r}: unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}"
        )
    if scenario == "profiled" and not profile_metrics:
        raise PromptError(f"kernel {name!r}: scenario 'profiled' needs profile_metrics")
    notes: list[str] = []
    source: str | None = None
    if kernel_source is not None:
        source, repair = decode_source(kernel_source, name)
        if repair:
            notes.append(repair)
        if len(source) > MAX_SOURCE_CHARS:
            raise PromptError(
                f"kernel {name!r}: source is {len(source):,} chars, over the "
                f"{MAX_SOURCE_CHARS:,}-char limit; pass the kernel's own file"
            )
        if not source.strip():
            if not op_shapes:
                raise PromptError(f"kernel {name!r}: source is empty and no op/shapes were given")
            source = None
    elif not op_shapes:
        raise PromptError(f"kernel {name!r}: neither source nor op/shapes given")

    tail_text = ("\n" + QUESTION) if question else ""

    def header(device_text: str) -> str:
        # Shapes right after the name: a prompt cut at max_tokens loses launch details, not the op.
        head = [
            f"Kernel: {name}",
            *([op_section(op_shapes)] if op_shapes else []),
            device_text,
            launch_section(launch),
        ]
        if profile_metrics:
            head.append(profile_section(profile_metrics))
        if notes:
            head.append("Note: " + "; ".join(notes))
        return "\n".join(head) + "\n"

    head_text = header(device_section(device))
    fixed = _count(tokenizer, head_text + tail_text)
    if fixed > max_tokens // 2:  # a tight budget goes to the kernel, not to the spec sheet
        head_text = header(compact_device_section(device))
        fixed = _count(tokenizer, head_text + tail_text)
    if fixed >= max_tokens:
        raise PromptError(
            f"kernel {name!r}: max_tokens={max_tokens} leaves no room after the "
            f"{fixed}-token header; raise max_tokens"
        )
    truncated = False
    body = ""
    if source is not None:
        block, truncated, cut = _source_block(source, kernel_name, max_tokens - fixed - 8, tokenizer)
        if cut:
            notes.append(cut)
        body = "Source:\n" + block
    text = head_text + body + tail_text
    return Prompt(text=text, truncated=truncated, note="; ".join(notes), n_tokens=_count(tokenizer, text))
