"""AMDGPU ISA of a HIP compile: per-kernel instruction classes, loops, registers, LDS and occupancy.

Input is the assembler text clang writes for ``--cuda-device-only -S`` (the same instructions
``llvm-objdump -d`` lists from the code object, with branch targets as labels) and its
``.amdgpu_metadata`` block (what ``llvm-readelf --notes`` prints: VGPR/SGPR/AGPR counts, LDS
(group segment) and scratch (private segment) bytes, spill counts, wavefront size).

Instructions map to the classes of the SASS analysis (static.sass.INSTRUCTION_CLASSES) so the
roofline estimate and the ``s_*`` feature columns read the same for both vendors: a vector ALU op
by its operand type (``_f32`` fp32, ``_f64`` fp64, ``_f16``/``_bf16`` fp16, integer types int),
transcendentals (``v_exp``, ``v_rcp``, ``v_sqrt``...) sfu, ``v_cvt`` convert, ``v_mfma``/``v_wmma``/
``v_smfmac`` tensor, ``global_``/``buffer_``/``flat_`` loads and stores global, ``scratch_`` local,
``ds_`` LDS shared (``ds_bpermute``/``ds_swizzle`` shuffle), ``*_atomic*`` atomic, ``s_barrier``
barrier, ``s_branch``/``s_cbranch``/``s_endpgm`` branch. Scalar (``s_``) ALU and scalar loads run
once per wave, not per thread: they count as ``other`` for the per-thread estimate and appear in
the AMD-only counts (``salu``, ``smem``) beside ``valu``, ``vmem``, ``lds``, ``matrix`` (v_mfma,
v_dot, v_wmma) and ``waitcnt``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from components.features.static.sass import INSTRUCTION_CLASSES

AMD_CLASSES: tuple[str, ...] = ("valu", "salu", "vmem", "smem", "lds", "matrix", "branch", "waitcnt")

_TRANSCENDENTAL = re.compile(r"^v_(exp|log|rcp|rsq|sqrt|sin|cos)(_legacy)?_")
_MATRIX = re.compile(r"^v_(mfma|smfmac|wmma|swmmac)")
_TYPE_TOKEN = re.compile(
    r"_(f64|f32|f16|bf16|b64|b32|b16|i64|i32|i24|i16|i8|u64|u32|u24|u16|u8|i4|u4)(?=_|$)"
)
_LABEL = re.compile(r"^([.\w$]+):")
_BRANCH_TARGET = re.compile(r"^s_(?:c?branch\w*)\s+([.\w$]+)")


def _vector_type_class(mnemonic: str) -> str:
    """fp32/fp64/fp16/int for a vector ALU op, by the first operand-type token of its name."""
    if mnemonic.startswith(("v_mov_", "v_readlane", "v_readfirstlane", "v_writelane", "v_accvgpr", "v_nop")):
        return "other"  # register moves: no arithmetic (as SASS MOV)
    if "_dpp" in mnemonic or mnemonic.startswith(("v_permlane", "v_mov_b32_dpp")):
        return "shuffle"
    if mnemonic.startswith("v_dot"):
        return "fp16" if re.search(r"_(f16|bf16)", mnemonic) else "int"
    found = _TYPE_TOKEN.findall(mnemonic)
    kind = found[0] if found else ""
    if kind == "f64":
        return "fp64"
    if kind == "f32":
        return "fp32"
    if kind in ("f16", "bf16"):
        return "fp16"
    return "int"


def classify_instruction(mnemonic: str) -> tuple[str | None, str | None]:
    """(shared class, AMD class) of one AMDGPU mnemonic such as 'v_fmac_f32_e32'; (None, None) for nops."""
    op = mnemonic.lower()
    if op in ("s_nop", "s_code_end") or op.startswith(("s_inst_prefetch", "s_clause", "s_delay_alu")):
        return None, None
    if op.startswith("s_waitcnt") or op.startswith("buffer_gl") or op.startswith("buffer_wbinvl"):
        return "barrier" if op.startswith("buffer_") else "other", "waitcnt"
    if op in ("s_barrier",) or op.startswith("s_barrier"):
        return "barrier", "salu"
    if op.startswith(("s_branch", "s_cbranch", "s_setpc", "s_swappc", "s_endpgm", "s_trap")):
        return "branch", "branch"
    if op.startswith(
        (
            "s_load",
            "s_buffer_load",
            "s_store",
            "s_buffer_store",
            "s_dcache",
            "s_memtime",
            "s_memrealtime",
            "s_scratch",
        )
    ):
        return "other", "smem"
    if op.startswith("s_"):
        return "other", "salu"
    if op.startswith("ds_"):
        if op.startswith(("ds_bpermute", "ds_permute", "ds_swizzle")):
            return "shuffle", "lds"
        if op.startswith(("ds_read", "ds_load")):
            return "shared_ld", "lds"
        if op.startswith(("ds_write", "ds_store")):
            return "shared_st", "lds"
        return "atomic", "lds"  # ds_add_u32, ds_max_rtn_f32, ...: LDS atomics
    if op.startswith(("global_", "buffer_", "flat_", "scratch_")):
        if "atomic" in op:
            return "atomic", "vmem"
        local = op.startswith("scratch_")
        if "_load" in op:
            return ("local_ld" if local else "global_ld"), "vmem"
        if "_store" in op:
            return ("local_st" if local else "global_st"), "vmem"
        return "other", "vmem"
    if op.startswith(("image_", "tbuffer_")):
        return "texture", "vmem"
    if op.startswith("v_"):
        if _MATRIX.match(op):
            return "tensor", "matrix"
        if op.startswith("v_dot"):
            return _vector_type_class(op), "matrix"
        if op.startswith("v_cvt"):
            return "convert", "valu"
        if _TRANSCENDENTAL.match(op):
            return "sfu", "valu"
        return _vector_type_class(op), "valu"
    return "other", None


@dataclass
class AmdFunction:
    """One function of the assembler text: its instructions (mnemonic, first operand) and labels."""

    name: str
    instructions: list[tuple[str, str]]
    labels: dict[str, int]  # label -> index of the next instruction


def split_functions(asm: str) -> list[AmdFunction]:
    """Functions of clang's AMDGPU assembler text (from ``name:`` to ``.Lfunc_endN:``)."""
    names = set(re.findall(r"^\s*\.type\s+([.\w$]+)\s*,\s*@function", asm, re.M))
    functions: list[AmdFunction] = []
    current: AmdFunction | None = None
    for raw in asm.splitlines():
        line = raw.split(";", 1)[0].rstrip()
        if not line.strip():
            continue
        label = _LABEL.match(line)
        if label:
            name = label.group(1)
            if name.startswith(".Lfunc_end"):
                if current is not None:
                    functions.append(current)
                current = None
            elif name in names:
                current = AmdFunction(name, [], {})
            elif current is not None:
                current.labels[name] = len(current.instructions)
            continue
        if current is None:
            continue
        text = line.strip()
        if text.startswith("."):
            continue  # assembler directive
        parts = text.split(None, 1)
        current.instructions.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return functions


@dataclass
class FunctionIsa:
    name: str
    instructions: dict[str, int]  # shared classes + 'total'
    loop_instructions: dict[str, int]
    loops: dict[str, int]
    amd: dict[str, int]  # AMD classes (valu, salu, vmem, smem, lds, matrix, branch, waitcnt)
    barriers: int


def analyze_function(fn: AmdFunction) -> FunctionIsa:
    """Instruction classes of one function; loops are backward branches to a label (body = target..branch)."""
    bodies: set[tuple[int, int]] = set()
    for idx, (mnemonic, operands) in enumerate(fn.instructions):
        match = _BRANCH_TARGET.match(f"{mnemonic} {operands}")
        if match and fn.labels.get(match.group(1), idx + 1) <= idx:
            bodies.add((fn.labels[match.group(1)], idx))
    depth = [0] * len(fn.instructions)
    for lo, hi in bodies:
        for k in range(lo, hi + 1):
            depth[k] += 1
    counts = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    in_loop = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    amd = dict.fromkeys(AMD_CLASSES, 0)
    barriers = 0
    for (mnemonic, _), d in zip(fn.instructions, depth, strict=True):
        shared, amd_class = classify_instruction(mnemonic)
        if shared is None:
            continue
        counts[shared] += 1
        if d:
            in_loop[shared] += 1
        if amd_class:
            amd[amd_class] += 1
        barriers += mnemonic == "s_barrier"
    nest = max((max(depth[lo : hi + 1]) for lo, hi in bodies), default=0)
    return FunctionIsa(
        fn.name,
        dict(counts, total=sum(counts.values())),
        dict(in_loop, total=sum(in_loop.values())),
        {"count": len(bodies), "max_depth": nest},
        amd,
        barriers,
    )


def kernel_metadata(asm: str) -> dict[str, dict[str, Any]]:
    """``amdhsa.kernels`` of the ``.amdgpu_metadata`` block, by kernel symbol name."""
    import yaml

    match = re.search(r"\.amdgpu_metadata\s*\n(.*?)\n\s*\.end_amdgpu_metadata", asm, re.S)
    if not match:
        return {}
    doc = yaml.safe_load(match.group(1)) or {}
    return {str(k.get(".name")): k for k in doc.get("amdhsa.kernels", []) or [] if isinstance(k, dict)}


# --------------------------------------------------------------------------- occupancy
# Per SIMD lane: VGPR file size and allocation granule, by ISA (AMD ISA manuals; LLVM AMDGPU
# IsaInfo). CDNA1 has a separate 256-entry AGPR file; CDNA2/3 share one 512-entry file between
# VGPRs and AGPRs; RDNA2 wave32 has 1024 VGPRs per lane per SIMD, RDNA3 1536.
@dataclass(frozen=True)
class IsaLimits:
    vgprs: int
    granule: int
    unified_agprs: bool
    simds_per_cu: int
    max_waves_per_simd: int


def isa_limits(arch: str) -> IsaLimits:
    name = arch.lower().split(":")[0]
    if name in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"):
        return IsaLimits(512, 8, True, 4, 8)
    if name.startswith("gfx11") or name.startswith("gfx12"):
        return IsaLimits(1536, 24, False, 2, 16)
    if name.startswith("gfx10"):
        return IsaLimits(1024, 16, False, 2, 20)
    return IsaLimits(256, 4, False, 4, 10)  # GCN5 / CDNA1 (gfx900, gfx906, gfx908)


def _align(value: int, granule: int) -> int:
    return max(granule, math.ceil(value / granule) * granule)


def waves_per_simd_by_registers(arch: str, vgprs: int, agprs: int = 0) -> int:
    """How many waves of this kernel fit one SIMD's register file (launch-independent)."""
    limits = isa_limits(arch)
    used = _align(vgprs, 4) + agprs if limits.unified_agprs else vgprs
    waves = limits.vgprs // _align(max(used, 1), limits.granule)
    if not limits.unified_agprs and agprs:
        waves = min(waves, 256 // _align(agprs, limits.granule))
    return max(min(waves, limits.max_waves_per_simd), 0)


def occupancy(
    arch: str, vgprs: int, agprs: int, lds_bytes: int, threads_per_block: int, spec: Any
) -> dict[str, Any]:
    """Resident waves per CU for a block size, from the ISA's register file and the catalog GPU's
    limits (``warp_size``, ``max_warps_per_sm``, ``max_ctas_per_sm``, ``max_smem_per_sm_kb``).

    Returns ``waves_per_cu``, ``occupancy`` (its share of ``max_warps_per_sm``) and what limits it.
    """
    wave = int(getattr(spec, "warp_size", 64) or 64)
    max_waves = int(getattr(spec, "max_warps_per_sm", 40) or 40)
    max_blocks = int(getattr(spec, "max_ctas_per_sm", 16) or 16)
    lds_per_cu = float(getattr(spec, "max_smem_per_sm_kb", 64) or 64) * 1024
    waves_per_block = max(1, math.ceil(max(threads_per_block, 1) / wave))
    by_regs_waves = isa_limits(arch).simds_per_cu * waves_per_simd_by_registers(arch, vgprs, agprs)
    limits = {
        "waves": max_waves // waves_per_block,
        "registers": by_regs_waves // waves_per_block,
        "lds": int(lds_per_cu // lds_bytes) if lds_bytes > 0 else max_blocks,
        "blocks": max_blocks,
    }
    limiter = min(limits, key=lambda k: limits[k])
    blocks = max(limits[limiter], 0)
    waves = min(blocks * waves_per_block, max_waves)
    return {
        "waves_per_cu": float(waves),
        "occupancy": waves / max_waves,
        "blocks_per_cu": float(blocks),
        "limiter": limiter,
    }


__all__ = [
    "AMD_CLASSES",
    "AmdFunction",
    "FunctionIsa",
    "IsaLimits",
    "analyze_function",
    "classify_instruction",
    "isa_limits",
    "kernel_metadata",
    "occupancy",
    "split_functions",
    "waves_per_simd_by_registers",
]
