"""SASS of a cubin via ``nvdisasm -json``: per-function instruction classes and loop structure,
plus per-kernel resources (registers, shared memory, spills) from the ptxas ``-v`` report."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INSTRUCTION_CLASSES: tuple[str, ...] = (
    "fp32",
    "fp64",
    "fp16",
    "tensor",
    "int",
    "sfu",
    "global_ld",
    "global_st",
    "shared_ld",
    "shared_st",
    "local_ld",
    "local_st",
    "atomic",
    "shuffle",
    "branch",
    "barrier",
    "convert",
    "texture",
    "other",
)

# Base opcode (text before the first '.') -> class. Uniform-datapath ops (U*) map like their
# vector twins; the tensor family is matched by suffix below (HMMA, IMMA, DMMA, HGMMA, UTC*MMA...).
_OPCODE_CLASS: dict[str, str] = {}
for _cls, _ops in {
    "fp32": "FADD FMUL FFMA FMNMX FSET FSETP FSEL FCHK FSWZADD FADD32I FMUL32I FFMA32I FCMP FRND32 FMNMX3 "
    "FADD2 FFMA2 FMUL2",
    "fp64": "DADD DMUL DFMA DMNMX DSETP DSET",
    "fp16": "HADD2 HMUL2 HFMA2 HMNMX2 HSETP2 HSET2 HADD2_F32 HFMA2_MMA HADD2_32I HMUL2_32I HFMA2_32I",
    "int": "IADD3 IADD IADD32I IMAD IMADSP IMUL IMUL32I LOP3 LOP LOP32I SHF SHL SHR ISETP ISCADD LEA "
    "IABS IMNMX "
    "VIMNMX VIMNMX3 POPC FLO BREV BMSK SGXT PRMT IDP IDP4A VABSDIFF VABSDIFF4 IMAD32I ISAD VIADD VIADDMNMX "
    "ULOP3 UIADD3 UIMAD USHF ULEA UISETP UPRMT USEL UFLO UPOPC UBREV USGXT UBMSK ULOP UIABS UIMNMX UVIADD",
    "sfu": "MUFU",
    "global_ld": "LDG LD LDGSTS UBLKCP UTMALDG",
    "global_st": "STG ST UTMASTG",
    "shared_ld": "LDS LDSM",
    "shared_st": "STS STSM",
    "local_ld": "LDL",
    "local_st": "STL",
    "atomic": "ATOM ATOMS ATOMG RED REDG",
    "shuffle": "SHFL VOTE VOTEU MATCH REDUX",
    "branch": "BRA BRX BRXU JMP JMX CALL RET EXIT BREAK KILL BPT",
    "barrier": "BAR BSYNC BSSY WARPSYNC MEMBAR DEPBAR ERRBAR SYNCS ARRIVES CCTL FENCE LDGDEPBAR WARPGROUP",
    "convert": "F2F F2I I2F I2I F2FP I2FP F2IP FRND",
    "texture": "TEX TLD TLD4 TMML TXD TXQ SULD SUST SUATOM SURED",
}.items():
    for _op in _ops.split():
        _OPCODE_CLASS[_op] = _cls


# Floating-point operations per thread of one instruction, as Nsight Compute counts them
# (an FMA is 2, add and multiply 1, packed half2 twice that; compares, min/max and selects 0).
FLOP_WEIGHTS: dict[str, tuple[str, int]] = {
    **dict.fromkeys(("FADD", "FMUL", "FADD32I", "FMUL32I"), ("flop_fp32", 1)),
    **dict.fromkeys(("FFMA", "FFMA32I", "FADD2", "FMUL2"), ("flop_fp32", 2)),
    "FFMA2": ("flop_fp32", 4),
    **dict.fromkeys(("DADD", "DMUL"), ("flop_fp64", 1)),
    "DFMA": ("flop_fp64", 2),
    **dict.fromkeys(("HADD2", "HMUL2", "HADD2_32I", "HMUL2_32I", "HADD2_F32"), ("flop_fp16", 2)),
    **dict.fromkeys(("HFMA2", "HFMA2_32I"), ("flop_fp16", 4)),
}
FLOP_KEYS: tuple[str, ...] = ("flop_fp32", "flop_fp64", "flop_fp16")
# Longest compiler-made atomic retry loop, in instructions: load, the operation, CAS, compare, branch (a
# double atomicAdd on shared memory is 6); a longer loop around a CAS is the program's own loop.
CAS_LOOP_MAX = 16


def classify_opcode(opcode: str, operands: str = "") -> str | None:
    """Instruction class of a SASS opcode such as 'FFMA.FTZ' or 'LDG.E.128'; None for NOP."""
    base = opcode.split(".")[0].upper()
    if base == "NOP":
        return None
    if opcode.startswith("HFMA2.MMA") and "-RZ,RZ" in operands.replace(" ", ""):
        return "other"  # ptxas idiom: 'HFMA2.MMA Rd, -RZ, RZ, imm' is a constant move, not FP16 math
    if base.endswith("MMA"):
        return "tensor"
    return _OPCODE_CLASS.get(base, "other")


@dataclass
class FunctionSass:
    name: str
    instructions: dict[str, int]
    loop_instructions: dict[str, int]
    loops: dict[str, int]
    total: int
    loop_detail: list[dict] = field(default_factory=list)
    flops: dict[str, int] = field(default_factory=dict)  # FLOP_KEYS: straight-line + loops, per thread
    loop_flops: dict[str, int] = field(default_factory=dict)  # FLOP_KEYS inside >= 1 loop


@dataclass
class PtxasResources:
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0
    constant_bytes: int = 0
    entry: bool = False
    extra: dict[str, int] = field(default_factory=dict)


def run_nvdisasm(cubin: bytes, nvdisasm: Path, timeout_s: float = 120.0) -> list[dict]:
    """Functions of a cubin as nvdisasm's JSON (list of {'function-name', 'sass-instructions'})."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        proc = subprocess.run([str(nvdisasm), "-json", fh.name], capture_output=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {proc.stderr.decode(errors='replace').strip()}")
    doc = json.loads(proc.stdout)
    return doc[1] if isinstance(doc, list) and len(doc) > 1 else []


def loop_structure(instrs: list[dict]) -> tuple[dict[str, int], list[int]]:
    """Loops from backward branches: each (target, source) pair whose target precedes the branch
    is a loop body [target, source]; nesting depth of a loop = how many bodies contain it.
    Returns loop stats and, per instruction, its loop depth. Instructions are 16 bytes (sm_70+).
    """
    bodies: set[tuple[int, int]] = set()
    for idx, ins in enumerate(instrs):
        if ins.get("opcode", "").split(".")[0] not in ("BRA", "JMP"):
            continue
        target = _branch_target(ins)
        if (
            target is not None and target < idx
        ):  # target == idx is the trailing 'BRA self' padding idiom, not a loop
            bodies.add((target, idx))
    depth = [0] * len(instrs)
    for lo, hi in bodies:
        for k in range(lo, hi + 1):
            depth[k] += 1
    nest = max((max(depth[lo : hi + 1]) for lo, hi in bodies), default=0)
    return {"count": len(bodies), "max_depth": nest}, depth


def analyze_function(fn: dict) -> FunctionSass:
    instrs = fn.get("sass-instructions", [])
    counts = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    in_loop = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    loops, depth = loop_structure(instrs)
    detail = loop_nest(instrs)
    flops, loop_flops = dict.fromkeys(FLOP_KEYS, 0), dict.fromkeys(FLOP_KEYS, 0)
    total = 0
    slow = slow_paths(instrs)
    for idx, (ins, d) in enumerate(zip(instrs, depth, strict=True)):
        cls = classify_opcode(ins.get("opcode", "NOP"), str(ins.get("operands", "")))
        if cls is None or (cls == "branch" and _branch_target(ins) == idx) or idx in slow:
            continue  # NOP and the 'BRA .' after EXIT only pad the function; slow paths rarely run
        counts[cls] += 1
        total += 1
        flop_key, weight = FLOP_WEIGHTS.get(ins.get("opcode", "").split(".")[0].upper(), ("", 0))
        weight = weight if cls != "other" else 0  # 'other': the HFMA2.MMA constant-move idiom
        if flop_key:
            flops[flop_key] += weight
        if d:
            in_loop[cls] += 1
            own = min(
                (k for k, lp in enumerate(detail) if lp["start"] <= idx <= lp["end"]), key=_span(detail)
            )
            detail[own]["own"][cls] = detail[own]["own"].get(cls, 0) + 1
            if cls == "atomic" and ".CAS" in ins.get("opcode", "").upper():
                detail[own]["cas"] = 1  # maybe the compiler's retry loop of an atomic (static.atomics)
            if flop_key:
                loop_flops[flop_key] += weight
                detail[own]["own"][flop_key] = detail[own]["own"].get(flop_key, 0) + weight
    for k, lp in enumerate(detail):  # a retry loop is a few instructions around the CAS, nothing nested
        nested = any(other["parent"] == k for other in detail)
        if lp.pop("cas", 0) and not nested and lp["end"] - lp["start"] < CAS_LOOP_MAX:
            lp["cas"] = 1
    return FunctionSass(
        fn.get("function-name", "?"), counts, in_loop, loops, total, detail, flops, loop_flops
    )


def slow_paths(instrs: list[dict]) -> set[int]:
    """Indices of the compiler's out-of-line slow paths (``$__internal_..._slowpath``: IEEE division and
    square root for denormal or special operands), placed after the kernel's EXIT and returning with RET.
    They run almost never, yet a static count took their ~30 instructions (a dozen FFMAs) as once per
    thread -- 2-3x the FLOPs of a kernel that divides. Empty when the kernel calls anything else (a
    non-inlined device function runs on every call)."""
    calls = [str(i.get("operands", "")) for i in instrs if i.get("opcode", "").startswith("CALL")]
    if not calls or not all("slowpath" in c for c in calls):
        return set()
    ops = [i.get("opcode", "").split(".")[0] for i in instrs]
    first_exit = next((k for k, op in enumerate(ops) if op == "EXIT"), None)
    if first_exit is None:
        return set()
    out: set[int] = set()
    start = first_exit + 1
    for k in range(start, len(ops)):
        if ops[k] == "EXIT":
            start = k + 1
        elif ops[k] == "RET":
            out.update(range(start, k + 1))
            start = k + 1
    return out


def _span(detail: list[dict]) -> Any:
    return lambda k: detail[k]["end"] - detail[k]["start"]


def loop_nest(instrs: list[dict]) -> list[dict]:
    """Loop bodies in address order (outer before inner), each {'start', 'end', 'parent', 'own'}:
    ``parent`` the index of the smallest enclosing body (-1 at top level), ``own`` filled by the
    caller with the instruction classes whose innermost loop it is. Bodies sharing a head (two
    back edges to one target) are one loop: its span runs to the last back edge."""
    ends: dict[int, int] = {}
    for idx, ins in enumerate(instrs):
        if ins.get("opcode", "").split(".")[0] in ("BRA", "JMP"):
            target = _branch_target(ins)
            if target is not None and target < idx:
                ends[target] = max(ends.get(target, idx), idx)
    bodies = sorted(ends.items(), key=lambda b: (b[0], -b[1]))
    detail: list[dict] = []
    for lo, hi in bodies:
        parents = [k for k, lp in enumerate(detail) if lp["start"] <= lo and hi <= lp["end"]]
        detail.append({"start": lo, "end": hi, "parent": parents[-1] if parents else -1, "own": {}})
    return detail


def _branch_target(ins: dict) -> int | None:
    """Instruction index a direct branch jumps to (operand is a function-relative byte offset)."""
    try:
        return int(str(ins.get("operands", "")).split(",")[-1].strip(), 16) // 16
    except ValueError:
        return None  # indirect branch (register operand) or no operand


_PTXAS_FUNC = re.compile(r"(?:Compiling entry function|Function properties for)\s+'?([^'\s]+)'?")
_PTXAS_NUM = re.compile(r"(\d+)\s+bytes\s+([a-z ]+?)(?:\[\d+\])?(?=,|$)")


def parse_ptxas_log(log: str) -> dict[str, PtxasResources]:
    """Per-function resources from the ``-Xptxas=-v`` report NVRTC puts in its log."""
    out: dict[str, PtxasResources] = {}
    current: PtxasResources | None = None
    for line in log.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            current = out.setdefault(m.group(1), PtxasResources())
            if "entry function" in line:
                current.entry = True
            continue
        if current is None:
            continue
        reg = re.search(r"Used (\d+) registers", line)
        if reg:
            current.registers = int(reg.group(1))
        bar = re.search(r"used (\d+) barriers", line)
        if bar:
            current.barriers = int(bar.group(1))
        for num, what in _PTXAS_NUM.findall(line):
            what = what.strip()
            value = int(num)
            if what == "stack frame":
                current.stack_bytes = value
            elif what == "spill stores":
                current.spill_store_bytes = value
            elif what == "spill loads":
                current.spill_load_bytes = value
            elif what == "smem":
                current.shared_bytes = value
            elif what == "cmem":
                current.constant_bytes += value
    return out
