"""Uniform branches: an ``if`` whose condition reads only kernel scalar arguments of known value.

Every thread of a launch takes the same side of ``if (mode == ADAM_MODE_0)`` when ``mode`` is a
kernel argument (gpuFLOPBench ``adam``), yet a static count counts both sides per thread. With the
argument's value given (``--arg``, a program's recorded arguments), ``fold_uniform_branches``
empties the side not taken, so the compile -- and the source's loop list -- hold only the code
that runs. A condition is folded only when every name in it is a given scalar argument the kernel
never assigns, a macro or an enumerator, and it names at least one such argument (the compiler
folds the rest itself).
"""

from __future__ import annotations

import ast
import re

from components.features.static.loops import (
    COMPARE,
    Unknown,
    _c_to_python,
    _close,
    _eval,
    _kernel_span,
    file_macros,
    kernel_parameters,
)
from components.features.static.source import code_mask

_KERNEL_RE = re.compile(r"__global__[^;{}]*?\b([A-Za-z_]\w*)\s*\(", re.S)
_IF_RE = re.compile(r"\bif\s*\(")
_NAME_RE = re.compile(r"\b[A-Za-z_]\w*\b")


def _truth(node: ast.AST, env: dict[str, float], macros: dict[str, str]) -> bool:
    """C truth of a condition: comparisons, ``&&``/``||``/``!`` over integer expressions."""
    if isinstance(node, ast.BoolOp):
        values = (_truth(v, env, macros) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _truth(node.operand, env, macros)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, macros, 0)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, env, macros, 0)
            if type(op) not in COMPARE or not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    return bool(_eval(node, env, macros, 0))


def _assigned(body: str, name: str) -> bool:
    return bool(re.search(rf"(\+\+|--)\s*{name}\b|\b{name}\s*(\+\+|--|(?:[-+*/%&|^]|<<|>>)?=(?!=))", body))


def _skip(text: str, mask: bytearray, j: int) -> int:
    while j < len(text) and (text[j].isspace() or not mask[j]):
        j += 1
    return j


def _statement(text: str, mask: bytearray, pos: int) -> tuple[int, int]:
    """(start, end inclusive) of the statement at ``pos``: a block, an if/else chain, a loop, or up to ';'."""
    j = _skip(text, mask, pos)
    if text.startswith("{", j):
        return j, _close(text, mask, j, "{", "}")
    head = _IF_RE.match(text, j) or re.compile(r"\b(?:for|while)\s*\(").match(text, j)
    if head:
        _, end = _statement(text, mask, _close(text, mask, head.end() - 1, "(", ")") + 1)
        k = _skip(text, mask, end + 1)
        if head.group(0).startswith("if") and re.match(r"else\b", text[k : k + 5]):
            end = _statement(text, mask, k + 4)[1]
        return j, end
    while j < len(text) and not (mask[j] and text[j] == ";"):
        j += 1
    return _skip(text, mask, pos), j


def _fold_kernel(
    text: str, name: str, args: dict[str, float], macros: dict[str, str]
) -> tuple[str, list[str]]:
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return text, []
    _, _, lo, hi = span
    scalars, _ = kernel_parameters(text, name)
    body = text[lo:hi]
    given = {p: args[p] for p in scalars if p in args and not _assigned(body, p)}
    if not given:
        return text, []
    folded: list[str] = []
    for m in reversed([m for m in _IF_RE.finditer(text, lo, hi) if mask[m.start()]]):
        mask = code_mask(text)
        paren = m.end() - 1
        close = _close(text, mask, paren, "(", ")")
        condition = text[paren + 1 : close]
        names = set(_NAME_RE.findall(_c_to_python(condition))) - {"and", "or", "not", "if", "else"}
        if not names & given.keys() or not names <= given.keys() | macros.keys():
            continue
        try:
            taken = _truth(ast.parse(_c_to_python(condition).strip(), mode="eval").body, dict(given), macros)
        except (
            Unknown,
            ValueError,
            SyntaxError,
            TypeError,
            OverflowError,
            ZeroDivisionError,
            RecursionError,
        ):
            continue
        then_start, then_end = _statement(text, mask, close + 1)
        k = _skip(text, mask, then_end + 1)
        if taken and re.match(r"else\b", text[k : k + 5]):
            text = text[:k] + text[_statement(text, mask, k + 4)[1] + 1 :]
        elif not taken:
            text = text[:then_start] + "{}" + text[then_end + 1 :]
        folded.append(" ".join(condition.split()) + (" (taken)" if taken else " (not taken)"))
    return text, folded[::-1]


def fold_uniform_branches(
    text: str, args: dict[str, float], defines: dict[str, str] | None = None
) -> tuple[str, list[str]]:
    """``text`` with the untaken side of every uniform branch on a given argument emptied (see the
    module docstring), and the folded conditions, each saying whether it is taken."""
    if not args:
        return text, []
    macros = file_macros(text, defines or {})
    folded: list[str] = []
    for name in dict.fromkeys(m.group(1) for m in _KERNEL_RE.finditer(text)):
        text, done = _fold_kernel(text, name, args, macros)
        folded += done
    return text, folded


__all__ = ["fold_uniform_branches"]
