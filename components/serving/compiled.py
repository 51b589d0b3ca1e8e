"""Compiled trees: a ``FlatTrees`` ensemble written out as C (one function of nested ``if``s per tree),
compiled with the system C compiler into a shared library and called through ``ctypes``.

Why: the numpy level-by-level walk (``native.FlatTrees.raw``) costs ~20 us per row for 2 x 400
trees on one thread, and LightGBM's own predictor is not much faster per row on one thread; the
same trees as straight-line compiled code are several times faster, with no LightGBM import.

Against the libraries that do the same (``benchmarks/tree_compilers.py``, 400 trees x 63 leaves, 30
features, one thread, 100k rows; ``benchmarks/results/tree_compilers.json``; a shared 2-core box,
load ~11): this code 259k rows/s batched, 11.2 us a single row, bit-identical to LightGBM;
treelite 4.8.1 + tl2cgen 1.0.0 110k rows/s, 33.4 us (this code 2.3x / 3.0x faster, bit-identical too);
lleaves 1.3.0 231k rows/s, 14.9 us (this code 1.12x / 1.33x faster: NOT the 2x that would justify
hand-written code on speed alone; lleaves is kept out because it is slower still, not bit-identical
(1.8e-14), pins llvmlite < 0.44 and compiled for 825 s where this took 122 s); LightGBM's
``Booster.predict`` 48k rows/s, 47.6 us.

Exactness: every decision is LightGBM's own (``tree.h`` ``NumericalDecision`` /
``CategoricalDecision``): NaN becomes 0.0 unless the node's missing type is NaN; a Zero/NaN
missing value takes the node's default side; ``x <= threshold`` goes left; a categorical value
goes left when its integer category is in the node's bitset (NaN, negative, or beyond the bitset
go right). Thresholds and leaf values are written as C99 hexadecimal floats (bit-exact), and each
row's tree outputs are summed in tree order in double, as ``GBDT::PredictRaw`` does, so the raw
scores equal ``Booster.predict(raw_score=True)`` bit for bit (``tests/unit/test_serving_compiled.py``).

The library is cached under ``$KERNELCAST_HOME/cache/compiled-trees/<hash>.so``, keyed by the
hash of the tree arrays, this generator's version and the compiler command: compiled once per
model, shared by every later load. Compiling 400 deep trees takes ~20 s on a busy 2-core box, so a
load never waits for it: the first load of a model starts the compile in a detached background
process (``start_background_compile``) and answers with the numpy walk / LightGBM until the
library appears (``FlatTrees`` checks for it on later calls). ``kernelcast bench serve`` compiles
in the foreground before timing. No compiler, or a failed compile: the numpy walk, with a note.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

GENERATOR_VERSION = "6"
# -O3 -march=native: the branch-free trees become SIMD loops (AVX-512 popcount where the CPU has it); IEEE
# comparisons kept (-fno-fast-math). The library is cached per CPU (``_cpu_id`` is in its hash).
CFLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fPIC", "-shared", "-fno-fast-math", "-std=c99")
# without -march=native (a compiler that does not know it)
PORTABLE_CFLAGS: tuple[str, ...] = ("-O3", "-fPIC", "-shared", "-fno-fast-math", "-std=c99")
ROW_BLOCK = 256  # rows per block, trees outermost (each tree walks the whole block)
_ZERO_LITERAL = "1.0000000000000000e-35"  # LightGBM's kZeroThreshold
_LOADED: dict[str, CompiledTrees] = {}  # per-process: a library is loaded once per hash


def _literal(value: float) -> str:
    """A C double literal that parses back to exactly ``value``."""
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return float(value).hex()


def _condition(flat: Any, node: int, value: str) -> str:
    """LightGBM's decision at ``node`` as one C expression of ``value``, the missing-value rule resolved
    here rather than at run time (no ``isnan`` call on the hot path):

    - missing None: NaN counts as 0.0, so NaN goes left exactly when ``0 <= t``: ``!(v > t)`` for
      ``t >= 0`` (false for NaN, negated), ``v <= t`` otherwise (false for NaN);
    - missing NaN: NaN takes the default side, else ``v <= t``: ``!(v > t)`` when the default is left;
    - missing Zero: NaN counts as 0.0 and ``|v| <= kZeroThreshold`` takes the default side;
    - categorical: left when ``(int)v`` is in the bitset; NaN, ``v <= -1`` and ``v >= 64`` go right
      (``(int)`` truncates, so ``-0.5`` is category 0, as in LightGBM)."""
    if flat.categorical[node]:
        mask = int(flat.cat_mask[node])
        # No short-circuit, and the shift count clamped first: the same bits as ``&&``, but branch-free.
        inside = f"(({value} > -1.0) & ({value} < 64.0))"
        return f"({inside} & (int)(({mask}ULL >> (int)({inside} ? {value} : 0.0)) & 1ULL))"
    threshold = _literal(float(flat.threshold[node]))
    missing, default_left = int(flat.missing[node]), bool(flat.default_left[node])
    le, not_gt = f"({value} <= {threshold})", f"!({value} > {threshold})"
    if missing == 2:
        return not_gt if default_left else le
    if missing == 1:
        zero = f"(({value} >= -{_ZERO_LITERAL}) & ({value} <= {_ZERO_LITERAL}))"
        return f"({not_gt} | {zero})" if default_left else f"({le} & !{zero})"
    return not_gt if float(flat.threshold[node]) >= 0.0 else le


def _node_code(
    flat: Any, node: int, indent: int, lines: list[str], column: dict[int, int] | None = None
) -> None:
    """Nested ``if``s from ``node`` down; feature ``f`` read as ``r[column[f]]`` (``r[f]`` without a map)."""
    pad = "  " * indent
    if node < 0:
        lines.append(f"{pad}v = {_literal(float(flat.leaf_value[~node]))};")
        return
    feature = int(flat.feature[node])
    place = feature if column is None else column[feature]
    lines.append(f"{pad}if ({_condition(flat, node, f'r[{place}]')}) {{")
    _node_code(flat, int(flat.left[node]), indent + 1, lines, column)
    lines.append(f"{pad}}} else {{")
    _node_code(flat, int(flat.right[node]), indent + 1, lines, column)
    lines.append(f"{pad}}}")


def _leaf_masks(flat: Any, root: int) -> tuple[list[int], list[tuple[int, int]]]:
    """A tree as QuickScorer's bit vectors: its leaves left to right, and per split node the mask that
    keeps every leaf but those of its left subtree. AND-ing the masks of the nodes whose condition is
    false (the row goes right) leaves the row's exit leaf as the lowest set bit."""
    leaves: list[int] = []
    masks: list[tuple[int, int]] = []

    def visit(node: int) -> list[int]:
        if node < 0:
            leaves.append(~node)
            return [len(leaves) - 1]
        left = visit(int(flat.left[node]))
        right = visit(int(flat.right[node]))
        masks.append((node, ((1 << 64) - 1) & ~sum(1 << k for k in left)))
        return left + right

    visit(root)
    return leaves, masks


def _tree_nodes(flat: Any, root: int) -> list[int]:
    nodes, stack = [], [root]
    while stack:
        node = stack.pop()
        if node >= 0:
            nodes.append(node)
            stack += [int(flat.left[node]), int(flat.right[node])]
    return nodes


def _branchless_tree(flat: Any, t: int, root: int, acc: str, lines: list[str], slots: dict[int, int]) -> None:
    """Tree ``t`` over the column-major block ``xb`` (feature ``f`` in column ``slots[f]``, ``bs`` rows a
    column): every condition evaluated, the exit leaf found by bit vector; a loop the compiler turns into
    SIMD (8 rows per AVX-512 instruction). Adds the features it reads to ``slots``."""
    leaves, masks = _leaf_masks(flat, root)
    features = sorted({int(flat.feature[node]) for node, _ in masks})
    for f in features:
        slots.setdefault(f, len(slots))
    values = ", ".join(_literal(float(flat.leaf_value[leaf])) for leaf in leaves)
    lines.append(
        f"static NOINLINE void tree_{t}(const double* const* rows, const double* restrict xb, "
        "int64_t bs, int64_t m, double* restrict acc) {"
    )
    lines.append("  (void)rows;")
    lines.append(f"  static const double LEAF[{len(leaves)}] = {{{values}}};")
    lines.append("  for (int64_t i = 0; i < m; ++i) {")
    lines += [f"    const double f{f} = xb[{slots[f]} * bs + i];" for f in features]
    lines.append("    uint64_t bv = ~0ULL;")
    for node, keep in masks:
        condition = _condition(flat, node, f"f{int(flat.feature[node])}")
        lines.append(f"    bv &= {condition} ? ~0ULL : {keep}ULL;")
    # popcount(lowest set bit - 1) = count of trailing zeros: the exit leaf (vectorises, unlike ctz)
    lines.append(f"    {acc} += LEAF[__builtin_popcountll((bv & -bv) - 1)];")
    lines.append("  }")
    lines.append("}")


def _branching_trees(
    flat: Any, name: str, trees: list[tuple[int, int, str]], lines: list[str], packed: dict[int, int]
) -> None:
    """Trees ``(t, root, acc)`` as nested ``if``s over the block's packed rows (feature ``f`` at
    ``packed[f]``), walked one after the other for each row in one loop: only the nodes on each row's
    path are evaluated, and the loop's own cost (row pointer, accumulator) is paid once per group. Each
    tree still adds to its row's sum in tree order."""
    lines.append(
        f"static NOINLINE void {name}(const double* const* rows, const double* restrict xb, "
        "int64_t bs, int64_t m, double* restrict acc) {"
    )
    lines.append("  (void)xb; (void)bs;")
    lines.append("  for (int64_t i = 0; i < m; ++i) {")
    lines.append("    const double* r = rows[i];")
    lines.append("    double v;")
    for _t, root, acc in trees:
        _node_code(flat, root, 2, lines, packed)
        lines.append(f"    {acc} += v;")
    lines.append("  }")
    lines.append("}")


PRELUDE = """#include <stdint.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline))
"""
BRANCHLESS_MAX_SPLITS = 8  # trees this small: all conditions in SIMD beat walking one path (4x, 400 stumps);
# deeper ones (the runtime model's 31-leaf trees, ~5 nodes on a path) are faster walked (measured)
# Consecutive deep trees walked one after the other in ONE loop over the block's rows: the loop's cost
# is paid once per group and the CPU overlaps the walks (measured on the champion, rows/CPU-s of the
# runtime / traffic models: 1 tree a loop 670k / 890k, 4: 860k / 1.22M, 16: 1.09M / 1.85M, 64: 1.24M / 2.1M,
# 128: 1.12M / 2.12M -- 64 trees' code still fits the instruction cache).
TREES_PER_LOOP = 64


def c_source(flat: Any) -> str:
    """The C translation unit of one ensemble: ``kc_predict_raw(x, order, n, n_features, out)``.

    The trees walk a whole block of rows at a time (their code stays hot in the instruction cache and the
    branch predictor, and a call costs once per block, not per row): a small tree branch-free over a
    column-major copy of the block (SIMD), runs of up to ``TREES_PER_LOOP`` deeper ones as nested ``if``s
    in one loop. The entry calls them in tree order, and each row adds its trees' leaves in tree order,
    so each row's sum is LightGBM's (``GBDT::PredictRaw``)."""
    n_classes = int(flat.n_classes)
    lines = [PRELUDE]
    n_trees = len(flat.roots)
    slots: dict[int, int] = {}  # feature -> its column in the block's column-major copy
    # feature -> its place in the block's packed row-major copy (deep trees): only the features they split
    # on, the most split first, so the hot ones share a cache line (not 72 columns over 9 lines a row)
    deep = [int(r) for r in flat.roots if r >= 0 and len(_tree_nodes(flat, int(r))) > BRANCHLESS_MAX_SPLITS]
    deep_nodes = [node for r in deep for node in _tree_nodes(flat, r)]
    counts = np.bincount(flat.feature[deep_nodes], minlength=1) if deep_nodes else np.zeros(1, dtype=np.int64)
    packed = {int(f): k for k, f in enumerate(f for f in np.argsort(-counts, kind="stable") if counts[f] > 0)}
    units: list[str] = []  # the functions the entry calls, in tree order
    pending: list[tuple[int, int, str]] = []  # deep trees waiting to be walked in one loop

    def flush() -> None:
        if pending:
            units.append(f"trees_{pending[0][0]}")
            _branching_trees(flat, units[-1], list(pending), lines, packed)
            pending.clear()

    for t, root in enumerate(flat.roots):
        root = int(root)
        acc = f"acc[{(t % n_classes) * ROW_BLOCK} + i]"
        if root >= 0 and len(_tree_nodes(flat, root)) > BRANCHLESS_MAX_SPLITS:
            pending.append((t, root, acc))
            if len(pending) == TREES_PER_LOOP:
                flush()
            continue
        flush()
        units.append(f"tree_{t}")
        if root < 0:  # a single leaf
            lines.append(
                f"static NOINLINE void tree_{t}(const double* const* rows, "
                "const double* restrict xb, int64_t bs, int64_t m, double* restrict acc) {"
            )
            lines.append(
                f"  (void)rows; (void)xb; (void)bs; for (int64_t i = 0; i < m; ++i) {acc} += "
                f"{_literal(float(flat.leaf_value[~root]))};"
            )
            lines.append("}")
        else:
            _branchless_tree(flat, t, root, acc, lines, slots)
    flush()
    calls = "\n".join(f"    {unit}(rows, xb, bs, m, acc);" for unit in units)
    copy = "".join(f"      xb[{slot} * bs + i] = r[{f}];\n" for f, slot in slots.items())
    copy += "".join(f"      p[{place}] = r[{f}];\n" for f, place in packed.items())
    width = max(len(slots), 1)
    packed_width = max(len(packed), 1)
    lines.append(f"""
int kc_n_trees(void) {{ return {n_trees}; }}
int kc_n_columns_copied(void) {{ return {len(slots) + len(packed)}; }}
/* out: n x {n_classes}, overwritten. order: NULL, or the permutation of 0..n-1 to walk the rows in
   (rows that take the same paths one after the other); out stays in input order. */
int kc_predict_raw(const double* x, const int64_t* order, int64_t n, int64_t n_features, double* out) {{
  const double* rows[{ROW_BLOCK}];
  double acc[{ROW_BLOCK} * {n_classes}];
  /* the column-major copy: as many rows as one block needs (a single question: one row, a few bytes) */
  int64_t bs = n < {ROW_BLOCK} ? (n > 0 ? n : 1) : {ROW_BLOCK};
  double* xb = malloc(sizeof(double) * bs * ({width} + {packed_width}));
  if (!xb) return -1;
  double* xp = xb + bs * {width};  /* the packed row-major copy: row i at xp + i * {packed_width} */
  for (int64_t start = 0; start < n; start += {ROW_BLOCK}) {{
    int64_t m = n - start < {ROW_BLOCK} ? n - start : {ROW_BLOCK};
    for (int64_t i = 0; i < m; ++i) {{
      const double* r = x + (order ? order[start + i] : start + i) * n_features;
      double* p = xp + i * {packed_width};
      rows[i] = p;
{copy}    }}
    for (int64_t i = 0; i < {ROW_BLOCK} * {n_classes}; ++i) acc[i] = 0.0;  /* acc: class c at c * ROW_BLOCK */
{calls}
    for (int64_t i = 0; i < m; ++i) {{
      int64_t row = order ? order[start + i] : start + i;
      for (int c = 0; c < {n_classes}; ++c) out[row * {n_classes} + c] = acc[c * {ROW_BLOCK} + i];
    }}
  }}
  free(xb);
  return 0;
}}
""")
    return "\n".join(lines)


def compiler() -> str | None:
    """The C compiler to use: ``$CC`` or cc/gcc/clang on PATH, else None."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def model_hash(flat: Any, compiler_path: str) -> str:
    digest = hashlib.sha256(
        f"{GENERATOR_VERSION}|{compiler_path}|{' '.join(CFLAGS)}|{ROW_BLOCK}|{_cpu_id()}|".encode()
    )
    digest.update(f"{flat.objective}|{flat.n_classes}|{flat.depth}".encode())
    for name, array in sorted(flat.arrays().items()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:32]


def _cpu_id() -> str:
    """What ``-march=native`` compiles for: the CPU model and its flags (a library built on one CPU is
    not loaded on another that may lack its instructions)."""
    import platform

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() or "unknown"
    fields = [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith(("model name", "flags", "Features")) and ":" in line
    ]
    return hashlib.sha256("|".join([platform.machine(), *fields[:2]]).encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    from components.platform.config import get_settings

    return get_settings().cache_dir / "compiled-trees"


def sort_features(flat: Any) -> tuple[int, ...]:
    """The columns a large batch is sorted by before the walk (primary first): the categorical-split
    features, most split first, then the most split numeric feature. Why: rows that agree on them
    take mostly the same paths, so the branch predictor is right far more often -- measured 2.2x rows/s
    on the champion's 400 trees (random op questions: 215k -> 473k rows/CPU-s, the sort included).
    Each row's answer is unchanged: rows are independent, and the output goes back in input order."""
    if not len(flat.feature):  # every tree a single leaf: nothing to sort by
        return ()
    counts = np.bincount(flat.feature)  # the node arrays hold split nodes only (leaves are apart)
    categorical = {int(f) for f in flat.feature[flat.categorical]}
    by_count = [int(f) for f in np.argsort(-counts, kind="stable") if counts[f] > 0]
    keys = [f for f in by_count if f in categorical][:2]
    numeric = [f for f in by_count if f not in categorical][:1]
    return tuple(keys + numeric)


SORT_MIN_ROWS = 4 * ROW_BLOCK  # below this a sort costs more than it saves


def walk_order(x: np.ndarray, keys: tuple[int, ...]) -> np.ndarray | None:
    """The order to walk the rows of ``x`` in: sorted by the ``sort_features`` columns (None: as they are)."""
    keys = tuple(k for k in keys if k < x.shape[1])
    if len(x) < SORT_MIN_ROWS or not keys:
        return None
    *categorical, numeric = keys
    codes = [x[:, k] for k in categorical]
    if codes and all(np.all((c >= -1) & (c < 64)) for c in codes):  # NaN fails: the general sort below
        # One float key, one sort: the categorical codes (0..64 after the shift) above any signed-log
        # value (|v| < 128 for |value| < 1e55; NaN last within its group), instead of a 3-pass lexsort.
        key = np.zeros(len(x))
        for c in codes:
            key = key * 65.0 + np.trunc(c + 1.0)
        key = key * 512.0 + np.clip(np.nan_to_num(x[:, numeric], nan=255.0), -255.0, 255.0)
        return np.argsort(key)
    return np.lexsort([x[:, k] for k in reversed(keys)])  # the last key is lexsort's primary


class CompiledTrees:
    """A loaded library: ``raw(x)`` = the ensemble's raw scores (n x classes)."""

    def __init__(self, library: Path, n_classes: int, sort_keys: tuple[int, ...] = ()) -> None:
        self.library = library
        self._lib = ctypes.CDLL(str(library))
        self._fn = self._lib.kc_predict_raw
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_void_p,
        ]
        self.n_classes, self.sort_keys = n_classes, sort_keys

    def raw(self, x: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
        """Raw scores of the rows of ``x``, in input order. ``order``: the permutation to walk them in
        (rows are independent: it changes the speed, never an answer); by default ``walk_order``."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        if order is None:
            order = walk_order(x, self.sort_keys)
        out = np.empty((len(x), self.n_classes), dtype=np.float64)
        if len(x):
            if order is not None:
                order = np.ascontiguousarray(order, dtype=np.int64)
                if order.shape != (len(x),):
                    raise ValueError(f"order: {order.shape} for {len(x)} rows")
            if (
                self._fn(
                    x.ctypes.data,
                    None if order is None else order.ctypes.data,
                    len(x),
                    x.shape[1],
                    out.ctypes.data,
                )
                != 0
            ):
                raise MemoryError("compiled trees: no memory for a block of rows")
        return out


def compile_trees(flat: Any, cache_dir: Path | None = None, *, build: bool = True) -> CompiledTrees | None:
    """``flat`` as a compiled library from the cache (compiled into it first when ``build`` and it is
    not there yet); None when there is no compiler, the compile fails, or ``build`` is False and the
    cache has no copy."""
    cc = compiler()
    if cc is None:
        return None
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = model_hash(flat, cc)
    if key in _LOADED:
        return _LOADED[key]
    library = cache_dir / f"{key}.so"
    if not library.is_file():
        if not build:
            return None
        try:
            _build(c_source(flat), library, cc)
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        loaded = CompiledTrees(library, int(flat.n_classes), sort_features(flat))
    except OSError:
        return None
    _LOADED[key] = loaded
    return loaded


def library_path(flat: Any, cache_dir: Path | None = None) -> Path | None:
    """Where the compiled library of ``flat`` is (or will be) cached; None without a compiler."""
    cc = compiler()
    if cc is None:
        return None
    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / f"{model_hash(flat, cc)}.so"


def start_background_compile(npz_file: Path, library: Path) -> bool:
    """Compile the trees of ``npz_file`` into ``library`` in a detached process (once: a fresh
    ``.building`` marker beside the library means a compile is already running). True if started."""
    import sys
    import time

    from components.platform.config import PROJECT_ROOT

    marker = library.with_name(f"{library.name}.building")
    try:
        if marker.is_file() and time.time() - marker.stat().st_mtime < 900:
            return False
        library.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        }
        subprocess.Popen(
            [sys.executable, "-m", "components.serving.compiled", str(npz_file), str(library.parent)],
            env=env,
            cwd=str(PROJECT_ROOT),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return True
    except OSError:
        return False


def _build(source: str, library: Path, cc: str) -> None:
    """Compile ``source`` into ``library`` atomically (a temp name in the same folder, then a rename)."""
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kc-trees-") as tmp:
        c_file = Path(tmp) / "trees.c"
        c_file.write_text(source)
        partial = library.with_name(f".{library.name}.{os.getpid()}.tmp")
        try:
            try:
                subprocess.run(
                    [cc, *CFLAGS, "-o", str(partial), str(c_file)],
                    check=True,
                    capture_output=True,
                    timeout=600,
                )
            except subprocess.CalledProcessError:  # a compiler without -march=native: the portable flags
                subprocess.run(
                    [cc, *PORTABLE_CFLAGS, "-o", str(partial), str(c_file)],
                    check=True,
                    capture_output=True,
                    timeout=600,
                )
            os.replace(partial, library)
        finally:
            partial.unlink(missing_ok=True)


def _main(argv: list[str]) -> int:
    """``python -m components.serving.compiled MODEL.npz CACHE_DIR``: compile one model into the cache."""
    from components.serving.native import FlatTrees

    npz_file, cache_dir = Path(argv[0]), Path(argv[1])
    flat = FlatTrees.load(npz_file, attach=False)
    library = library_path(flat, cache_dir)
    try:
        return 0 if compile_trees(flat, cache_dir) is not None else 1
    finally:
        if library is not None:
            library.with_name(f"{library.name}.building").unlink(missing_ok=True)


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
