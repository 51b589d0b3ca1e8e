"""Many cubins through one ``nvdisasm`` process: their code merged into one ELF, the output split back.

nvdisasm spends ~0.4 s of CPU setting up its tables on every call (perf: inside the stripped binary, after it
has read its input), whatever the cubin's size; the static stage's sweep disassembles ~350 small cubins, so
most of that CPU was set-up. :func:`merge_cubins` writes one ELF with several cubins' functions, which
nvdisasm disassembles for one set-up; :func:`disassemble_many` splits its JSON back per cubin.

Kept from each cubin: every section but its string and symbol tables (merged), its notes and ``.nv.compat``,
``.nv.callgraph`` and ``.debug_frame`` (not read to disassemble); symbol indices are renumbered in the symbol
table, the relocations and the ``.nv.info`` attributes that name a symbol (the global ``.nv.info`` of all
cubins becomes one). nvdisasm renames a repeated symbol, so a batch never holds two cubins with a function
section (named by its function) or a global symbol of the same name, nor cubins of different architectures;
a local symbol that repeats (the compiler's ``$__internal_0_$..._slowpath`` helpers) is renamed in the ELF
and its name restored in the operands. A cubin whose ``.nv.info`` holds an attribute not known here, or a
batch that nvdisasm rejects, is disassembled on its own. Equality with one call per cubin:
``tests/unit/test_static_nvdisasm_batch.py``, ``benchmarks/static_nvdisasm_batches.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_SYMTAB, _STRTAB, _RELA, _NOBITS, _REL, _NOTE = 2, 3, 4, 8, 9, 7
_NV_INFO_TYPE = 0x70000000
_INFO_LINK = 0x40  # SHF_INFO_LINK: sh_info is a section index
_DROPPED = {b".nv.compat", b".nv.callgraph", b".debug_frame", b".rela.debug_frame", b".rel.debug_frame"}
# Module-wide data sections (device globals, their initial values, the constant banks of addresses and user
# constants) that several cubins of a batch may each hold: nvdisasm shows their contents by offset and their
# symbols by name, so a repeated section name changes no function's disassembly (checked on the stage's
# cubins, benchmarks/static_nvdisasm_batches.py).
_REPEATABLE = {b".nv.global", b".nv.global.init", b".nv.constant3", b".nv.constant4"}
_REPEATABLE |= {b".rela" + n for n in _REPEATABLE} | {b".rel" + n for n in _REPEATABLE}
# .nv.info attributes (EIFMT_SVAL) whose payload starts with a symbol index (REGCOUNT, FRAME_SIZE,
# MIN_STACK_SIZE, MAX_STACK_SIZE, PARAM_CBANK), and EXTERNS, a list of symbol indices.
_SYMBOL_FIRST = {0x2F, 0x11, 0x12, 0x23, 0x0A}
_SYMBOL_LIST = 0x0F
# Attributes seen in the static stage's cubins (ptxas 13) that name no symbol; any other: not batched.
_NO_SYMBOL = {0x04, 0x05, 0x17, 0x19, 0x1B, 0x1C, 0x1D, 0x1E, 0x28, 0x29, 0x31, 0x34, 0x36, 0x37, 0x4C, 0x50}
_NO_SYMBOL |= {0x5F, 0x66, 0x6B, 0x6D}
RENAME_MARK = "__kcbatch"
MAX_BATCH = 48


@dataclass
class _Cubin:
    data: bytes
    header: tuple
    sections: list[list[int]]  # section headers as unpacked fields
    names: list[bytes]
    symbols: list[tuple[bytes, int, int, int, int, int]]  # (name, info, other, shndx, value, size)
    symtab: int

    def body(self, i: int) -> bytes:
        s = self.sections[i]
        return b"" if s[1] == _NOBITS else self.data[s[4] : s[4] + s[5]]

    def kept(self) -> list[int]:
        return [
            i
            for i, (s, n) in enumerate(zip(self.sections, self.names, strict=True))
            if i and s[1] not in (_SYMTAB, _STRTAB, _NOTE) and n not in _DROPPED and n != b".nv.info"
        ]


def _cstr(data: bytes, at: int) -> bytes:
    return data[at : data.index(b"\0", at)]


def parse_cubin(data: bytes) -> _Cubin:
    header = _EHDR.unpack_from(data, 0)
    shoff, shnum, shstrndx = header[6], header[12], header[13]
    sections = [list(_SHDR.unpack_from(data, shoff + i * _SHDR.size)) for i in range(shnum)]
    names = [_cstr(data, sections[shstrndx][4] + s[0]) for s in sections]
    symtab = next(i for i, s in enumerate(sections) if s[1] == _SYMTAB)
    sym, strtab = sections[symtab], sections[sections[symtab][6]]
    symbols = []
    for j in range(sym[5] // _SYM.size):
        name, info, other, shndx, value, size = _SYM.unpack_from(data, sym[4] + j * _SYM.size)
        symbols.append((_cstr(data, strtab[4] + name), info, other, shndx, value, size))
    return _Cubin(data, header, sections, names, symbols, symtab)


def _info_attributes(body: bytes) -> list[tuple[int, int, int]]:
    """(format, attribute, payload offset) of each ``.nv.info`` entry; payload size at offset - 2."""
    out, at = [], 0
    while at + 4 <= len(body):
        fmt, attr, size = struct.unpack_from("<BBH", body, at)
        out.append((fmt, attr, at + 4))
        at += 4 + (size if fmt == 4 else 0)
    return out


def batchable(cubin: _Cubin) -> bool:
    """Whether every ``.nv.info`` attribute of the cubin is one whose symbol indices are known here."""
    for i, name in enumerate(cubin.names):
        if name == b".nv.info" or name.startswith(b".nv.info."):
            for fmt, attr, _ in _info_attributes(cubin.body(i)):
                if fmt == 4 and attr not in _SYMBOL_FIRST | {_SYMBOL_LIST} | _NO_SYMBOL:
                    return False
    return True


def _renumber_info(body: bytes, index: Callable[[int], int]) -> bytes:
    out = bytearray(body)
    for fmt, attr, at in _info_attributes(body):
        if fmt != 4:
            continue
        size = struct.unpack_from("<H", body, at - 2)[0]
        slots = [at] if attr in _SYMBOL_FIRST else range(at, at + size, 4) if attr == _SYMBOL_LIST else []
        for slot in slots:
            struct.pack_into("<I", out, slot, index(struct.unpack_from("<I", body, slot)[0]))
    return bytes(out)


def _shared_empty(cubin: _Cubin, i: int) -> bool:
    """The empty ``.nv.shared.reserved.N`` every cubin has: one copy serves them all."""
    s = cubin.sections[i]
    return s[1] == _NOBITS and s[5] == 0 and cubin.names[i].startswith(b".nv.shared.reserved.")


def claims(cubin: _Cubin) -> tuple[tuple, set[bytes]]:
    """(what a batch's cubins must share: ELF class, machine, flags; the names no two of them may hold)."""
    kept = [i for i in cubin.kept() if not _shared_empty(cubin, i)]
    names = {cubin.names[i] for i in kept} - _REPEATABLE
    # global symbols defined in a section of their own cubin (not the shared reserved one)
    names |= {b"sym:" + s[0] for s in cubin.symbols[1:] if s[1] >> 4 and s[3] in kept and (s[1] & 0xF) != 3}
    return (cubin.header[0], cubin.header[2], cubin.header[7]), names


def plan_batches(cubins: Sequence[_Cubin], most: int = MAX_BATCH) -> list[list[int]]:
    """Cubin positions grouped first-fit into batches that share no claimed name."""
    batches: list[tuple[tuple, set[bytes], list[int]]] = []
    alone: list[list[int]] = []
    for k, cubin in enumerate(cubins):
        if not batchable(cubin):
            alone.append([k])
            continue
        kind, names = claims(cubin)
        for b_kind, b_names, members in batches:
            if b_kind == kind and len(members) < most and not names & b_names:
                b_names |= names
                members.append(k)
                break
        else:
            batches.append((kind, set(names), [k]))
    return [members for _, _, members in batches] + alone


def merge_cubins(cubins: Sequence[_Cubin]) -> tuple[bytes, list[dict[str, str]]]:
    """(one ELF with every cubin's functions, per cubin the local symbols renamed in it: new name -> old)."""
    section_of: list[dict[int, int]] = []
    shared: dict[bytes, int] = {}
    rows: list[tuple[int, int]] = []  # (cubin, section) in output order, after the 5 fixed sections
    for k, cubin in enumerate(cubins):
        where: dict[int, int] = {}
        for i in cubin.kept():
            if _shared_empty(cubin, i) and cubin.names[i] in shared:
                where[i] = shared[cubin.names[i]]
                continue
            where[i] = 5 + len(rows)
            if _shared_empty(cubin, i):
                shared[cubin.names[i]] = where[i]
            rows.append((k, i))
        section_of.append(where)
    symbol_of, table, renamed = _merge_symbols(cubins, section_of)
    strtab, symtab = bytearray(b"\0"), bytearray(_SYM.size)
    for name, info, other, shndx, value, size in table:
        symtab += _SYM.pack(len(strtab), info, other, shndx, value, size)
        strtab += name + b"\0"
    first_global = next((n for n, s in enumerate(table) if s[1] >> 4), len(table)) + 1
    global_info = b"".join(
        _renumber_info(c.body(i), lambda j, k=k: symbol_of[k][j])
        for k, c in enumerate(cubins)
        for i, n in enumerate(c.names)
        if n == b".nv.info"
    )
    sections: list[tuple[bytes, tuple, bytes]] = [
        (b".strtab", (_STRTAB, 0, 0, 0, 1, 0), bytes(strtab)),
        (b".symtab", (_SYMTAB, 0, 2, first_global, 8, _SYM.size), bytes(symtab)),
        (b".nv.info", (_NV_INFO_TYPE, 0, 3, 0, 4, 0), global_info),
    ]
    for k, i in rows:
        sections.append(_moved_section(cubins[k], i, section_of[k], symbol_of[k]))
    return _write_elf(cubins[0].header, sections), renamed


def _merge_symbols(
    cubins: Sequence[_Cubin], section_of: list[dict[int, int]]
) -> tuple[list[dict[int, int]], list[tuple], list[dict[str, str]]]:
    """(per cubin: old symbol index -> new, the merged table without its null entry, renamed locals)."""
    entries: list[tuple[int, int, tuple]] = []
    for k, cubin in enumerate(cubins):
        for j, (name, info, other, shndx, value, size) in enumerate(cubin.symbols[1:], start=1):
            moved = shndx if shndx == 0 or shndx >= 0xFF00 else section_of[k].get(shndx, 0)
            entries.append((k, j, (name, info, other, moved, value, size)))
    entries.sort(key=lambda e: bool(e[2][1] >> 4))  # locals first (stable: each cubin's order kept)
    table: list[tuple] = []
    seen: dict[tuple, int] = {}
    names: set[bytes] = set()
    symbol_of: list[dict[int, int]] = [{0: 0} for _ in cubins]
    renamed: list[dict[str, str]] = [{} for _ in cubins]
    for k, j, sym in entries:
        if sym in seen:  # the same symbol in the same shared section (the reserved shared memory's)
            symbol_of[k][j] = seen[sym]
            continue
        name = sym[0]
        if name and name in names and (sym[1] & 0xF) != 3:
            name = b"%s%s%d_%d" % (sym[0], RENAME_MARK.encode(), k, j)
            renamed[k][name.decode(errors="surrogateescape")] = sym[0].decode(errors="surrogateescape")
        names.add(name)
        table.append((name, *sym[1:]))
        seen[sym] = symbol_of[k][j] = len(table)
    return symbol_of, table, renamed


def _moved_section(
    cubin: _Cubin, i: int, section_of: dict[int, int], symbol_of: dict[int, int]
) -> tuple[bytes, tuple, bytes]:
    _, kind, flags, _, _, _, link, info, align, entsize = cubin.sections[i]
    body, name = cubin.body(i), cubin.names[i]
    if kind in (_RELA, _REL):
        step, out = (24 if kind == _RELA else 16), bytearray(body)
        for at in range(0, len(body), step):
            r_info = struct.unpack_from("<Q", body, at + 8)[0]
            struct.pack_into("<Q", out, at + 8, (symbol_of[r_info >> 32] << 32) | (r_info & 0xFFFFFFFF))
        body = bytes(out)
    elif name.startswith(b".nv.info."):
        body = _renumber_info(body, lambda j: symbol_of[j])
    new_link = 3 if link == cubin.symtab else section_of.get(link, 0) if link else 0
    if name.startswith(b".text."):
        new_info = symbol_of.get(info, 0)  # a code section's sh_info is its function's symbol
    elif info and (flags & _INFO_LINK or kind in (_RELA, _REL)):
        new_info = section_of.get(info, 0)
    else:
        new_info = info
    size = cubin.sections[i][5]
    return name, (kind, flags, new_link, new_info, align, entsize, size), body


def _write_elf(header: tuple, sections: list[tuple[bytes, tuple, bytes]]) -> bytes:
    shstrtab = bytearray(b"\0")
    offsets = []
    for name in [b".shstrtab"] + [s[0] for s in sections]:
        offsets.append(len(shstrtab))
        shstrtab += name + b"\0"
    out = bytearray(_EHDR.size)
    headers = [_SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    placed = [(offsets[0], (_STRTAB, 0, 0, 0, 1, 0, len(shstrtab)), bytes(shstrtab))]
    placed += [
        (offsets[n + 1], (*fields[:6], fields[6] if len(fields) > 6 else len(body)), body)
        for n, (_, fields, body) in enumerate(sections)
    ]
    for name_at, (kind, flags, link, info, align, entsize, size), body in placed:
        if kind != _NOBITS:
            out += b"\0" * (-len(out) % max(int(align), 1))
        headers.append(_SHDR.pack(name_at, kind, flags, 0, len(out), size, link, info, align, entsize))
        if kind != _NOBITS:
            out += body
    out += b"\0" * (-len(out) % 8)
    fields = list(header)
    fields[4], fields[5], fields[6], fields[10] = 0, 0, len(out), 0  # no entry, no program headers
    fields[12], fields[13] = len(headers), 1
    _EHDR.pack_into(out, 0, *fields)
    return bytes(out) + b"".join(headers)


def _restore(functions: list[dict], renamed: dict[str, str]) -> list[dict]:
    if not renamed:
        return functions
    for fn in functions:
        for ins in fn.get("sass-instructions", []):
            text = ins.get("operands")
            if isinstance(text, str) and RENAME_MARK in text:
                for new, old in renamed.items():
                    text = text.replace(new, old)
                ins["operands"] = text
    return functions


def _one_batch(cubins: Sequence[_Cubin], nvdisasm: Path, timeout_s: float) -> list[list[dict]]:
    from components.features.static.sass import run_nvdisasm

    if len(cubins) == 1:
        return [run_nvdisasm(cubins[0].data, nvdisasm, timeout_s)]
    blob, renamed = merge_cubins(cubins)
    try:
        functions = run_nvdisasm(blob, nvdisasm, timeout_s)
    except (RuntimeError, ValueError):
        return [run_nvdisasm(c.data, nvdisasm, timeout_s) for c in cubins]
    by_name = {fn.get("function-name"): fn for fn in functions}
    out = []
    for cubin, names in zip(cubins, renamed, strict=True):
        own = [
            n[len(b".text.") :].decode(errors="surrogateescape")
            for n in cubin.names
            if n.startswith(b".text.")
        ]
        if not all(n in by_name for n in own):
            out.append(run_nvdisasm(cubin.data, nvdisasm, timeout_s))
            continue
        out.append(_restore([by_name[n] for n in own], names))
    return out


def disassemble_many(
    cubins: Sequence[bytes], nvdisasm: Path, workers: int = 2, timeout_s: float = 120.0
) -> list[list[dict]]:
    """nvdisasm's functions of each cubin (as ``sass.run_nvdisasm`` returns them), in the order given,
    from a few nvdisasm processes (``workers`` at a time) instead of one per cubin."""
    parsed = [parse_cubin(c) for c in cubins]
    batches = plan_batches(parsed)
    results: list[list[dict]] = [[] for _ in cubins]
    with ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
        done = pool.map(lambda b: _one_batch([parsed[k] for k in b], nvdisasm, timeout_s), batches)
        for members, functions in zip(batches, done, strict=True):
            for k, fns in zip(members, functions, strict=True):
                results[k] = fns
    return results


__all__ = ["disassemble_many", "merge_cubins", "parse_cubin", "plan_batches"]
