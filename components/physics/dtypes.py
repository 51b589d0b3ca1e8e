"""The one dtype table: canonical spellings and their aliases, bytes per element, the pipe each dtype's math
runs on, what it falls back to, and the bytes a stored weight or KV element takes.

Two questions, two functions (they were two functions both called ``canonical_dtype``):
``canonical_dtype`` -- which kernelcast dtype a spelling means (``bfloat16`` -> ``bf16``, ``fp4`` ->
``nvfp4``, ``w8a8`` -> ``int8``); ``precision_of`` -- which catalog precision its math runs at (``nvfp4``
-> ``fp4``, ``fp8_block`` -> ``fp8``; None for "mixed"/"unknown" and integer tensors, which no pipe judges).
"""

from __future__ import annotations

import re

from components.physics.errors import PhysicsError

__all__ = [
    "ATTENTION_DTYPES",
    "DTYPES",
    "ELEM_BYTES",
    "FALLBACK",
    "GEMM_DTYPES",
    "GEMM_DTYPE_TRAITS",
    "GEMM_ONLY_DTYPES",
    "KV_DTYPES",
    "STORE_BYTES",
    "canonical_dtype",
    "element_bytes",
    "precision_of",
    "tensor_precisions",
    "traced_dtype",
]

# dtype -> (activation bytes, weight bytes, output bytes, catalog precision of the math, tensor?)
# tensor: True = the tensor/matrix pipe only; None = the best the GPU has for that precision.
# int8 is W8A8 (SmoothQuant) on the int8 tensor pipe; *_wo are weight-only kernels: weights stored at 1 or
# 0.5 byte and de-quantised on the fly, the math in bf16.
GEMM_DTYPE_TRAITS: dict[str, tuple[float, float, float, str, bool | None]] = {
    "fp64": (8.0, 8.0, 8.0, "fp64", None),
    # None: AMD CDNA's matrix cores run full-precision FP32 (v_mfma_f32_*f32; rocBLAS/hipBLASLt SGEMM use
    # them: NeuSight's MI100 linear rows reach 34.5 TFLOP/s, 77% of them above the 23.1 TFLOP/s vector
    # peak); NVIDIA has no FP32 tensor pipe (TF32 is another precision, off by default for PyTorch's
    # matmul), so its catalog entries have no ``fp32_tensor`` and fp32 GEMMs stay on the FMA pipe.
    "fp32": (4.0, 4.0, 4.0, "fp32", None),
    "tf32": (4.0, 4.0, 4.0, "tf32", True),
    "fp16": (2.0, 2.0, 2.0, "fp16", None),
    "bf16": (2.0, 2.0, 2.0, "bf16", None),
    "fp8": (1.0, 1.0, 2.0, "fp8", True),
    "fp8_block": (1.0, 1.0, 2.0, "fp8", True),
    "nvfp4": (0.5, 0.5, 2.0, "fp4", True),
    "int8": (1.0, 1.0, 2.0, "int8", None),
    "int8_wo": (2.0, 1.0, 2.0, "bf16", None),
    "int4_wo": (2.0, 0.5, 2.0, "bf16", None),
}
# The dtypes a question may name (canonical spellings), in the order error messages list them.
DTYPES: tuple[str, ...] = tuple(GEMM_DTYPE_TRAITS)
GEMM_DTYPES: tuple[str, ...] = DTYPES
ATTENTION_DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8")
KV_DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8", "int8", "nvfp4")
# Quantisation formats of weights, not of activations: only GEMM-like ops (and MoE) take them.
GEMM_ONLY_DTYPES: frozenset[str] = frozenset({"fp8_block", "nvfp4", "int8_wo", "int4_wo"})
# A dtype whose pipe the GPU lacks runs its math as the next dtype here, at that pipe's rate (an emulated
# kernel is never faster than the pipe it runs on), while its DRAM bytes stay the asked dtype's: the operands
# are read as stored and widened in registers (``roofline.roofline``).
# bf16 -> fp32, not fp16: there is no bf16 tensor-core instruction before sm_80 (Volta's HMMA and Turing's
# take fp16 only), and a bf16 value cannot be narrowed to fp16 without losing its range, so cuBLAS and
# PyTorch run a bf16 GEMM on V100/T4 as fp32 FMA (SIMT) math on up-converted inputs: measured on a V100,
# cuBLAS bf16 reaches ~9.6 TFLOP/s against fp32's 14 and fp16's ~95 (lablup/mlxcel#1654); on a T4, XLA's
# bf16 matmul runs below its fp32 one (openxla/xla#12429). None of our datasets has a bf16 row on a GPU
# without bf16 tensor cores (NeuSight is fp32, KernelBench fp32), so the kernels' behaviour settles it.
FALLBACK: dict[str, str] = {
    "nvfp4": "fp8",
    "fp8": "bf16",
    "fp8_block": "bf16",
    "int8": "fp16",
    "tf32": "fp32",
    "bf16": "fp32",
    "fp16": "fp32",
    "int8_wo": "int8_wo_fp16",
    "int4_wo": "int4_wo_fp16",
    "fp64": "fp32",
}
# Weight-only kernels on a GPU without bf16 run their math in fp16 (same bytes).
GEMM_DTYPE_TRAITS["int8_wo_fp16"] = (2.0, 1.0, 2.0, "fp16", None)
GEMM_DTYPE_TRAITS["int4_wo_fp16"] = (2.0, 0.5, 2.0, "fp16", None)
FALLBACK["int8_wo_fp16"] = "fp32"
FALLBACK["int4_wo_fp16"] = "fp32"

# Bytes per activation element of each dtype (weight-only formats: their bf16 activations). "mixed" and
# "unknown" rows take fp32's 4 bytes (``element_bytes``' default).
ELEM_BYTES: dict[str, float] = {name: traits[0] for name, traits in GEMM_DTYPE_TRAITS.items()}
DEFAULT_ELEM_BYTES: float = 4.0
# Bytes per stored element of a weight / KV dtype (block-scaled formats carry their scales: fp8_block one fp32
# scale per 128 elements, int4 one bf16 scale per 64... as the checkpoints store them).
STORE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0 + 1 / 128,
    "int8": 1.0,
    "int8_wo": 1.0,
    "int4_wo": 0.5 + 1 / 64,
    "nvfp4": 0.5 + 1 / 16,
}

# Spellings (torch, numpy, HF configs, serving frameworks, the datasets; lower case, without the separators
# " _-." and a "torch." prefix) -> canonical dtype; None = a real dtype no pipe judges (mixed, unknown).
_ALIASES: dict[str, str | None] = {
    **{name.replace("_", ""): name for name in DTYPES},
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "fp8e4m3": "fp8",
    "fp8e5m2": "fp8",
    "float8e4m3fn": "fp8",
    "float8e5m2": "fp8",
    "float8e4m3fnuz": "fp8",
    "float8e5m2fnuz": "fp8",
    "fp4": "nvfp4",
    "mxfp4": "nvfp4",
    "float4": "nvfp4",
    "float4e2m1fn": "nvfp4",
    "i8": "int8",
    "uint8": "int8",
    "w8a8": "int8",
    "int4": "int4_wo",
    "w4a16": "int4_wo",
    "w8a16": "int8_wo",
    "mixed": None,
    "unknown": None,
    "": None,
}
_INTEGER = re.compile(r"u?int(16|32|64)|bool")
# Traced tensors (aten dtype names): an integer tensor counts as the float type of its width, so its bytes
# come out right (its math is never on a tensor pipe).
_TRACED_WIDTH: dict[str, str] = {
    "int64": "fp64",
    "int32": "fp32",
    "int16": "fp16",
    "bool": "int8",
    "complex64": "fp64",
}


def _key(text: object) -> str:
    return re.sub(r"[\s_\-.]", "", str(text).strip().lower().removeprefix("torch."))


def canonical_dtype(text: object) -> str:
    """The kernelcast dtype a spelling means (``bfloat16`` -> ``bf16``); a PhysicsError naming the choices."""
    name = _ALIASES.get(_key(text))
    if name is None:
        raise PhysicsError(f"dtype {text!r}: not an accepted dtype; choose one of {', '.join(DTYPES)}")
    return name


def precision_of(text: object) -> str | None:
    """The catalog precision a dtype's math runs at (``bfloat16`` -> ``bf16``, ``nvfp4`` -> ``fp4``); None
    when it cannot be judged ("mixed", "unknown", integer types but int8); PhysicsError for a non-dtype."""
    if text is None:
        return None
    key = _key(text)
    if key in _ALIASES:
        name = _ALIASES[key]
        return None if name is None else GEMM_DTYPE_TRAITS[name][3]
    if _INTEGER.fullmatch(key):
        return None
    raise PhysicsError(
        f"dtype {text!r}: not a known data type (e.g. fp32, fp16, bf16, fp8, tf32, fp64, int8)"
    )


def traced_dtype(aten_dtype: str) -> str:
    """The canonical dtype of a traced tensor's aten dtype name (integers as the float of their width)."""
    if aten_dtype in _TRACED_WIDTH:
        return _TRACED_WIDTH[aten_dtype]
    name = _ALIASES.get(_key(aten_dtype))
    return name if name is not None else "fp32"


def tensor_precisions(dtype: str) -> tuple[str, ...]:
    """The catalog precisions whose tensor pipe a ``dtype`` GEMM runs on, in the order tried (its own, then
    along ``FALLBACK``) before it lands on the vector (FMA) pipe: ``nvfp4`` -> fp4, fp8, bf16; ``bf16`` ->
    bf16 (then fp32 FMA); ``fp32`` -> fp32 (AMD's FP32 matrix cores; NVIDIA has none: the FMA pipe). The
    features' tensor peak reads it; ``physics.pipe_for`` walks the same ``FALLBACK``."""
    chain: list[str] = []
    current: str | None = dtype
    while current in GEMM_DTYPE_TRAITS:
        _, _, _, precision, tensor = GEMM_DTYPE_TRAITS[current]
        # vector-only math, or another dtype falling back to fp32 math (fp64 without an fp64 pipe, bf16
        # without bf16 tensor cores): the FMA pipe
        if tensor is False or (precision == "fp32" and current != dtype):
            break
        chain.append(precision)
        current = FALLBACK.get(current)
    return tuple(chain)


def element_bytes(dtype: object) -> float:
    """Bytes per activation element of a canonical dtype (fp32's 4 for "mixed"/"unknown")."""
    return ELEM_BYTES.get(str(dtype), DEFAULT_ELEM_BYTES)


def gemm_bytes(dtype: str) -> tuple[float, float, float]:
    """(activation, weight, output) bytes per element of a GEMM-pipe dtype; PhysicsError for another."""
    if dtype not in GEMM_DTYPE_TRAITS:
        raise PhysicsError(f"dtype {dtype!r}: choose one of {', '.join(GEMM_DTYPES)}")
    a, w, o, _, _ = GEMM_DTYPE_TRAITS[dtype]
    return a, w, o
