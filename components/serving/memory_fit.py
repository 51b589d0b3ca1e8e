"""Does an op question fit the GPU? Its operands and result, against the GPU's memory.

Why: a GEMM with 960 GB of operands used to be answered for a 24 GB L4 as if it could run. The
check counts the tensors the kernel reads and writes (workspace and fragmentation excluded, so it
refuses only what cannot run at all) and compares them with ``memory_gb``, read as GiB: the
catalog's "80 GB" HBM and GDDR parts are binary-sized, and a lenient reading never refuses a
question that fits. Source and module questions are not checked here (their tensors are the
user's allocations, not a shape).
"""

from __future__ import annotations

from typing import Any

from components.serving.query import QueryError

GIB = float(1 << 30)
BINARY_ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "pow"})


def _numel(dims: list[int]) -> int:
    count = 1
    for d in dims:
        count *= int(d)
    return count


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", float(1 << 20)), ("KiB", 1024.0)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def op_tensors(family: str, op_name: str, shape: dict[str, int]) -> list[tuple[str, list[int]]]:
    """(name, dims) of each tensor an op reads or writes: operands first, the result last."""
    g = dict(shape)
    batch = [g["B"]] if "B" in g else []
    if family in ("gemm", "bmm", "linear"):
        weight = [g["K"], g["N"]] if family == "linear" else [*batch, g["K"], g["N"]]
        return [("A", [*batch, g["M"], g["K"]]), ("B", weight), ("C", [*batch, g["M"], g["N"]])]
    if family == "attention":
        q = [g["B"], g["S"], g["H"], g["D"]]
        kv = [g["B"], g["KV"], g["HKV"], g["D"]]
        return [("Q", q), ("K", kv), ("V", kv), ("O", q)]
    if family == "moe":
        local = max(1, g["E"] // g.get("ep", 1))
        return [
            ("x", [g["T"], g["H"]]),
            ("W", [local, 3, g["H"], max(1, g["I"] // g.get("tp", 1))]),
            ("out", [g["T"], g["H"]]),
        ]
    if family == "conv":
        import numpy as np

        from components.physics.conv import out_size

        side = int(out_size({k: np.array([float(v)]) for k, v in g.items()})[0])
        n = g.get("B", 1)
        return [
            ("x", [n, g["cin"], g["insize"], g["insize"]]),
            ("w", [g["cout"], g["cin"], g["ksize"], g["ksize"]]),
            ("y", [n, g["cout"], side, side]),
        ]
    if family == "allreduce":
        return []  # a message in bytes, not elements: never near a GPU's memory within the bounds
    dims = [g["N"]] if "N" in g else [g.get("B", 1), g["H"]]
    inputs = (
        [("x", dims), ("y", dims)]
        if family == "elementwise" and op_name in BINARY_ELEMENTWISE
        else [("x", dims)]
    )
    return [*inputs, ("out", dims)]


def check_memory_fit(question: Any) -> None:
    """A QueryError naming every tensor's size and the GPU's memory when an op question's operands
    and result do not fit in it; nothing for other questions or a spec without a memory size."""
    if question.kind != "op" or not question.shape or not getattr(question.device, "memory_gb", None):
        return
    from components.physics.dtypes import element_bytes

    element = float(element_bytes(question.dtype))
    tensors = [
        (name, dims, element * float(_numel(dims)))
        for name, dims in op_tensors(question.family, question.op_name, question.shape)
    ]
    total = sum(nbytes for *_, nbytes in tensors)
    memory = float(question.device.memory_gb) * GIB
    if total <= memory:
        return
    parts = " + ".join(
        f"{name}[{'x'.join(str(d) for d in dims)}] {_size(nbytes)}" for name, dims, nbytes in tensors
    )
    raise QueryError(
        f"question {question.index}.shape: {question.op} in {question.dtype} does not fit the "
        f"{question.device.name}'s memory: {parts} = {_size(total)}, over its "
        f"{float(question.device.memory_gb):g} GiB; use a smaller shape or a GPU with more memory"
    )
