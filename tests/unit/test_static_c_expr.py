"""The trip-count evaluator reads function-like macros, nested conditionals, macro values with block
comments and expressions over several lines (static.c_expr, static.loops)."""

from __future__ import annotations

import pytest


def test_function_like_macros_expand_with_their_arguments():
    from components.features.static.loops import evaluate, file_macros

    macros = file_macros("#define MIN(a, b) ((a) <= (b) ? (a) : (b))\n#define SQ(x) x * x\n", {})
    assert evaluate("MIN(n, total - t)", {"n": 2, "total": 200, "t": 0}, macros) == 2
    assert evaluate("MIN(n, total - t)", {"n": 500, "total": 200, "t": 0}, macros) == 200
    assert evaluate("SQ(k + 1)", {"k": 2}, macros) == 9  # each argument parenthesised


def test_nested_conditionals_and_conditionals_inside_parentheses():
    from components.features.static.loops import evaluate

    assert evaluate("x > 3 ? (y < 2 ? 1 : 2) : 5", {"x": 4, "y": 3}) == 2
    assert evaluate("2 * (x > 3 ? 10 : 20) + 1", {"x": 1}) == 41
    assert evaluate("a ? b ? 1 : 2 : 3", {"a": 1, "b": 0}) == 2


def test_a_macro_value_with_a_block_comment_and_a_multi_line_expression():
    from components.features.static.loops import evaluate, file_macros

    macros = file_macros("#define n_d 10000 /* `n_d` : Number of dimensions */\n", {})
    assert evaluate("n_d * 2", {}, macros) == 20000
    assert evaluate("ceilf(size / 128) *\n   ceilf(size / 32)", {"size": 16384}) == 128 * 512


def test_an_unknown_name_inside_a_macro_call_is_reported_not_guessed():
    from components.features.static.loops import Unknown, evaluate, file_macros

    macros = file_macros("#define MAX(a, b) ((a) > (b) ? (a) : (b))\n", {})
    with pytest.raises(Unknown) as exc:
        evaluate("MAX(n, 4)", {}, macros)
    assert exc.value.names == ["n"]
