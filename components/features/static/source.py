"""Turn a whole CUDA program file (host + device code) into device-only source NVRTC accepts.

NVRTC rejects host functions ("host functions are not allowed in JIT mode") and ships no C/C++
standard library headers, while HeCBench-style programs mix ``main``, ``cudaMalloc``, ``<vector>``
and kernels in one file. Compiling the whole file therefore fails on nearly every program, so we
*extract*: inline the program's own headers, drop system includes NVRTC cannot open (a small
prelude stands in for the few C facilities kernels use: fixed-width ints, limits, ``assert``),
keep ``__global__``/``__device__`` functions, types, constants and the unannotated helpers they
reference (compiled with ``-default-device``), and drop every other function (``main`` included).
Template kernels only produce code when instantiated, which used to happen at launch sites in
host code, so launch sites ``k<T, 256><<<...>>>`` are harvested as NVRTC name expressions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from components.common.braces import closing_brace

# System headers that NVRTC can compile when the CUDA wheels' headers are on the include path.
DEVICE_HEADER_PATTERNS: tuple[str, ...] = (
    r"cuda_fp16\.h(pp)?",
    r"cuda_bf16\.h(pp)?",
    r"cuda_fp8\.h(pp)?",
    r"mma\.h",
    r"cooperative_groups(\.h|/.*)",
    r"cuda/.*",
    r"cub/.*",
    r"cuda_pipeline.*\.h",
    r"cuda_awbarrier.*\.h",
    r"math_constants\.h",
    r"cuComplex\.h",
    r"sm_\d+_intrinsics\.h",
    r"curand_kernel\.h",
    r"curand_mtgp32_kernel\.h",
)
_DEVICE_HEADER_RE = re.compile("^(" + "|".join(DEVICE_HEADER_PATTERNS) + ")$")
# Umbrella headers NVRTC refuses (cub.cuh: "#error ... not supported when compiling with NVRTC") -> the
# device-side headers they gather, which NVRTC compiles (kernels use the block- and warp-level parts).
UMBRELLA_HEADERS: dict[str, tuple[str, ...]] = {
    "cub/cub.cuh": tuple(
        f"cub/{h}.cuh"
        for h in (
            "block/block_reduce",
            "block/block_scan",
            "block/block_load",
            "block/block_store",
            "block/block_radix_sort",
            "warp/warp_reduce",
            "warp/warp_scan",
        )
    ),
}

# Stand-in for the C headers kernels lean on. Guarded so a later real definition still wins.
# std::numeric_limits in device code: <limits> is a host header NVRTC lacks; libcu++ has the same template.
LIMITS_SHIM = "#include <cuda/std/limits>\nnamespace std { using cuda::std::numeric_limits; }\n"
# The warp shuffles without a mask (removed in CUDA 9 for Volta and later; NVRTC no longer declares them),
# as their full-warp _sync forms: what programs written for them (bm3d's __shfl_down) mean.
LEGACY_SHUFFLE_SHIM = "".join(
    f"#ifndef {n}\n#define {n}(v, ...) {n}_sync(0xffffffffu, v, __VA_ARGS__)\n#endif\n"
    for n in ("__shfl", "__shfl_up", "__shfl_down", "__shfl_xor")
)
_LEGACY_SHUFFLE_RE = re.compile(r"\b__shfl(?:_up|_down|_xor)?\s*\(")
# a program's own overload (dpid: float4 __shfl_down(const float4 var, ...)): then no shim
_OWN_SHUFFLE_RE = re.compile(r"\b(?!return\b)[A-Za-z_]\w*[\s*&]+__shfl(?:_up|_down|_xor)?\s*\(")


def _legacy_shuffles(device: str) -> bool:
    """The device code calls the mask-less shuffles and defines none of its own."""
    return bool(_LEGACY_SHUFFLE_RE.search(device)) and not _OWN_SHUFFLE_RE.search(device)


# std::uint8_t and friends (<cstdint>, a host header NVRTC lacks): the prelude's typedefs in namespace std.
STD_INT_SHIM = (
    "namespace std { "
    + " ".join(f"using ::{t};" for t in ("int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t"))
    + " using ::int64_t; using ::uint64_t; }\n"
)
_STD_INT_RE = re.compile(r"\bstd\s*::\s*u?int(?:8|16|32|64)_t\b")
# `register T s = ...;`: a storage class C++17 (NVRTC's dialect) refuses; nvcc only warns. It means nothing
# to the device compiler, so it is defined away (a keyword: no identifier can share the name).
REGISTER_SHIM = "#define register\n"
_REGISTER_RE = re.compile(r"\bregister\s+[A-Za-z_]")
PRELUDE = r"""
/* kernelcast static-analysis prelude: replaces host-only system headers */
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef long long int64_t; typedef unsigned long long uint64_t;
typedef unsigned int uint; typedef unsigned char uchar;
typedef unsigned short ushort; typedef unsigned long ulong;
typedef long long intptr_t; typedef unsigned long long uintptr_t; /* as cuda/std/cstdint */
#ifndef INT_MAX
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define UCHAR_MAX 255
#define SHRT_MAX 32767
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-INT_MAX - 1)
#define UINT_MAX 4294967295U
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-LONG_MAX - 1L)
#define ULONG_MAX 18446744073709551615UL
#define LLONG_MAX 9223372036854775807LL
#define LLONG_MIN (-LLONG_MAX - 1LL)
#define ULLONG_MAX 18446744073709551615ULL
#define INT32_MAX INT_MAX
#define INT32_MIN INT_MIN
#define UINT32_MAX UINT_MAX
#define INT64_MAX LLONG_MAX
#define UINT64_MAX ULLONG_MAX
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F
#define DBL_MAX 1.7976931348623158e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-016
#endif
#ifndef M_PI
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_SQRT2 1.41421356237309504880
#define M_E 2.7182818284590452354
#define M_LN2 0.69314718055994530942
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define HUGE_VALF INFINITY
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000LL)
#endif
#ifndef RAND_MAX
#define RAND_MAX 2147483647
#endif
#ifndef NULL
#define NULL 0
#endif
#ifndef assert
#define assert(e) ((void)0)
#endif
namespace std {
template <class T> __device__ constexpr const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <class T> __device__ constexpr const T& max(const T& a, const T& b) { return a < b ? b : a; }
template <class T> __device__ void swap(T& a, T& b) { T t = a; a = b; b = t; }
using ::sqrt; using ::exp; using ::log; using ::fabs; using ::pow; using ::floor; using ::ceil;
using ::sin; using ::cos; using ::tan; using ::tanh; using ::fmin; using ::fmax; using ::abs;
using ::erf; using ::log2; using ::exp2; using ::round; using ::isnan; using ::isinf; using ::fma;
}
"""

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
_LAUNCH_RE = re.compile(r"\b([A-Za-z_]\w*)\s*<((?:[^<>;{}]|<[^<>;{}]*>)*)>\s*<<<")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")
# Marks of host-only code: kernel launches, runtime API calls, the C++ standard library, stdio.
_HOST_ONLY = re.compile(
    r"<<<|\bstd\s*::|\bcuda[A-Z]\w*\s*\("
    r"|\b(?:malloc|free|fopen|fprintf|printf_s|exit|s?rand|strlen|sprintf|atoi|atof|strcmp|strcpy"
    r"|strncpy|perror|gettimeofday|memcpy|memset)\s*\("
)
# typedef ... NAME;  /  using NAME = ...;  (not a typedef of a function pointer, whose name is in parentheses)
_TYPEDEF_RE = re.compile(
    r"^\s*typedef\b[^;()]*?\b([A-Za-z_]\w*)\s*;\s*$|^\s*using\s+([A-Za-z_]\w*)\s*=[^;]*;\s*$"
)
# a host function prototype: a name, its parameters, ';' -- no __device__/__global__, no initialiser
_HOST_PROTOTYPE_RE = re.compile(
    r"^(?![^(]*__(?:device|global|host)__)[^=(;]*\b[A-Za-z_]\w*\s*\([^;]*\)\s*(?:const\s*)?;\s*$"
)
# a static or struct-typed global with a braced initialiser and no device storage class: device code cannot
# read it (a `const`/`constexpr` one it can, as a constant, so those stay; a plain `float4 g = {...}` the
# splitter may meet inside a body it did not take for a function is left alone)
_HOST_GLOBAL_RE = re.compile(
    r"^(?!.*\b(?:__device__|__constant__|__managed__|__shared__|const|constexpr|typedef|using|enum)\b)"
    r"(?=.*\b(?:static|struct)\b)[^(){}]*\b[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)*=\s*$",
    re.S,
)
_KEYWORDS_NOT_NAMES = {
    "if",
    "for",
    "while",
    "switch",
    "return",
    "sizeof",
    "decltype",
    "alignas",
    "__launch_bounds__",
    "__attribute__",
    "__declspec",
    "operator",
    "static_assert",
    "defined",
}


@dataclass
class PreparedSource:
    """Device-only source plus what extraction dropped and which template launches it found."""

    text: str
    name_expressions: list[str] = field(default_factory=list)
    dropped_functions: list[str] = field(default_factory=list)
    dropped_includes: list[str] = field(default_factory=list)
    missing_includes: list[str] = field(default_factory=list)
    default_defines: dict[str, str] = field(default_factory=dict)  # implied by #error guards (static.build)
    required_macros: list[str] = field(default_factory=list)  # #ifndef M / #error: only the user knows M


def is_device_header(name: str) -> bool:
    return bool(_DEVICE_HEADER_RE.match(name.strip()))


def inline_includes(
    text: str,
    base_dir: Path | None,
    include_dirs: tuple[Path, ...],
    prepared: PreparedSource,
    seen: set[Path] | None = None,
) -> str:
    """Inline quoted includes recursively (once per file) and drop host-only system includes.

    Headers are inlined rather than left to NVRTC so the host-code filter applies to them too.
    """
    seen = set() if seen is None else seen

    def replace(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2).strip()
        if kind == '"':
            for folder in ([base_dir] if base_dir else []) + list(include_dirs):
                candidate = (folder / name).resolve()
                if candidate.is_file():
                    if candidate in seen:
                        return f"/* kc: already inlined {name} */"
                    seen.add(candidate)
                    body = candidate.read_text(errors="replace")
                    inner = inline_includes(body, candidate.parent, include_dirs, prepared, seen)
                    return f"/* kc: begin {name} */\n{inner}\n/* kc: end {name} */"
            if name in UMBRELLA_HEADERS:
                return "\n".join(f"#include <{h}>" for h in UMBRELLA_HEADERS[name])
            if is_device_header(name):  # e.g. #include "cuda_fp16.h"
                return f"#include <{name}>"
            prepared.missing_includes.append(name)
            return f"/* kc: missing include {name} */"
        if name in UMBRELLA_HEADERS:
            return "\n".join(f"#include <{h}>" for h in UMBRELLA_HEADERS[name])
        if is_device_header(name):
            return match.group(0)
        prepared.dropped_includes.append(name)
        return f"/* kc: dropped <{name}> */"

    return _INCLUDE_RE.sub(replace, text)


def code_mask(text: str) -> bytearray:
    """1 for characters that are C++ code; 0 inside comments, string/char literals, directives."""
    n = len(text)
    mask = bytearray(b"\x01") * n
    i = 0
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":  # preprocessor directive, with backslash continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                if text.startswith("/*", j):  # a block comment may hide the line end
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                j += 1
            mask[i:j] = b"\x00" * (j - i)
            i = j
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            mask[i:j] = b"\x00" * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            mask[i:j] = b"\x00" * (j - i)
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # C++14 digit separator 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            mask[i:j] = b"\x00" * (j - i)
            i = j
        else:
            i += 1
    return mask


@dataclass
class _Segment:
    start: int
    end: int
    kind: str  # "decl", "func", "type", "open", "close", "raw"
    head: str = ""
    name: str = ""


def _matching_brace(text: str, mask: bytearray, open_pos: int) -> int:
    close = closing_brace(text, open_pos, mask)
    return len(text) - 1 if close is None else close


def _function_name(head: str) -> str:
    """Name of a function from its definition head (identifier before the outermost '(')."""
    depth = 0
    for k, ch in enumerate(head):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            names = [m for m in _IDENT_RE.findall(head[:k]) if m not in _KEYWORDS_NOT_NAMES]
            if names and "__launch_bounds__" not in head[k - 20 : k]:
                return names[-1]
    names = _IDENT_RE.findall(head.split("(")[0])
    return names[-1] if names else ""


def _code_only(text: str, mask: bytearray, start: int, end: int) -> str:
    return "".join(ch if mask[k] else " " for k, ch in enumerate(text[start:end], start))


def _split_top_level(text: str, mask: bytearray, start: int, end: int, out: list[_Segment]) -> None:
    """Split [start, end) into declarations, function definitions and types, recursing into
    namespaces and ``extern "C"`` blocks (they are transparent scopes)."""
    seg_start = start
    i = start
    paren = 0
    while i < end:
        if not mask[i]:
            i += 1
            continue
        ch = text[i]
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren = max(0, paren - 1)
        elif ch == ";" and paren == 0:
            out.append(_Segment(seg_start, i + 1, "decl", _code_only(text, mask, seg_start, i + 1)))
            seg_start = i + 1
        elif ch == "{" and paren == 0:
            head = _code_only(text, mask, seg_start, i)
            close = _matching_brace(text, mask, i)
            stripped = " ".join(head.split())
            if (
                re.match(r"^(inline\s+)?namespace\b[^=]*$", stripped)
                or re.match(r'^extern\s+"C"\s*$', stripped)
                # an extern "C" block: the head is the word alone once the "C" literal is masked (an
                # ``extern "C" void run(...) {`` is a host function, not a block: bm3d's launchers)
                or (stripped == "extern" and '"C' in text[seg_start:i])
            ):
                out.append(_Segment(seg_start, i + 1, "open", head))
                _split_top_level(text, mask, i + 1, close, out)
                out.append(_Segment(close, close + 1, "close"))
                i = close + 1
                seg_start = i
                continue
            is_func = (
                ")" in head
                and "=" not in head.split("(")[0]
                and not re.search(r"\b(class|struct|union|enum)\b[^()]*$", head)
            )
            if re.search(r"\)\s*:\s*[^:]", head) and not is_func:
                is_func = True  # constructor with initializer list
            if is_func:
                out.append(_Segment(seg_start, close + 1, "func", head, _function_name(head)))
                i = close + 1
                seg_start = i
                continue
            # type or braced initializer: runs to the next top-level ';'
            j = close + 1
            while j < end and not (mask[j] and text[j] == ";"):
                j += 1
            out.append(_Segment(seg_start, min(j + 1, end), "type", head))
            i = j + 1
            seg_start = i
            continue
        i += 1
    if seg_start < end:
        out.append(_Segment(seg_start, end, "raw"))


def _identifiers(text: str) -> set[str]:
    return set(_IDENT_RE.findall(text))


def extract_device_code(text: str, prepared: PreparedSource) -> str:
    """Keep device functions, types, declarations and the unannotated functions device code uses."""
    mask = code_mask(text)
    segments: list[_Segment] = []
    _split_top_level(text, mask, 0, len(text), segments)
    keep = [True] * len(segments)
    candidates: dict[int, str] = {}
    for idx, seg in enumerate(segments):
        head = seg.head
        if seg.kind == "func":
            if "__global__" in head or "__device__" in head:
                continue
            body = _code_only(text, mask, seg.start, seg.end)
            if (
                "__host__" in head
                or seg.name == "main"
                or "::" in head.split("(")[0]
                or _HOST_ONLY.search(body)
            ):
                keep[idx] = False  # host-only: launches kernels, calls the runtime API or the C++ library
            else:
                candidates[idx] = seg.name
                keep[idx] = False
        elif seg.kind == "type" and _HOST_ONLY.search(_code_only(text, mask, seg.start, seg.end)):
            type_name = re.search(r"\b(?:class|struct|union|enum)\s+(?:class\s+)?(\w+)", head)
            keep[idx] = False
            if type_name:
                candidates[idx] = type_name.group(1)
        elif seg.kind == "type" and _HOST_GLOBAL_RE.match(head):
            keep[idx] = False  # a host global, braced (getopt's `static struct option opts[] = {...};`)
        elif seg.kind == "decl" and re.search(
            r"\bstd\s*::|\b(FILE|cudaStream_t|cudaEvent_t|cublasHandle_t)\b", head
        ):
            keep[idx] = False  # host-only globals and prototypes that NVRTC cannot parse
        elif seg.kind == "decl" and (alias := _TYPEDEF_RE.match(head)):
            # a type alias is kept when kept code names it (epistasis: typedef high_resolution_clock myclock)
            keep[idx] = False
            candidates[idx] = alias.group(1) or alias.group(2)
    # host prototypes (void f(Option &o);) name types but use nothing: they pull no type in, and go when
    # a type they name stays out (deredundancy's Option holds std::string)
    prototypes = {
        k for k, s in enumerate(segments) if keep[k] and s.kind == "decl" and _HOST_PROTOTYPE_RE.match(s.head)
    }
    # Pull in unannotated helpers referenced by kept code (fixpoint over the call graph).
    used = (
        set().union(
            *(
                _identifiers(_code_only(text, mask, s.start, s.end))
                for k, s in enumerate(segments)
                if keep[k] and k not in prototypes
            )
        )
        if segments
        else set()
    )
    changed = True
    while changed:
        changed = False
        for idx, name in list(candidates.items()):
            if name in used:
                keep[idx] = True
                used |= _identifiers(_code_only(text, mask, segments[idx].start, segments[idx].end))
                del candidates[idx]
                changed = True
    left_out = set(candidates.values())
    for k in prototypes:
        if _identifiers(segments[k].head) & left_out:
            keep[k] = False
    prepared.dropped_functions = sorted(
        {segments[k].name for k in range(len(segments)) if not keep[k] and segments[k].kind == "func"}
    )
    pieces: list[str] = []
    cursor = 0
    for idx, seg in enumerate(segments):
        if not keep[idx]:
            pieces.append(text[cursor : seg.start])
            # keep directives inside the dropped span so #if/#endif stay balanced
            dropped = text[seg.start : seg.end]
            pieces.append("\n" + _directives(dropped) + "\n")
            cursor = seg.end
    pieces.append(text[cursor:])
    return "".join(pieces)


def _directives(text: str) -> str:
    """Preprocessor lines of a dropped span (all but #pragma), with continuations: #if/#endif
    must stay balanced and a #define above a dropped function may be used by kept code."""
    mask = code_mask(text)
    out: list[str] = []
    i = 0
    while i < len(text):
        if (
            not mask[i]
            and text[i] == "#"
            and (i == 0 or text[:i].rstrip(" \t").endswith("\n") or not text[:i].strip())
        ):
            j = i
            while j < len(text) and not mask[j]:
                j += 1
            line = text[i:j]
            if not re.match(r"#\s*pragma\b", line):
                out.append(line.rstrip())
            i = j
        else:
            i += 1
    return "\n".join(out)


def template_launches(text: str, kept_text: str) -> list[str]:
    """Name expressions for template kernels launched as ``k<args><<<...>>>`` in the program."""
    kept = code_mask(kept_text)
    code = _code_only(kept_text, kept, 0, len(kept_text))
    template_kernels = set(
        re.findall(
            r"template\s*<[^{;]*?>\s*(?:static\s+)?__global__[^(;{]*?\b([A-Za-z_]\w*)\s*\(", code, re.S
        )
    )
    exprs: list[str] = []
    for m in _LAUNCH_RE.finditer(text):
        name, args = m.group(1), " ".join(m.group(2).split())
        if name in template_kernels:
            expr = f"{name}<{args}>"
            if expr not in exprs:
                exprs.append(expr)
    return exprs


def prepare_source(
    text: str,
    path: Path | None = None,
    include_dirs: tuple[Path, ...] = (),
    defines: dict[str, str] | None = None,
) -> PreparedSource:
    """Whole program text -> device-only text NVRTC can compile, plus template name expressions.

    ``defines`` (the user's -D macros) only inform the defaults: macros an ``#error`` guard
    demands are defaulted to the guard's first alternative (static.build.guard_defaults).
    """
    from components.features.static.build import guard_defaults
    from components.features.static.templates import resolve_launches

    prepared = PreparedSource(text="")
    seen: set[Path] = {path.resolve()} if path else set()
    inlined = inline_includes(text, path.parent if path else None, include_dirs, prepared, seen)
    prepared.default_defines, prepared.required_macros = guard_defaults(inlined, dict(defines or {}))
    device = extract_device_code(inlined, prepared)
    try:
        prepared.name_expressions = resolve_launches(inlined, device)
    except (RecursionError, ValueError, IndexError):  # a launch site too odd to rewrite: take it verbatim
        prepared.name_expressions = template_launches(inlined, device)
    shims = (
        (LIMITS_SHIM if "numeric_limits" in device else "")
        + (LEGACY_SHUFFLE_SHIM if _legacy_shuffles(device) else "")
        + (STD_INT_SHIM if _STD_INT_RE.search(device) else "")
        + (REGISTER_SHIM if _REGISTER_RE.search(device) else "")
    )
    prepared.text = PRELUDE + shims + "#line 1\n" + device
    return prepared
