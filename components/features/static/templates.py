"""Instantiate template kernels from their launch sites, also when the site names host-side things.

A template kernel produces SASS only when instantiated. Real programs launch them as
``k<T, 256><<<...>>>`` inside a host template ``void run<T>(...)`` (T known only at run's call
sites), with ``k<NUM_THREADS><<<...>>>`` where NUM_THREADS is a ``const int`` local to ``main``, or
with deduced arguments ``k<<<g, b>>>(d_a, n)``. Host code is stripped before compiling, so each
launch is rewritten into a name expression NVRTC can instantiate (the equivalent of appending an
explicit instantiation ``template __global__ void k<float, 256>(...)``):
- identifiers that are host constants -> their values (``const int N = 256`` -> ``256``);
- template parameters of the enclosing host template -> the arguments of its explicit calls
  (``run<float>(...)``, ``run<double>(...)``: one instantiation each), else ``float`` for a type
  parameter (an assumption the report lists among the instances);
- deduced arguments -> the declared type of the launch argument (``float *d_a`` -> ``float``).
Whatever cannot be resolved is left out (the compile then keeps the other kernels).
"""

from __future__ import annotations

import itertools
import re

from components.common.braces import closing_brace

_BUILTIN = {
    "float",
    "double",
    "int",
    "unsigned",
    "signed",
    "char",
    "short",
    "long",
    "bool",
    "void",
    "half",
    "__half",
    "__half2",
    "__nv_bfloat16",
    "__nv_bfloat162",
    "float2",
    "float3",
    "float4",
    "double2",
    "int2",
    "int4",
    "uint",
    "size_t",
    "int8_t",
    "uint8_t",
    "int16_t",
    "uint16_t",
    "int32_t",
    "uint32_t",
    "int64_t",
    "uint64_t",
    "true",
    "false",
    "const",
    "sizeof",
    "std",
    "uchar",
    "ushort",
    "ulong",
    "cuComplex",
    "cuDoubleComplex",
}
_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(<(?:[^<>;{}]|<(?:[^<>;{}]|<[^<>;{}]*>)*>)*>)?\s*<<<")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_KERNEL_DEF = re.compile(
    r"template\s*<((?:[^<>{};]|<[^<>{};]*>)*)>\s*(?:static\s+)?__global__\s*(?:__launch_bounds__\s*\([^()]*\)\s*)?[^(;{]*?\b([A-Za-z_]\w*)\s*\(([^{;]*?)\)\s*\{",
    re.S,
)
_HOST_TEMPLATE = re.compile(
    r"template\s*<((?:[^<>{};]|<[^<>{};]*>)*)>\s*(?!\s*(?:static\s+)?__global__)[^;{}()]*?\b([A-Za-z_]\w*)\s*"
    r"\(([^{;]*?)\)\s*(?:const\s*)?\{",
    re.S,
)
MAX_INSTANCES_PER_SITE = 4


def _split_args(text: str) -> list[str]:
    """Top-level comma split (nested <>, (), [] kept)."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


split_args = _split_args  # the name other static modules import


def _template_params(text: str) -> list[tuple[str, str, str | None]]:
    """'typename T, int N = 4' -> [('type', 'T', None), ('value', 'N', '4')]."""
    params = []
    for part in _split_args(text):
        default = None
        if "=" in part:
            part, default = part.split("=", 1)
            default = default.strip()
        words = _IDENT.findall(part)
        if not words:
            continue
        kind = "type" if words[0] in ("typename", "class") else "value"
        params.append((kind, words[-1], default))
    return params


def _matching(text: str, start: int) -> int:
    close = closing_brace(text, start)
    return len(text) if close is None else close


def _host_templates(text: str) -> list[tuple[int, int, str, list[tuple[str, str, str | None]], str]]:
    """(body start, body end, name, template params, parameter list) of host function templates."""
    out = []
    for m in _HOST_TEMPLATE.finditer(text):
        end = _matching(text, m.end() - 1)
        out.append((m.start(), end, m.group(2), _template_params(m.group(1)), m.group(3)))
    return out


def _constant(text: str, name: str) -> str | None:
    m = re.search(
        r"\b(?:const|constexpr)\s+(?:static\s+)?(?:unsigned\s+)?[A-Za-z_][\w:]*\s+"
        + re.escape(name)
        + r"\s*=\s*([^;,{}]+?)\s*[;,]",
        text,
    )
    return m.group(1).strip() if m else None


def _declared_type(text: str, ident: str, before: int) -> str | None:
    """Base type of the last declaration of ``ident`` before ``before`` ('float *d_a' -> 'float')."""
    pattern = re.compile(
        r"([A-Za-z_][\w:]*(?:\s*<[^<>;()]*>)?)\s*[*&]*\s*(?:const\s+)?(?:__restrict__\s+)?[*&]*\s*\b"
        + re.escape(ident)
        + r"\b\s*(?=[;,=)\[])"
    )
    hits = [
        m
        for m in pattern.finditer(text, 0, before)
        if m.group(1) not in ("return", "const", "sizeof", "delete")
    ]
    if not hits:
        return None
    base = hits[-1].group(1).strip()
    return None if base in ("auto",) else base


class _Resolver:
    def __init__(self, text: str, device: str) -> None:
        self.text = text
        self.device_words = set(_IDENT.findall(device))
        self.hosts = _host_templates(text)
        self.kernels = {
            m.group(2): (_template_params(m.group(1)), m.group(3)) for m in _KERNEL_DEF.finditer(device)
        }

    def enclosing(self, pos: int) -> tuple[int, int, str, list, str] | None:
        inside = [h for h in self.hosts if h[0] <= pos <= h[1]]
        return max(inside, key=lambda h: h[0]) if inside else None

    def caller_bindings(self, host: tuple, depth: int = 0) -> list[dict[str, str]]:
        """Template-parameter bindings of ``host`` from its explicit calls (``run<float>(``)."""
        _, _, name, params, _ = host
        bindings: list[dict[str, str]] = []
        for m in re.finditer(r"\b" + re.escape(name) + r"\s*<((?:[^<>;{}]|<[^<>;{}]*>)*)>\s*\(", self.text):
            if self.text[max(0, m.start() - 40) : m.start()].rstrip().endswith(("void", "template")):
                continue
            args = _split_args(m.group(1))
            outer = self.enclosing(m.start())
            for outer_binding in (
                self.caller_bindings(outer, depth + 1) if outer and depth < 2 else [{}]
            ) or [{}]:
                binding = {
                    p[1]: self.substitute(a, m.start(), outer_binding)
                    for p, a in zip(params, args, strict=False)
                }
                if all(v is not None for v in binding.values()) and binding not in bindings:
                    bindings.append(binding)  # type: ignore[arg-type]
        if not bindings:
            fallback = {p[1]: (p[2] if p[2] else ("float" if p[0] == "type" else None)) for p in params}
            if all(v is not None for v in fallback.values()):
                bindings.append(fallback)  # type: ignore[arg-type]
        return bindings[:MAX_INSTANCES_PER_SITE]

    def substitute(self, expr: str, pos: int, binding: dict[str, str], depth: int = 0) -> str | None:
        """``expr`` with host-only identifiers replaced; None when one cannot be resolved."""

        def repl(m: re.Match[str]) -> str:
            word = m.group(0)
            if word in binding:
                return binding[word]
            if word in _BUILTIN:
                return word
            # A host constant first: a kernel's own template parameter may share its name.
            value = _constant(self.text, word)
            if value is not None and depth < 3:
                inner = self.substitute(value, pos, binding, depth + 1)
                if inner is not None:
                    return inner if re.fullmatch(r"-?[\w.]+", inner) else f"({inner})"
            if word in self.device_words:
                return word
            raise KeyError(word)

        try:
            return re.sub(r"(?<![.\w])[A-Za-z_]\w*(?!\s*::)", repl, expr)
        except KeyError:
            return None

    def deduce(
        self, kernel: str, explicit: list[str], call_args: list[str], pos: int, binding: dict[str, str]
    ) -> list[str] | None:
        params, plist = self.kernels[kernel]
        kparams = _split_args(plist)
        values: list[str] = []
        for index, (kind, pname, default) in enumerate(params):
            if index < len(explicit):
                values.append(explicit[index])
                continue
            found = None
            for k, ptype in enumerate(kparams):
                words = _IDENT.findall(ptype)
                if kind == "type" and pname in words[:-1] and k < len(call_args):
                    idents = _IDENT.findall(re.sub(r"\([^()]*\)", " ", call_args[k]))
                    if idents:
                        found = _declared_type(self.text, idents[-1], pos)
                    break
            if found is None:
                found = default
            if found is None:
                return None
            values.append(found)
        # Defaults at the tail need not be spelled out.
        while params and values and len(values) > len(explicit) and params[len(values) - 1][2] == values[-1]:
            values.pop()
        return (
            [self.substitute(v, pos, binding) or "" for v in values]
            if all(self.substitute(v, pos, binding) for v in values)
            else None
        )


def resolve_launches(text: str, device: str) -> list[str]:
    """Name expressions (``k<float,256>``) for every template-kernel launch site in ``text``."""
    resolver = _Resolver(text, device)
    exprs: list[str] = []
    for m in _LAUNCH.finditer(text):
        name = m.group(1)
        if name not in resolver.kernels:
            continue
        explicit = _split_args(m.group(2)[1:-1]) if m.group(2) else []
        close = text.find(">>>", m.end())
        call = re.match(r"\s*\(", text[close + 3 : close + 200]) if close >= 0 else None
        call_args: list[str] = []
        if call:
            start = close + 3 + call.end()
            depth, j = 1, start
            while j < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            call_args = _split_args(text[start : j - 1])
        host = resolver.enclosing(m.start())
        bindings = resolver.caller_bindings(host) if host else [{}]
        for binding in itertools.islice(bindings or [{}], MAX_INSTANCES_PER_SITE):
            values = resolver.deduce(name, explicit, call_args, m.start(), binding)
            if not values:
                continue
            expr = f"{name}<{', '.join(' '.join(v.split()) for v in values)}>"
            if expr not in exprs:
                exprs.append(expr)
    return exprs


__all__ = ["resolve_launches"]
