"""Compare-and-swap loops the compiler makes for an atomic: how often they run, from the address's contention.

An ``atomicAdd`` on a ``double`` in shared memory (and other atomics without a native instruction) compiles
to a loop: load, add, ``ATOMS.CAS``, retry while another thread changed the word. The loop has no source
loop, so its trips are not in the source; they are in who else writes the same address. Of ``c`` threads
of a block that update one address at once, one succeeds per round: the k-th retries k times, ``(c + 1) /
2`` rounds on average per thread (gpuFLOPBench ``atomicPerf``: a block of 256 on one word runs ~76 rounds
per thread, on 256 distinct words one). ``c`` comes from the address: one the threads share (``&lsum``,
``smem + offset`` with ``offset`` the same for all) has the whole block contending; one indexed by the
thread (``smem + threadIdx.x``) none; one indexed by a thread value masked to ``C`` words (``i & 0x1F``,
``i % 32``) the block's threads over ``C``.
"""

from __future__ import annotations

import re

from components.features.static import loops
from components.features.static.loops import Known, Unknown, evaluate, file_macros
from components.features.static.source import code_mask
from components.features.static.templates import split_args

_ATOMIC_RE = re.compile(r"\batomic(?:Add|Sub|Max|Min|Exch|And|Or|Xor|Inc|Dec)(?:_block|_system)?\s*\(")
_FOR_INIT_RE = re.compile(r"\bfor\s*\(\s*(?:[\w:\s]+\s)?([A-Za-z_]\w*)\s*=\s*([^;]+);")
_MASK_RE = re.compile(r"(?:&|%)\s*\(?\s*([^()&%]+?)\s*\)?\s*$")


def _thread_names(body: str) -> set[str]:
    """``threadIdx`` and the locals (loop variables included) whose value is computed from it."""
    names = {"threadIdx"}
    decls = [(m.group(1), m.group(2)) for m in loops._LOCAL_RE.finditer(body)]
    decls += [(m.group(1), m.group(2)) for m in _FOR_INIT_RE.finditer(body)]
    changed = True
    while changed:
        changed = False
        for name, expr in decls:
            if name not in names and set(re.findall(r"[A-Za-z_]\w*", expr)) & names:
                names.add(name)
                changed = True
    return names


def _index(address: str) -> str:
    """The part of an atomic's address that varies: ``i & 31`` of ``smem + (i & 31)`` or ``&smem[i & 31]``;
    empty for a plain variable (``&lsum``, ``&sums.x``)."""
    address = " ".join(address.split())
    m = re.fullmatch(r"&?\s*\(?\s*[A-Za-z_][\w.]*\s*\[(.+)\]\s*\)?", address)
    if m:
        return m.group(1)
    m = re.fullmatch(r"\(?\s*[A-Za-z_][\w.]*\s*\+\s*(.+?)\)?", address)
    if m:
        return m.group(1)
    return ""


def atomic_contention(text: str, name: str, known: Known) -> list[float]:
    """Threads of a block that update each atomic's address at once, per atomic call of kernel ``name`` in
    source order (module docstring); empty when the kernel is not found or calls no atomic."""
    mask = code_mask(text)
    span = loops._kernel_span(text, mask, name)
    if span is None:
        return []
    _, _, lo, hi = span
    body = text[lo + 1 : hi]
    threads = float(known.block[0] * known.block[1] * known.block[2])
    by_thread = _thread_names(body)
    macros = file_macros(text, known.defines)
    out: list[float] = []
    for m in _ATOMIC_RE.finditer(text, lo + 1, hi):
        if not mask[m.start()]:
            continue
        args = split_args(text[m.end() : loops._close(text, mask, m.end() - 1, "(", ")")])
        index = _index(args[0]) if args else ""
        if not set(re.findall(r"[A-Za-z_]\w*", index)) & by_thread:
            out.append(threads)  # every thread of the block on one address
            continue
        masked = _MASK_RE.search(index)
        words = None
        if masked:
            try:
                value = evaluate(masked.group(1), {**known.args}, macros)
                words = value + 1 if "&" in index[masked.start() : masked.start() + 1] else value
            except (Unknown, ValueError, ArithmeticError, RecursionError):
                words = None
        out.append(max(1.0, threads / words) if words and words > 0 else 1.0)
    return out


def cas_retries(contention: list[float], loops: int) -> list[float] | None:
    """Mean rounds per thread of each of ``loops`` compiled CAS loops: the atomics' in order when their
    numbers agree, else their mean for every loop; None when the kernel shows no atomic call."""
    rounds = [(c + 1.0) / 2.0 for c in contention]
    if not rounds:
        return None
    if len(rounds) == loops:
        return rounds
    return [sum(rounds) / len(rounds)] * loops


__all__ = ["atomic_contention", "cas_retries"]
