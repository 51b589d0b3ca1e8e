"""Compile defaults a program's own files imply: ``-D``/``-I`` from its build files, and the macro an
``#error`` guard demands.

HeCBench programs are built by a Makefile that passes ``-DFLOAT``, ``-I../include`` and the like;
compiled bare, such sources stop at ``#error Must define one of FLOAT, DOUBLE`` or miss a header.
The gpuFLOPBench bundle ships no build files (its MANIFEST lists only sources), so two sources of
defaults are used, in this order (an explicit ``-D``/``-I`` always wins):
1. a ``Makefile``/``makefile``/``GNUmakefile``/``CMakeLists.txt`` beside the file or in its parent
   folder: every ``-DNAME[=VALUE]`` and ``-I DIR`` token (CMake ``add_definitions``/
   ``target_compile_definitions``/``include_directories`` too), ``$(VAR)`` references left out;
2. ``#if defined(A) ... #elif defined(B) ... #else #error`` chains where none of A, B is defined:
   the first alternative (``-DA``) -- the choice the program's author listed first.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

BUILD_FILES: tuple[str, ...] = ("Makefile", "makefile", "GNUmakefile", "CMakeLists.txt")
_MACRO = re.compile(r"^[A-Za-z_]\w*$")


@dataclass
class BuildDefaults:
    """Macros and include folders a source's build files (or its own guards) imply."""

    defines: dict[str, str] = field(default_factory=dict)
    include_dirs: list[Path] = field(default_factory=list)
    origin: list[str] = field(default_factory=list)  # the build files they came from


def _tokens(text: str) -> list[str]:
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"#.*", "", text)  # make/cmake comments
    out: list[str] = []
    for line in text.splitlines():
        try:
            out += shlex.split(line, posix=True)
        except ValueError:
            out += line.split()
    return out


def parse_build_file(path: Path) -> BuildDefaults:
    """``-D``/``-I`` flags of one Makefile or CMakeLists.txt (relative folders resolved against it)."""
    found = BuildDefaults(origin=[str(path)])
    text = path.read_text(errors="replace")
    if path.name == "CMakeLists.txt":
        for body in re.findall(
            r"(?:add_definitions|add_compile_definitions|target_compile_definitions)\s*\(([^)]*)\)",
            text,
            re.I,
        ):
            for tok in body.split():
                tok = tok.strip('"')
                if tok.startswith("-D"):
                    tok = tok[2:]
                name, _, value = tok.partition("=")
                if _MACRO.match(name) and name.upper() not in ("PRIVATE", "PUBLIC", "INTERFACE"):
                    found.defines.setdefault(name, value)
        for body in re.findall(r"include_directories\s*\(([^)]*)\)", text, re.I):
            for tok in body.split():
                folder = (path.parent / tok.strip('"')).resolve()
                if "$" not in tok and folder.is_dir() and folder not in found.include_dirs:
                    found.include_dirs.append(folder)
        return found
    tokens = _tokens(text)
    for i, tok in enumerate(tokens):
        if "$" in tok:
            continue
        if tok.startswith("-D") and len(tok) > 2:
            name, _, value = tok[2:].partition("=")
            if _MACRO.match(name):
                found.defines.setdefault(name, value)
        elif tok.startswith("-I"):
            raw = tok[2:] or (tokens[i + 1] if i + 1 < len(tokens) else "")
            folder = (path.parent / raw).resolve() if raw and "$" not in raw else None
            if folder is not None and folder.is_dir() and folder not in found.include_dirs:
                found.include_dirs.append(folder)
    return found


def build_file_defaults(source: Path) -> BuildDefaults:
    """Defaults from the build files beside ``source`` or one folder up (nearest first)."""
    merged = BuildDefaults()
    for folder in (source.parent, source.parent.parent):
        for name in BUILD_FILES:
            candidate = folder / name
            if candidate.is_file():
                part = parse_build_file(candidate)
                for key, value in part.defines.items():
                    merged.defines.setdefault(key, value)
                merged.include_dirs += [d for d in part.include_dirs if d not in merged.include_dirs]
                merged.origin += part.origin
    return merged


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|error|define)\b(.*)$", re.M)


def guard_defaults(text: str, given: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(macros to define, macros the source demands but whose value cannot be guessed).

    ``#if defined(A) / #elif defined(B) / #else #error``: with neither defined, define A.
    ``#ifndef M / #error``: M needs a value only the user knows -- returned in the second list.
    """
    defined = set(given) | set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", text, re.M))
    chains: list[list[str]] = []  # stack of open #if chains: the macros each branch tests
    kinds: list[str] = []
    in_else: list[bool] = []  # per open chain: past its #else
    chosen: dict[str, str] = {}
    required: list[str] = []
    for match in _DIRECTIVE.finditer(text):
        word, rest = match.group(1), match.group(2)
        if word in ("if", "ifdef", "ifndef"):
            names = (
                [rest.split()[0]]
                if word != "if" and rest.split()
                else re.findall(r"defined\s*\(?\s*([A-Za-z_]\w*)", rest)
            )
            chains.append(names)
            kinds.append(word)
            in_else.append(False)
        elif word == "elif" and chains:
            chains[-1] += re.findall(r"defined\s*\(?\s*([A-Za-z_]\w*)", rest)
        elif word == "else" and in_else:
            in_else[-1] = True
        elif word == "error" and chains:
            names = chains[-1]
            if kinds[-1] == "ifndef" and not in_else[-1] and names and names[0] not in defined:
                required.append(names[0])
            elif in_else[-1] and names and not any(n in defined for n in names):
                chosen.setdefault(names[0], "")
                defined.add(names[0])
        elif word == "endif" and chains:
            chains.pop()
            kinds.pop()
            in_else.pop()
    return chosen, sorted(set(required) - defined)


__all__ = ["BuildDefaults", "build_file_defaults", "guard_defaults", "parse_build_file"]
