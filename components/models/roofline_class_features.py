"""What the roofline-class model reads of a whole-program kernel, none of it measured on a GPU: its own
text (``kernel_text``: the CUDA ``__global__`` body or the OpenMP ``target`` region), token and loop counts
and the intensities they imply (``text_features``), the signature and arguments, the launch, static SASS
(``s_*``) where NVRTC compiled it, and the GPU's ridge points and L2 as ratios with those estimates
(``class_feature_frame`` for a whole table). The model is ``components.models.roofline_class``."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from components.common.braces import closing_brace
from components.common.lazy import lazy_module
from components.features.static.sass import INSTRUCTION_CLASSES

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

LAUNCH_DIMS: tuple[str, ...] = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")

_MATH = re.compile(
    r"\b(?:sqrtf?|rsqrtf?|expf?|exp2f?|__expf|logf?|log2f?|log10f?|__logf|sinf?|cosf?|tanf?|__sinf|"
    r"__cosf|powf?|__powf|tanhf?|erff?|erfcf?|atanf?|atan2f?|acosf?|asinf?|cbrtf?|lgammaf?|hypotf?|"
    r"sincosf?)\s*\("
)
_FILE_MARK = re.compile(r"^// ==== file: (.*)$", re.M)


def _number(value: Any) -> Any:
    """``pd.to_numeric(value, errors="coerce")`` of one value; plain numbers and None without pandas."""
    if value is None:
        return np.float64(np.nan)
    if isinstance(value, (int, float, np.number)):
        return value  # what to_numeric returns for them
    return pd.to_numeric(value, errors="coerce")


# ---------------------------------------------------------------------- kernel text


def _files(source_text: str) -> list[tuple[str, str]]:
    """(path, text) of each file in a canonical program text ('// ==== file: <path>' headers)."""
    marks = list(_FILE_MARK.finditer(source_text))
    if not marks:
        return [("", source_text)]
    return [
        (m.group(1), source_text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(source_text)])
        for i, m in enumerate(marks)
    ]


def _block_after(text: str, start: int, limit: int = 60000) -> str:
    """The brace-delimited block that starts at the first '{' after ``start`` (or the statement)."""
    brace = text.find("{", start, start + limit)
    semi = text.find(";", start, start + limit)
    if brace < 0 or (0 <= semi < brace and "for" not in text[start:semi]):
        return text[start : semi + 1 if semi >= 0 else start + 400]
    close = closing_brace(text, brace, stop=brace + limit)
    return text[start : start + limit] if close is None else text[start : close + 1]


def _mangled_function(op: str) -> str | None:
    m = re.search(r"_Z(?:N\d+\w+?)?(\d+)([A-Za-z_]\w*)", op.split("__omp_offloading_")[-1])
    if not m:
        return None
    n = int(m.group(1))
    return m.group(2)[:n]


def kernel_text(source_text: Any, language: Any, op: Any) -> str | None:
    """The kernel's own code: a CUDA kernel's definition, or the OpenMP target region at the
    offload symbol's line (``..._l92`` = line 92 of the file holding the enclosing function)."""
    if not isinstance(source_text, str) or not source_text or not isinstance(op, str):
        return None
    if str(language) == "openmp":
        line_match = re.search(r"_l(\d+)$", op)
        func = _mangled_function(op)
        candidates = []
        for _, text in _files(source_text):
            lines = text.split("\n")
            if not line_match:
                break
            line = int(line_match.group(1))
            if line - 1 >= len(lines):
                continue
            window = "\n".join(lines[max(0, line - 3) : line + 1])
            if "omp" not in window:
                continue
            offset = sum(len(x) + 1 for x in lines[: line - 1])
            score = func is not None and re.search(r"\b" + re.escape(func) + r"\s*\(", text) is not None
            candidates.append((score, _block_after(text, offset)))
        if candidates:
            return max(candidates, key=lambda c: c[0])[1]
        func_text = None
        if func:
            m = re.search(r"\b" + re.escape(func) + r"\s*\([^;{]*\)\s*\{", source_text)
            func_text = _block_after(source_text, m.start()) if m else None
        return func_text
    name = op.split("(")[0].split("<")[0].split("::")[-1].strip()
    m = re.search(r"__global__[^;{]*?\b" + re.escape(name) + r"\s*\(", source_text) or re.search(
        r"\b" + re.escape(name) + r"\s*\([^;{]*\)\s*\{", source_text
    )
    return _block_after(source_text, m.start()) if m else None


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _loop_nesting(code: str) -> tuple[int, int]:
    """(deepest for/while nesting, array accesses inside a loop body), by brace matching."""
    depth_max, inside, stack, depth = 0, 0, [], 0
    loop_opened = False
    i = 0
    while i < len(code):
        m = (
            re.match(r"(?:for|while)\s*\(", code[i : i + 12])
            if code[i].isalpha() and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_"))
            else None
        )
        if m:
            loop_opened = True
            depth_max = max(depth_max, sum(stack) + 1)
        ch = code[i]
        if ch == "{":
            stack.append(1 if loop_opened else 0)
            loop_opened = False
            depth += 1
        elif ch == "}":
            if stack:
                stack.pop()
            depth -= 1
        elif ch == ";" and loop_opened and code.count("(", 0, i) == code.count(")", 0, i):
            loop_opened = False  # a braceless loop body ends at its statement
        elif ch == "[" and (sum(stack) > 0 or loop_opened):
            inside += 1
        i += 1
    return depth_max, inside


_THREAD_SEED = re.compile(r"threadIdx|blockIdx|blockDim|get_global_id|omp_get_thread_num|omp_get_team_num")


def _thread_vars(code: str, openmp: bool) -> set[str]:
    """Variables holding a thread's position: assigned from threadIdx/blockIdx (CUDA) or the
    distributed loop's index (OpenMP), closed over simple assignments."""
    found: set[str] = set()
    if openmp:
        m = re.search(r"\bfor\s*\(\s*(?:[\w:]+\s+)?([A-Za-z_]\w*)\s*=", code)
        if m:
            found.add(m.group(1))
    for _ in range(3):
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;]*);", code):
            rhs = m.group(2)
            if _THREAD_SEED.search(rhs) or any(re.search(r"\b" + re.escape(v) + r"\b", rhs) for v in found):
                found.add(m.group(1))
    return found


def _reuse_features(code: str, openmp: bool) -> dict[str, float]:
    """Array reads whose index does not depend on the thread (the same element read by many
    threads: served from cache, so more arithmetic per DRAM byte), and loop-carried accesses."""
    tvars = _thread_vars(code, openmp)
    indices = re.findall(r"\[([^\[\]]*)\]", code)
    if not indices:
        return {"t_thread_vars": float(len(tvars))}
    shared = [
        ix
        for ix in indices
        if not _THREAD_SEED.search(ix) and not any(re.search(r"\b" + re.escape(v) + r"\b", ix) for v in tvars)
    ]
    idx_ops = sum(len(re.findall(r"[*+\-/%]|<<|>>", ix)) for ix in indices)
    return {
        "t_thread_vars": float(len(tvars)),
        "t_reuse_reads": float(len(shared)),
        "t_reuse_share": len(shared) / len(indices),
        "t_index_ops_per_access": idx_ops / len(indices),
    }


def text_features(kernel: str | None, program: str | None, openmp: bool = False) -> dict[str, float]:
    """Token counts of the kernel's code (and whether the program works in double precision)."""
    out: dict[str, float] = {}
    if kernel is None:
        return out
    code = strip_comments(kernel)
    prog = strip_comments(program or "")
    n_index = len(re.findall(r"\[", code))
    arith = len(re.findall(r"(?<![+\-*/=<>!&|])[*/](?![*/=])|(?<![+\-])[+\-](?![+\-=>])", code))
    compound = len(re.findall(r"[+\-*/]=", code))
    math_calls = len(_MATH.findall(code))
    doubles = len(re.findall(r"\bdouble\b", code))
    floats = len(re.findall(r"\bfloat\d?\b|\b\d+\.\d*f\b", code))
    dp_literals = len(re.findall(r"\b\d+\.\d*(?:[eE][-+]?\d+)?\b(?!f)", code))
    loops = len(re.findall(r"\b(?:for|while)\s*\(", code))
    arrays = set(re.findall(r"\b([A-Za-z_]\w*)\s*\[", code))
    depth, in_loop_index = _loop_nesting(code)
    out.update(
        {
            "t_arrays": float(len(arrays)),
            "t_index_per_array": n_index / max(len(arrays), 1),
            "t_loop_depth": float(depth),
            "t_index_in_loops": float(in_loop_index),
            "t_index_in_loops_share": in_loop_index / max(n_index, 1),
            "t_chars": float(len(code)),
            "t_index": float(n_index),
            "t_arith": float(arith + compound),
            "t_math": float(math_calls),
            "t_double": float(doubles),
            "t_float": float(floats),
            "t_dp_literals": float(dp_literals),
            "t_loops": float(loops),
            "t_ifs": float(len(re.findall(r"\bif\s*\(", code))),
            "t_atomic": float(len(re.findall(r"\batomic", code, re.I))),
            "t_shared": float(len(re.findall(r"__shared__|\bshared\b", code))),
            "t_sync": float(len(re.findall(r"__syncthreads|\bbarrier\b", code))),
            "t_int_ops": float(len(re.findall(r"<<|>>|[&|^%](?![&|=])", code))),
            "t_arith_per_index": (arith + compound + 4 * math_calls) / max(n_index, 1),
            "t_math_per_index": math_calls / max(n_index, 1),
            "t_prog_double": float(bool(re.search(r"\bdouble\b", prog))),
            "t_prog_real_double": float(bool(re.search(r"(typedef|define|using)\s+[^;\n]*\bdouble\b", prog))),
            "t_uses_double": float(
                doubles > 0
                or bool(re.search(r"\breal\b|\bFP\b|\bT\b|\bReal\b", code))
                * bool(re.search(r"(typedef|define|using)\s+[^;\n]*\bdouble\b", prog))
            ),
            "t_reduction": float(bool(re.search(r"reduction\s*\(", code))),
            "t_collapse": float(bool(re.search(r"collapse\s*\(", code))),
        }
    )
    out.update(_reuse_features(code, openmp))
    elem = 8.0 if out["t_uses_double"] or out["t_double"] else 4.0
    bytes_ = max(out["t_index"] - out.get("t_reuse_reads", 0.0), 1.0) * elem
    loop_scale = 1.0 + 4.0 * out["t_loops"]
    # Token-level intensities in the label's terms: arithmetic (FP) and integer work per byte.
    out["t_fp_per_byte"] = (out["t_arith"] + 4 * out["t_math"]) * loop_scale / bytes_
    out["t_int_per_byte"] = (
        (
            out["t_index"] * out.get("t_index_ops_per_access", 0.0)
            + out["t_int_ops"]
            + 3 * out["t_loops"]
            + out["t_ifs"]
        )
        * loop_scale
        / bytes_
    )
    return out


# ---------------------------------------------------------------------- launch, SASS, device


def signature_features(signature: str | None, op: str | None) -> dict[str, float]:
    """Parameter types of the kernel (demangled signature, or the OpenMP offload symbol's mangled
    enclosing function): how many double/float/integer arrays and scalars it takes."""
    out: dict[str, float] = {}
    if isinstance(signature, str) and "(" in signature:
        params = [
            p.strip()
            for p in signature[signature.find("(") + 1 : signature.rfind(")")].split(",")
            if p.strip()
        ]
        ptr = [p for p in params if "*" in p]
        out = {
            "g_params": float(len(params)),
            "g_double_ptr": float(sum("double" in p for p in ptr)),
            "g_float_ptr": float(sum("float" in p or "half" in p for p in ptr)),
            "g_int_ptr": float(
                sum(
                    re.search(r"\b(int|long|unsigned|char|short|uint\w*|int\d+_t)\b", p) is not None
                    for p in ptr
                )
            ),
            "g_const_ptr": float(sum("const" in p for p in ptr)),
            "g_double_scalar": float(sum("double" in p for p in params if "*" not in p)),
            "g_ptr": float(len(ptr)),
        }
    elif isinstance(op, str) and "_Z" in op:
        mangled = re.sub(r"_l\d+$", "", op.split("_Z", 1)[1])
        m = re.match(r"N?\d+", mangled)
        body = mangled[m.end() :] if m else mangled
        head = re.match(r"\d*", mangled)
        n = int(head.group(0)) if head and head.group(0) else 0
        body = mangled[len(str(n)) + n :] if n else body
        out = {
            "g_params": float(len(re.findall(r"[dfijlmhtsPS]", body))),
            "g_double_ptr": float(len(re.findall(r"PK?d", body))),
            "g_float_ptr": float(len(re.findall(r"PK?f", body))),
            "g_int_ptr": float(len(re.findall(r"PK?[ijlmhtsc]", body))),
            "g_const_ptr": float(len(re.findall(r"PK", body))),
            "g_double_scalar": float(len(re.findall(r"(?<![PK])d", body))),
            "g_ptr": float(body.count("P")),
        }
    if out:
        out["g_double_share"] = (out["g_double_ptr"] + out["g_double_scalar"]) / max(out["g_params"], 1.0)
    return out


def _params_json(row: pd.Series | dict) -> dict[str, Any]:
    raw = row.get("params_json")
    if not isinstance(raw, str):
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def args_features(args: Any) -> dict[str, float]:
    """The program's command-line arguments as the data gives them (problem sizes, iterations)."""
    if not isinstance(args, str) or not args.strip() or args.strip().upper() == "NULL":
        return {}
    numbers = [float(x) for x in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE]\d+)?(?![\w.])", args)]
    numbers = [abs(x) for x in numbers if x != 0]
    if not numbers:
        return {"a_n": 0.0}
    return {
        "a_n": float(len(numbers)),
        "a_max": math.log10(max(numbers)),
        "a_sum": math.log10(sum(numbers)),
        "a_prod": min(sum(math.log10(x) for x in numbers if x >= 1), 30.0),
    }


def launch_features(row: pd.Series | dict) -> dict[str, float]:
    dims = {k: _number(row.get(k)) for k in LAUNCH_DIMS}
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in dims.values()):
        return {}
    blocks = float(dims["grid_x"] * dims["grid_y"] * dims["grid_z"])
    tpb = float(dims["block_x"] * dims["block_y"] * dims["block_z"])
    return {
        "l_blocks": math.log10(max(blocks, 1)),
        "l_tpb": tpb,
        "l_threads": math.log10(max(blocks * tpb, 1)),
        "l_grid_dims": float((dims["grid_y"] > 1) + (dims["grid_z"] > 1)),
    }


_S_CLASSES = tuple(c for c in INSTRUCTION_CLASSES if c != "other")  # the SASS classes counted


def sass_features(row: pd.Series | dict, loop_trips: float = 8.0) -> dict[str, float]:
    """Ratios from the s_* columns: instruction mix and per-thread intensities (loops x loop_trips)."""
    total = _number(row.get("s_total"))
    if total is None or not np.isfinite(total) or total <= 0:
        return {}
    dyn = {}
    for c in _S_CLASSES:
        n = float(_number(row.get(f"s_{c}")) or 0.0)
        loop = float(_number(row.get(f"s_loop_{c}")) or 0.0)
        dyn[c] = n - loop + loop_trips * loop
    mem = (
        dyn["global_ld"]
        + dyn["global_st"]
        + dyn["atomic"]
        + dyn["texture"]
        + dyn["local_ld"]
        + dyn["local_st"]
    )
    access = 8.0 if dyn["fp64"] > dyn["fp32"] else 4.0
    bytes_ = max(mem * access, 1.0)
    dyn_total = sum(dyn.values())
    out = {
        f"x_frac_{c}": dyn[c] / max(dyn_total, 1.0)
        for c in ("fp32", "fp64", "int", "sfu", "global_ld", "global_st", "shared_ld", "branch", "atomic")
    }
    out.update(
        {
            "x_sp_ai": 2 * (dyn["fp32"] + 2 * dyn["fp16"]) / bytes_,
            "x_dp_ai": 2 * dyn["fp64"] / bytes_,
            "x_int_ai": dyn["int"] / bytes_,
            "x_sfu_per_mem": dyn["sfu"] / max(mem, 1.0),
            "x_dyn_total": math.log10(max(dyn_total, 1.0)),
            "x_loops": float(_number(row.get("s_loops")) or 0.0),
            "x_loop_depth": float(_number(row.get("s_loop_depth")) or 0.0),
            "x_loop_share": float(_number(row.get("s_loop_total")) or 0.0) / float(total),
            "x_registers": float(_number(row.get("s_registers")) or 0.0),
            "x_shared_bytes": math.log10(1 + float(_number(row.get("s_shared_bytes")) or 0.0)),
            "x_mem_per_thread": math.log10(max(mem, 1.0)),
        }
    )
    return out


def device_features(row: pd.Series | dict, feats: dict[str, float]) -> dict[str, float]:
    """The estimates against this GPU's ridge points and L2 (what 'bound' means on it)."""
    out: dict[str, float] = {}
    ridge32 = _number(row.get("dev_ridge_fp32"))
    ridge64 = _number(row.get("dev_ridge_fp64"))
    l2 = _number(row.get("dev_l2_mb"))
    if ridge32 and np.isfinite(ridge32) and "x_sp_ai" in feats:
        out["d_sp_vs_ridge"] = math.log10(max(feats["x_sp_ai"], 1e-6) / ridge32)
        out["d_int_vs_ridge"] = math.log10(max(feats["x_int_ai"], 1e-6) / (ridge32 / 2))
    if ridge64 and np.isfinite(ridge64) and "x_dp_ai" in feats:
        out["d_dp_vs_ridge"] = math.log10(max(feats["x_dp_ai"], 1e-6) / ridge64)
    if l2 and np.isfinite(l2) and "l_threads" in feats and "t_arrays" in feats:
        out["d_text_footprint_vs_l2"] = (
            feats["l_threads"] + math.log10(max(feats["t_arrays"], 1.0) * 4) - math.log10(l2 * 2**20)
        )
    if l2 and np.isfinite(l2) and "l_threads" in feats:
        per_thread = 10 ** feats.get("x_mem_per_thread", math.log10(8.0)) * 4
        out["d_footprint_vs_l2"] = feats["l_threads"] + math.log10(per_thread) - math.log10(l2 * 2**20)
    return out


def class_feature_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row of class-model inputs per input row (same index); NaN where an input is absent."""
    rows = class_feature_rows(row for _, row in frame.iterrows())
    return pd.DataFrame(rows, index=frame.index, dtype="float64")


def class_feature_rows(inputs: Iterable[Mapping[str, Any]]) -> list[dict[str, float]]:
    """``class_feature_frame``'s rows as dicts (a key absent where its input is): a question's one row
    needs no pandas."""
    rows = []
    texts: dict[tuple[str, str], dict[str, float]] = {}
    for row in inputs:
        key = (str(row.get("kernel_id")), str(row.get("op")))
        if key not in texts:
            ktext = kernel_text(row.get("source_text"), row.get("language"), row.get("op"))
            texts[key] = text_features(
                ktext,
                row.get("source_text") if isinstance(row.get("source_text"), str) else None,
                str(row.get("language")) == "openmp",
            )
        feats: dict[str, float] = {"is_openmp": float(str(row.get("language")) == "openmp")}
        feats.update(texts[key])
        feats.update(launch_features(row))
        extra = _params_json(row)
        feats.update(args_features(extra.get("exeArgs")))
        feats.update(signature_features(extra.get("signature"), row.get("op")))
        feats.update(sass_features(row))
        feats.update(device_features(row, feats))
        rows.append(feats)
    return rows
