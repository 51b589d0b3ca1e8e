"""Kernel names without a demangler: short names from Itanium-mangled symbols, template instances,
and the ``<source_id>::<short name>`` key that joins static features with measured rows."""

from __future__ import annotations

import re


def short_kernel_name(symbol: str) -> str:
    """Unqualified function name from an Itanium-mangled (or plain/demangled) symbol.

    '_Z4kernPf' -> 'kern'; '_ZN2ns4kernIfEEvPT_' -> 'kern'; 'void k<float>(float *)' -> 'k'.
    Enough for kernels (no operators, constructors or local entities).
    """
    if not symbol.startswith("_Z"):
        head = symbol.split("(")[0]
        head = re.sub(r"<.*>", "", head).strip()
        return head.split("::")[-1].split()[-1] if head else symbol
    s = symbol[2:]
    i = 1 if s.startswith("L") else 0
    nested = i < len(s) and s[i] == "N"
    if nested:
        i += 1
        while i < len(s) and s[i] in "rVK":
            i += 1
    last = ""
    while i < len(s):
        if s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            last = s[j : j + n]
            i = j + n
            if not nested:
                break
        elif s[i] == "I":  # template args: skip to the matching E
            depth, i = 1, i + 1
            while i < len(s) and depth:
                if s[i] == "L":  # literal L<type><value>E: its digits are a value, not a length
                    i = s.find("E", i) + 1 or len(s)
                    continue
                if s[i].isdigit():
                    j = i
                    while j < len(s) and s[j].isdigit():
                        j += 1
                    i = j + int(s[i:j])
                    continue
                depth += s[i] in "INX"
                depth -= s[i] == "E"
                i += 1
            if not nested:
                break
        elif s[i] == "S":  # substitution (S_, S0_, St...)
            i += (
                2
                if i + 1 < len(s) and s[i + 1] in "tabsio"
                else s.find("_", i) + 1 - i
                if "_" in s[i:]
                else 1
            )
        elif s[i] == "E":
            break
        else:
            i += 1
    return last or symbol


def kernel_instance(demangled: str) -> str:
    """'void hmax<__half2>(const T1 *, ...)' -> 'hmax<__half2>' (whitespace-normalised)."""
    head = demangled.split("(")[0].strip()
    head = re.sub(r"^(?:[\w:]+\s+)+(?=[\w:]+\s*(<|$))", "", head)  # drop return type
    head = (
        head.split("::")[-1]
        if "<" not in head
        else head[head.rfind("::", 0, head.find("<")) + 2 if "::" in head[: head.find("<")] else 0 :]
    )
    return re.sub(r"\s+", "", head)


def kernel_key(source_id: str, kernel_name: str) -> str:
    """Join key '<source_id>::<short kernel name>' (mangled, demangled or short names accepted)."""
    return f"{source_id}::{short_kernel_name(kernel_name)}"


__all__ = ["kernel_instance", "kernel_key", "short_kernel_name"]
