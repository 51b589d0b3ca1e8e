"""Command-line options a program reads with ``getopt`` (or ``getopt_long``): its recorded arguments as the
host's values.

``while ((opt = getopt(argc, argv, "hm:n:")) >= 0) switch (opt) { case 'm': n_in = atoi(optarg); break; ...``
sets ``n_in`` only when ``-m V`` is on the command line. The host reading (static.host_env) is textual, so
``apply_getopt`` rewrites each option's ``case``: with the option given, ``atoi(optarg)`` (``atof``,
``strtol`` ...) becomes its value; without it, the case's statements are blanked, so the default set
before the loop stands. Options are read from the recorded arguments as ``getopt`` would: ``-m 5`` or
``-m5`` for a letter the option string marks with ``:``. A braced loop around the call
(``while (...) { switch (opt) { ... } }``) reads as ``if (1)``, and the case labels go, so the given
options' assignments are plain statements on the path to the launch (``_loop_once``).
"""

from __future__ import annotations

import re

from components.features.static.source import code_mask

_GETOPT_RE = re.compile(r"\bgetopt(?:_long(?:_only)?)?\s*\([^,()]*,[^,()]*,\s*\"([^\"]*)\"")
_CASE_RE = re.compile(r"\bcase\s*'(.)'\s*:")
_END_RE = re.compile(r"\bbreak\s*;|\bcase\s*'|\bdefault\s*:|\}")
_OPTARG_RE = re.compile(
    r"\b(?:std\s*::\s*)?(?:atoi|atol|atoll|atof|stoi|stol|stoul|stof|stod|strtol|strtoul|strtod|strtof)"
    r"\s*\(\s*optarg\b[^)]*\)"
)


def recorded_options(spec: str, args: list[str]) -> dict[str, str]:
    """Option letter -> value of the options that take one (``spec`` is getopt's option string)."""
    takes = {spec[i] for i in range(len(spec) - 1) if spec[i + 1] == ":" and spec[i] != ":"}
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if len(a) >= 2 and a[0] == "-" and a[1] in takes:
            if len(a) > 2:
                out[a[1]] = a[2:]
            elif i + 1 < len(args):
                out[a[1]] = args[i + 1]
                i += 1
        i += 1
    return out


def _loop_once(text: str, at: int) -> str:
    """``text`` with the loop around the getopt call at ``at`` (``while ((opt = getopt(...)) != -1) {``)
    and a ``switch (opt) {`` that opens its body read as ``if (1)``: a braced loop body closes before the
    launch, so the host reading (static.host_assign) would drop every assignment in it. The cases are
    rewritten for the recorded options (``apply_getopt``), so taking each given one once is what the
    program does."""
    from components.features.static.loops import _close

    loop = None
    for m in re.finditer(r"\bwhile\s*\(", text[:at]):
        loop = m
    if loop is None:
        return text
    mask = code_mask(text)
    close = _close(text, mask, loop.end() - 1, "(", ")")
    if close is None or close < at or not mask[loop.start()]:
        return text
    rest = re.sub(r"^(\s*\{\s*)switch\s*\(\s*\w+\s*\)", r"\1if (1)", text[close + 1 :], count=1)
    return text[: loop.start()] + "if (1)" + rest


def apply_getopt(text: str, args: list[str]) -> str:
    """``text`` with its getopt cases rewritten for ``args`` (module docstring); unchanged without getopt."""
    spec = _GETOPT_RE.search(text)
    if spec is None:
        return text
    given = recorded_options(spec.group(1), args)
    mask = code_mask(text)
    out, cursor = [], 0
    for m in _CASE_RE.finditer(text, spec.end()):
        if not mask[m.start()]:
            continue
        end = next((e.start() for e in _END_RE.finditer(text, m.end()) if mask[e.start()]), len(text))
        body = text[m.end() : end]
        if "optarg" not in body:
            continue
        # not on the command line: blanked, so that the default set before the loop stands
        body = _OPTARG_RE.sub(given[m.group(1)], body) if m.group(1) in given else re.sub(r"[^\n]", " ", body)
        # the label goes too: its statements read as plain ones (the loop runs once, _loop_once)
        out += [text[cursor : m.start()], " " * (m.end() - m.start()), body]
        cursor = end
    return _loop_once("".join(out) + text[cursor:], spec.start())


__all__ = ["apply_getopt", "recorded_options"]
