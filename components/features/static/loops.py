"""Loop trip counts of a CUDA/HIP kernel from its source and what the question makes known.

SASS shows where loops are, not how often they run. The source usually says it: ``for (int t = 0;
t < N / TILE; ++t)`` runs ``N / TILE`` times once ``N`` and ``TILE`` are known -- from an integer
constant, a ``#define`` (or ``--define``), a template argument of the launched instance, a kernel
scalar argument given with the question (``--arg N=4096``), a local computed from those, or the
launch (``blockDim.x``, ``gridDim.x``). Thread and block indices count as 0: a loop bounded by them
is counted for the first thread (an upper bound for strided loops). A loop whose bound stays
unknown is reported with the names it lacks, so the answer can say why its interval is wide.

``pin_loops`` marks every loop ``#pragma unroll 1`` so the compiler keeps one SASS loop per source
loop: the SASS loop nest then lines up with the source loop nest and each body is one iteration.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field

from components.common.braces import closing_brace
from components.features.static.c_expr import conditionals, expand_calls, function_macros
from components.features.static.enums import enum_constants
from components.features.static.source import code_mask
from components.features.static.templates import split_args as _split_args

_FOR_RE = re.compile(r"\b(for|while)\s*\(")
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]*?)[ \t]*$", re.M)
_CONST_RE = re.compile(
    r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+|signed\s+)?(?:int|long|long\s+long|size_t|short)"
    r"\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);"
)
_LOCAL_RE = re.compile(
    r"\b(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|long\s+long|size_t|short|unsigned|int64_t|int32_t"
    r"|uint32_t|uint64_t|uint|auto)\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);"
)
_UNROLL_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*$", re.M)
_CAST_RE = re.compile(
    r"\(\s*(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|long\s+long|size_t|short|float|double|unsigned"
    r"|int64_t|int32_t|uint32_t|uint64_t)\s*\)"
)
_SIZEOF = {"char": 1, "short": 2, "int": 4, "float": 4, "double": 8, "long": 8, "half": 2, "size_t": 8}
COMPARE = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}
MAX_TRIPS = 1e12  # a bound beyond this is an unparsed expression, not a loop


class Unknown(Exception):
    """An expression names values the question does not give; ``names`` lists them."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


@dataclass
class SourceLoop:
    """One loop of a kernel body: position, parent (index in the list, -1 at top level), trips."""

    start: int
    end: int
    parent: int
    header: str
    trips: float | None = None
    unknown: list[str] = field(default_factory=list)
    first: float | None = None  # the loop variable's first value (static.reduction reads it)


@dataclass(frozen=True)
class Known:
    """What a question makes known about a kernel's run: -D macros, scalar arguments, the launch."""

    defines: dict[str, str] = field(default_factory=dict)
    args: dict[str, float] = field(default_factory=dict)
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)


def pin_loops(text: str) -> str:
    """The source with every ``for``/``while``/``do`` loop marked ``#pragma unroll 1`` (earlier
    unroll pragmas dropped), so each source loop compiles to exactly one SASS loop."""
    text = _UNROLL_RE.sub("", text)
    mask = code_mask(text)
    out, cursor = [], 0
    for m in re.finditer(r"\b(for|while|do)\b", text):
        if not mask[m.start()] or (m.group(1) == "while" and _ends_do_while(text, mask, m.start())):
            continue
        out.append(text[cursor : m.start()])
        out.append("\n#pragma unroll 1\n")
        cursor = m.start()
    out.append(text[cursor:])
    return "".join(out)


def _ends_do_while(text: str, mask: bytearray, pos: int) -> bool:
    """True for the ``while`` closing a ``do { } while (...)`` (it follows a '}')."""
    j = pos - 1
    while j >= 0 and (text[j].isspace() or not mask[j]):
        j -= 1
    return j >= 0 and text[j] == "}"


def _c_to_python(expr: str) -> str:
    expr = " ".join(expr.replace("\\\n", " ").split())  # a statement over several lines is one expression
    expr = re.sub(r"static_cast\s*<[^<>]*>", "", expr)
    expr = re.sub(
        r"\bsizeof\s*\(\s*(\w+)\s*\)", lambda m: str(_SIZEOF.get(m.group(1), f"sizeof_{m.group(1)}")), expr
    )
    expr = _CAST_RE.sub("", expr)
    expr = re.sub(r"\b(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)[uUlLfF]+\b", r"\1", expr)
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+)[uUlL]+\b", r"\1", expr)
    expr = re.sub(r"\b(?:std\s*::\s*|::)?(min|max)\s*\(", r"\1(", expr)
    expr = re.sub(r"\b(threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*([xyz])\b", r"\1_\2", expr)
    expr = re.sub(  # a struct member p.k (a.b.c) is one name, p__k
        r"(?<![\w.])[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)+",
        lambda m: re.sub(r"\s*\.\s*", "__", m.group(0)),
        expr,
    )
    expr = expr.replace("&&", " and ").replace("||", " or ").replace("!", " not ").replace(" not =", "!=")
    return conditionals(expr)  # c ? a : b, nested and inside parentheses too


def evaluate(expr: str, env: dict[str, float], macros: dict[str, str] | None = None, depth: int = 0) -> float:
    """Value of a C integer expression under ``env`` (macros expanded on demand); Unknown if it
    names a value not known, ValueError if it is not an expression this evaluator reads."""
    try:
        tree = ast.parse(_c_to_python(expand_calls(expr, macros or {})).strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expr!r}") from None
    return _eval(tree.body, env, macros or {}, depth)


def _eval(node: ast.AST, env: dict[str, float], macros: dict[str, str], depth: int) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in macros and depth < 16:
            env[node.id] = evaluate(macros[node.id], env, macros, depth + 1)
            return env[node.id]
        raise Unknown([node.id.replace("__", ".")])  # a struct member (p__k) as the source names it
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return _element(node, env, macros, depth)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Invert):
        v = _eval(node.operand, env, macros, depth)
        return -v if isinstance(node.op, ast.USub) else (~int(v) if isinstance(node.op, ast.Invert) else v)
    if isinstance(node, ast.BinOp):
        return _binop(node, env, macros, depth)
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, macros, depth) else node.orelse, env, macros, depth)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
        a, b = _eval_all([node.left, node.comparators[0]], env, macros, depth)
        return int(COMPARE[type(node.ops[0])](a, b))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
        values = _eval_all(node.args, env, macros, depth)
        return min(values) if node.func.id == "min" else max(values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _UNARY:
        (value,) = _eval_all(node.args[:1], env, macros, depth) if len(node.args) == 1 else [None]
        if value is None:
            raise ValueError("unsupported call")
        return _UNARY[node.func.id](value)
    raise ValueError("unsupported expression")


def _element(node: ast.Subscript, env: dict[str, float], macros: dict[str, str], depth: int) -> float:
    """``a[i]`` of a constant array whose elements ``env`` holds as ``a[0]``, ``a[1]`` ... (the host's braced
    initialisers, static.host_assign); an array the question does not know is no expression read here."""
    name = node.value.id  # type: ignore[attr-defined]
    if not any(k.startswith(name + "[") for k in env):
        raise ValueError(f"array {name} not known")
    (index,) = _eval_all([node.slice], env, macros, depth)
    key = f"{name}[{int(index)}]"
    if key not in env:
        raise Unknown([key])
    return env[key]


# One-argument math and functional casts a size may be computed with: (int)sqrtf(float(kernels_size)).
_UNARY = {
    **dict.fromkeys(("sqrt", "sqrtf"), math.sqrt),
    **dict.fromkeys(("floor", "floorf"), math.floor),
    **dict.fromkeys(("ceil", "ceilf"), math.ceil),
    **dict.fromkeys(("log2", "log2f"), math.log2),
    **dict.fromkeys(("float", "double"), float),
    **dict.fromkeys(("int", "long", "unsigned", "size_t"), int),
}


def _eval_all(nodes: list[ast.AST], env: dict[str, float], macros: dict[str, str], depth: int) -> list[float]:
    """Values of several operands; Unknown naming every missing value among them."""
    values, missing = [], []
    for node in nodes:
        try:
            values.append(_eval(node, env, macros, depth))
        except Unknown as exc:
            missing += exc.names
    if missing:
        raise Unknown(missing)
    return values


def _binop(node: ast.BinOp, env: dict[str, float], macros: dict[str, str], depth: int) -> float:
    a, b = _eval_all([node.left, node.right], env, macros, depth)
    op = node.op
    if isinstance(op, ast.Div | ast.Mod | ast.FloorDiv) and b == 0:
        raise ValueError("division by zero")
    both_int = isinstance(a, int) and isinstance(b, int)
    if isinstance(op, ast.Div):
        return int(a / b) if both_int else a / b  # C truncates integer division toward zero
    if isinstance(op, ast.Mod):
        return int(math.fmod(a, b)) if both_int else math.fmod(a, b)
    ops = {
        ast.Add: lambda: a + b,
        ast.Sub: lambda: a - b,
        ast.Mult: lambda: a * b,
        ast.LShift: lambda: int(a) << int(b),
        ast.RShift: lambda: int(a) >> int(b),
        ast.BitAnd: lambda: int(a) & int(b),
        ast.BitOr: lambda: int(a) | int(b),
        ast.BitXor: lambda: int(a) ^ int(b),
    }
    for kind, fn in ops.items():
        if isinstance(op, kind):
            return fn()
    raise ValueError("unsupported operator")


def file_macros(text: str, defines: dict[str, str]) -> dict[str, str]:
    """Object-like ``#define`` macros of the source, then file-scope integer constants; the user's
    ``--define`` values win (the source's ``#ifndef N`` defaults yield to them)."""
    macros = {  # a value's trailing comment (// or /* */) is no part of it
        name: re.sub(r"/\*.*?(\*/|$)", " ", value.split("//")[0]).strip()
        for name, value in _DEFINE_RE.findall(text)
    }
    macros = {k: v for k, v in macros.items() if v and "(" not in k}
    macros.update(function_macros(text))  # MIN(a,b) -> its body (static.c_expr)
    for name, value in _CONST_RE.findall(text):
        macros.setdefault(name, value.strip())
    for name, value in enum_constants(text).items():
        macros.setdefault(name, value)
    macros.update({k: str(v) for k, v in defines.items()})
    return macros


# a kernel's template head, and what may stand between it and ``__global__``
# (``template <class T, int B> __launch_bounds__(B) __global__ void k(...)``)
_TEMPLATE_HEAD_RE = re.compile(
    r"template\s*<([^{};]*)>\s*(?:(?:__launch_bounds__\s*\([^()]*\)|static|inline|__forceinline__)\s*)*$"
)


def _kernel_span(text: str, mask: bytearray, name: str) -> tuple[int, int, int, int] | None:
    """(start of the definition head, '(' of the parameters, '{', '}') of ``__global__ ... name(``."""
    for m in re.finditer(r"__global__", text):
        if not mask[m.start()]:
            continue
        head = re.compile(r"[^;{}]*?\b" + re.escape(name) + r"\s*\(", re.S).match(text, m.end())
        if not head:
            continue
        paren = head.end() - 1
        depth, j = 0, paren
        while j < len(text):
            if mask[j] and text[j] == "(":
                depth += 1
            elif mask[j] and text[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        brace = text.find("{", j)
        if brace < 0 or ";" in text[j:brace]:
            continue
        return m.start(), paren, brace, _close(text, mask, brace, "{", "}")
    return None


def _close(text: str, mask: bytearray, pos: int, opening: str, closing: str) -> int:
    """The closing character of the pair opened at ``pos`` (the last index when it is never closed)."""
    close = closing_brace(text, pos, mask, pair=opening + closing)
    return len(text) - 1 if close is None else close


def kernel_parameters(text: str, name: str) -> tuple[list[str], dict[str, str]]:
    """(scalar parameter names, numeric template parameters name -> default or '') of a kernel."""
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return [], {}
    head_start, paren, _, _ = span
    params = text[paren + 1 : _close(text, mask, paren, "(", ")")]
    scalars = [
        p.split("=")[0].split()[-1]
        for p in _split_args(params)
        if p and "*" not in p and "&" not in p and "[" not in p and len(p.split("=")[0].split()) >= 2
    ]
    before = text[max(0, head_start - 400) : head_start]
    tmpl = _TEMPLATE_HEAD_RE.search(before)
    numeric: dict[str, str] = {}
    for p in _split_args(tmpl.group(1)) if tmpl else []:
        words = p.split("=")[0].split()
        if len(words) >= 2 and words[0] not in ("typename", "class"):
            numeric[words[-1]] = p.split("=", 1)[1].strip() if "=" in p else ""
    template_names = [p.split("=")[0].split()[-1] for p in _split_args(tmpl.group(1))] if tmpl else []
    return scalars, {k: numeric[k] for k in template_names if k in numeric}


def kernel_loops(text: str, name: str, instance: str | None, known: Known) -> list[SourceLoop] | None:
    """Loops of kernel ``name`` in source pre-order with their trip counts; None if not found."""
    defines, args, grid, block = known.defines, known.args, known.grid, known.block
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return None
    _, _, lo, hi = span
    macros = file_macros(text, defines)
    for pname in kernel_param_names(text, name):  # a parameter shadows a constant of that name elsewhere
        macros.pop(pname, None)
    env: dict[str, float] = {f"{b}_{a}": 0 for b in ("threadIdx", "blockIdx") for a in "xyz"}
    env.update({f"blockDim_{a}": v for a, v in zip("xyz", block, strict=True)})
    env.update({f"gridDim_{a}": v for a, v in zip("xyz", grid, strict=True)})
    _, template = kernel_parameters(text, name)
    given = (
        _split_args(instance[instance.index("<") + 1 : instance.rindex(">")])
        if instance and "<" in instance
        else []
    )
    all_template = _template_names(text, mask, name)
    for pname, value in zip(all_template, given, strict=False):
        if pname in template:
            macros[pname] = value
    for pname, default in template.items():
        if default:
            macros.setdefault(pname, default)
    env.update({k.replace(".", "__"): v for k, v in args.items()})  # p.k: a member of struct argument p
    from components.features.static.device_loops import device_functions, scan_loops

    return scan_loops(text, mask, (lo, hi), env, macros, device_functions(text, mask))


def _template_names(text: str, mask: bytearray, name: str) -> list[str]:
    span = _kernel_span(text, mask, name)
    if span is None:
        return []
    tmpl = _TEMPLATE_HEAD_RE.search(text[max(0, span[0] - 400) : span[0]])
    return [p.split("=")[0].split()[-1] for p in _split_args(tmpl.group(1)) if p.split()] if tmpl else []


def _statement_end(text: str, mask: bytearray, pos: int, limit: int) -> int:
    """End of the loop body starting after the loop header: a braced block, a nested loop or one
    statement."""
    j = pos
    while j < limit and (text[j].isspace() or not mask[j]):
        j += 1
    if j < limit and text[j] == "{":
        return _close(text, mask, j, "{", "}")
    m = _FOR_RE.match(text, j) or re.compile(r"\bif\s*\(").match(text, j)
    if m:
        close = _close(text, mask, m.end() - 1, "(", ")")
        return _statement_end(text, mask, close + 1, limit)
    while j < limit and not (mask[j] and text[j] == ";"):
        j += 1
    return j


def _locals(prefix: str, mask: bytearray, offset: int, env: dict[str, float], macros: dict[str, str]) -> None:
    """Integer locals declared before the loop (``int nt = (N + TILE - 1) / TILE;``), in order;
    one that cannot be evaluated shadows any constant of that name (it is unknown)."""
    for m in _LOCAL_RE.finditer(prefix):
        if not mask[offset + m.start()]:
            continue
        try:
            env[m.group(1)] = evaluate(m.group(2), env, macros)
        except (Unknown, ValueError, OverflowError):
            env.pop(m.group(1), None)
            macros.pop(m.group(1), None)


def _count(
    loop: SourceLoop,
    kind: str,
    header: str,
    env: dict[str, float],
    macros: dict[str, str],
    body: str = "",
    prefix: str = "",
) -> None:
    """Trip count of a ``for (init; cond; step)``, or of a ``while (cond)`` whose body steps one
    variable of the condition once (``while (nn >= 1) { ...; nn--; }``, static.while_loops); other
    ``while`` loops stay unknown."""
    parts = _split_semicolons(header)
    if kind == "while":
        from components.features.static.while_loops import counted_while

        counted = counted_while(header, body, prefix, env, macros)
        if counted is None:
            loop.unknown = ["while-loop condition"]
            return
        header, parts = counted, _split_semicolons(counted)
    if len(parts) != 3:
        loop.unknown = ["loop header"]
        return
    init, cond, step = (p.strip() for p in parts)
    try:
        var, start = _init(init, cond, env, macros)
        var_bound = _condition(cond, var)
        if var_bound is None:
            loop.unknown = [f"condition {cond!r}"]
            return
        op, bound_expr = var_bound
        bound = evaluate(bound_expr, dict(env), macros)
        trips = _trips(start, op, bound, step, var, env, macros)
    except Unknown as exc:
        loop.unknown = sorted(set(exc.names))
        return
    except (ValueError, OverflowError, ZeroDivisionError):
        loop.unknown = [f"loop header {loop.header!r}"]
        return
    if trips is None or not 0 <= trips <= MAX_TRIPS:
        loop.unknown = [f"loop header {loop.header!r}"]
        return
    loop.trips, loop.first = float(trips), start


def _split_semicolons(header: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in header:
        depth += ch == "("
        depth -= ch == ")"
        if ch == ";" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def _init(init: str, cond: str, env: dict[str, float], macros: dict[str, str]) -> tuple[str, float]:
    m = re.match(r"^(?:[\w:\s]+?\s+)?([A-Za-z_]\w*)\s*=\s*(.+)$", init.split(",")[0].strip())
    if m:
        return m.group(1), evaluate(m.group(2), dict(env), macros)
    var = re.match(r"^\s*([A-Za-z_]\w*)", cond)
    if var and var.group(1) in env:  # for (; i < n; ++i) with i set before the loop
        return var.group(1), env[var.group(1)]
    raise ValueError("no loop variable")


def _condition(cond: str, var: str) -> tuple[str, str] | None:
    """(comparison, bound expression) with the loop variable on the left; the first clause of an
    ``&&`` that compares the variable (further clauses only stop the loop earlier)."""
    for clause in re.split(r"&&", cond):
        clause = clause.strip().strip("()").strip()
        m = re.match(r"^" + re.escape(var) + r"\s*(<=|>=|<|>|!=)\s*(.+)$", clause)
        if m:
            return m.group(1), m.group(2)
        m = re.match(r"^(.+?)\s*(<=|>=|<|>)\s*" + re.escape(var) + r"$", clause)
        if m:
            flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}
            return flip[m.group(2)], m.group(1)
    return None


def _trips(
    start: float, op: str, bound: float, step: str, var: str, env: dict[str, float], macros: dict[str, str]
) -> float | None:
    s = step.strip().split(",")[0].strip()
    if re.fullmatch(rf"(\+\+{var}|{var}\+\+)", s):
        kind, amount = "+", 1.0
    elif re.fullmatch(rf"(--{var}|{var}--)", s):
        kind, amount = "-", 1.0
    else:
        m = re.fullmatch(rf"{var}\s*(\+|-|\*|/|<<|>>)=\s*(.+)", s) or re.fullmatch(
            rf"{var}\s*=\s*{var}\s*(\+|-|\*|/|<<|>>)\s*(.+)", s
        )
        if not m:
            return None
        kind, amount = m.group(1), float(evaluate(m.group(2), dict(env), macros))
    if op == "!=":
        op = "<" if (kind in "+*<<" and start < bound) else ">"
    upward = op in ("<", "<=")
    if upward and kind in ("+", "*", "<<"):
        return _grow(start, bound + (1 if op == "<=" else 0), kind, amount)
    if not upward and kind in ("-", "/", ">>"):
        return _shrink(start, bound - (1 if op == ">=" else 0), kind, amount)
    return None


def _grow(start: float, stop: float, kind: str, amount: float) -> float | None:
    """Iterations of ``v = start; v < stop; v += / *= / <<= amount``."""
    if start >= stop:
        return 0.0
    if kind == "+":
        return math.ceil((stop - start) / amount) if amount > 0 else None
    factor = amount if kind == "*" else 2.0**amount
    if factor <= 1 or start <= 0:
        return None
    return float(math.ceil(math.log(stop / start, factor) - 1e-9))


def _shrink(start: float, stop: float, kind: str, amount: float) -> float | None:
    """Iterations of ``v = start; v > stop; v -= / /= / >>= amount``."""
    if start <= stop:
        return 0.0
    if kind == "-":
        return math.ceil((start - stop) / amount) if amount > 0 else None
    factor = amount if kind == "/" else 2.0**amount
    if factor <= 1:
        return None
    count, v = 0, int(start)
    while v > stop and count < 64:
        v = int(v / factor)
        count += 1
    return float(count)


def kernel_param_names(text: str, name: str) -> list[str]:
    """Every parameter name of kernel ``name`` in order (pointers included)."""
    mask = code_mask(text)
    span = _kernel_span(text, mask, name)
    if span is None:
        return []
    params = text[span[1] + 1 : _close(text, mask, span[1], "(", ")")]
    return [p.split("=")[0].split()[-1].strip("*&") if p.split() else "" for p in _split_args(params)]


def _code(text: str, mask: bytearray, lo: int, hi: int) -> str:
    """``text[lo:hi]`` with comments blanked (a ``-->`` in one would unbalance the argument split)."""
    return "".join(c if mask[i] else " " for i, c in enumerate(text[lo:hi], lo))


def call_arguments(text: str, open_paren: int) -> list[str]:
    """Top-level argument expressions of the call whose '(' is at ``open_paren`` (comments blanked: a
    ``1, // offset_unit,`` would shift every later argument)."""
    mask = code_mask(text)
    return _split_args(_code(text, mask, open_paren + 1, _close(text, mask, open_paren, "(", ")")))


def match_nest(loops: list[SourceLoop], detail: list[dict]) -> bool:
    """True when the compiled loop nest (SASS loops in address order with their parents) is the
    source loop nest: same number of loops, same parent of each. Loops compiled with
    ``pin_loops`` keep their order; a loop the compiler removed or split breaks the match."""
    return len(loops) == len(detail) and all(
        lp.parent == d.get("parent", -2) for lp, d in zip(loops, detail, strict=True)
    )


__all__ = [
    "Known",
    "SourceLoop",
    "Unknown",
    "call_arguments",
    "evaluate",
    "file_macros",
    "kernel_loops",
    "kernel_param_names",
    "kernel_parameters",
    "match_nest",
    "pin_loops",
]
