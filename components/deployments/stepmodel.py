"""The kernel time of any serving step of one deployment, from a few grids of op times.

A step of an iteration-level engine runs ``n`` decodes (one token each, at a mean context) and prefill
chunks (``p`` prompt tokens ending at context ``kv``). Its kernel time is
  linear(T)            every op but attention at T = n + sum(p) tokens (GEMMs, MoE, norms, all-reduces...)
+ head(S)              final norm, LM head and sampling of the S sequences that emit a token
+ attn_dec(n, ctx)     decode attention of n sequences at mean context ctx
+ sum attn_pre(p, kv)  each chunk's causal attention.
Each term is tabulated once per deployment on a grid (one op-time call per kind of op and GPU for a whole
bench: ``build_step_models``) and interpolated: linear in T between grid points, bilinear in (n, ctx) --
exact for the a + b n + c ctx + d n ctx of a memory-bound decode attention. Every grid point is at or
above its speed-of-light floor (``compose.time_ops``), so a step never beats the roofline.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from components.deployments.compose import SEQUENCE_KINDS, OpLine, _head_ops, _layer_ops, time_ops
from components.deployments.config import Deployment
from components.deployments.ops import OpTimeFn, roofline_op_time


def _geometric(top: float, ratio: float = 1.5) -> list[float]:
    out, x = [1.0], 1.0
    while x < top:
        x = max(x + 1.0, round(x * ratio))
        out.append(float(x))
    return out


TOKENS = _geometric(65536)  # step tokens (a step holds at most the budget plus the running decodes)
SEQS = _geometric(8192, 2.0)  # decode batch
CTX = _geometric(2**19, 2.0)  # context lengths


def _read_prefill_points() -> np.ndarray:
    """Which (chunk tokens, end context) points of the prefill-attention grid an interpolation can read: a
    chunk ends at a context holding it (``kv >= p``: the simulation's chunks end at the prompt done so far
    plus the chunk), so a cell (i, j) is read only where TOKENS[i] <= CTX[j + 1], and only its four corners
    are. The others (a third of the grid, chunks far longer than their context) are never timed."""
    tok, ctx = np.asarray(TOKENS), np.asarray(CTX)
    cells = tok[:-1, None] <= ctx[None, 1:]
    out = np.zeros((len(tok), len(ctx)), dtype=bool)
    for di in (0, 1):
        for dj in (0, 1):
            out[di : di + len(tok) - 1, dj : dj + len(ctx) - 1] |= cells
    return out


READ_PRE = _read_prefill_points()


def step_key(d: Deployment) -> tuple:
    """What a step's kernel time depends on (not the workload: isl, osl, concurrency)."""
    return (d.model, d.gpu.id, id(d.gpu), d.weight_dtype, d.kv_dtype, d.tp, d.pp, d.ep, d.dp)


@dataclass
class StepModel:
    """Interpolated kernel time (microseconds) of any step of one deployment."""

    tokens: np.ndarray
    linear_dec: np.ndarray  # non-attention ops, decode-phase op list (MLA: absorbed)
    linear_pre: np.ndarray  # non-attention ops, prefill-phase op list
    head: np.ndarray
    seqs: np.ndarray
    ctx: np.ndarray
    attn_dec: np.ndarray  # (len(seqs), len(ctx))
    attn_pre: np.ndarray  # (len(tokens) chunk sizes, len(ctx) end contexts)
    pp_hop_us: float = 0.0
    layers: int = 1
    allreduces: float = 0.0  # TP all-reduces per step (their start-up latency is an engine constant)
    # attention-DP ranks: each runs the attention of its own requests, and every rank steps together (the
    # MoE layers exchange their tokens), so a step lasts as long as its busiest rank's (``rank_step_us``)
    dp: int = 1

    def __post_init__(self) -> None:
        self._memo: dict[tuple, float] = {}
        self._decode_memo: dict[tuple[int, int | None], tuple[float, int, float]] = {}
        # plain lists: the simulation interpolates scalars millions of times (numpy per call is slower)
        self._tok, self._seq, self._ctx = self.tokens.tolist(), self.seqs.tolist(), self.ctx.tolist()
        self._lin_dec, self._lin_pre, self._head = (
            self.linear_dec.tolist(),
            self.linear_pre.tolist(),
            self.head.tolist(),
        )
        self._attn_dec, self._attn_pre = self.attn_dec.tolist(), self.attn_pre.tolist()

    @staticmethod
    def _cell(grid: list[float], x: float) -> tuple[int, float]:
        """The grid interval holding ``x`` (clamped to the grid) and x's fraction of the way across it."""
        x = min(max(x, grid[0]), grid[-1])
        i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
        return i, (x - grid[i]) / (grid[i + 1] - grid[i])

    @staticmethod
    def _lin(grid: list[float], x: float, values: list[float]) -> float:
        i, f = StepModel._cell(grid, x)
        return values[i] * (1 - f) + values[i + 1] * f

    @staticmethod
    def _blend(table: list[list[float]], i: int, fx: float, j: int, fy: float) -> float:
        top = table[i][j] * (1 - fy) + table[i][j + 1] * fy
        bottom = table[i + 1][j] * (1 - fy) + table[i + 1][j + 1] * fy
        return top * (1 - fx) + bottom * fx

    @staticmethod
    def _bilinear(gx: list[float], gy: list[float], table: list[list[float]], x: float, y: float) -> float:
        return StepModel._blend(table, *StepModel._cell(gx, x), *StepModel._cell(gy, y))

    def decode_us(self, n: int, ctx: float, padded: int | None = None) -> float:
        """Kernel time of the decode part alone (n sequences at mean context ctx); ``padded``: the CUDA-graph
        batch it runs at (its GEMMs and head run at that size; the dummy slots attend to nothing)."""
        if n <= 0:
            return 0.0
        found = self._decode_memo.get((n, padded))
        if found is None:  # what depends on the batch alone: the GEMMs and head, the batch's grid cell
            m = max(n, padded or n)
            rest = self._lin(self._tok, m, self._lin_dec) + self._lin(self._seq, m, self._head)
            found = self._decode_memo[(n, padded)] = (rest, *self._cell(self._seq, n))
        rest, i, fx = found
        # the decode attention: ``_bilinear`` with the batch's cell found once, and ``_cell`` and ``_blend``
        # written out for the context (the simulation's most frequent call: the same operations in the
        # same order, without two calls)
        grid = self._ctx
        x = grid[0] if ctx < grid[0] else grid[-1] if ctx > grid[-1] else ctx
        j = bisect_right(grid, x) - 1
        j = 0 if j < 0 else len(grid) - 2 if j > len(grid) - 2 else j
        fy = (x - grid[j]) / (grid[j + 1] - grid[j])
        row, below = self._attn_dec[i], self._attn_dec[i + 1]
        top = row[j] * (1 - fy) + row[j + 1] * fy
        bottom = below[j] * (1 - fy) + below[j + 1] * fy
        return rest + (top * (1 - fx) + bottom * fx) + self.pp_hop_us

    def step_us(self, n: int, ctx: float, chunks: Sequence[tuple[float, float]], finishing: int) -> float:
        """Kernel time of a step: n decodes at mean context ctx, prefill chunks (tokens, end context), and
        ``finishing`` chunks that end their prompt (they sample a first token)."""
        if not chunks:
            return self.decode_us(n, ctx)
        key = (n, round(ctx / 16.0), tuple(chunks), finishing)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._mixed_us(n, ctx, chunks, finishing)
        return found

    def rank_step_us(
        self, n: int, ctx: float, chunks: Sequence[tuple[float, float]], ending: Sequence[bool]
    ) -> tuple[float, float, int]:
        """(step, decode part, sequences of the busiest rank) of a step of the whole attention-DP worker:
        ``n`` decodes spread evenly over the ranks, the prefill chunks dealt to them in turn (``ending``:
        which chunks end their prompt). With one rank: ``step_us`` and ``decode_us`` as they are."""
        ranks = max(self.dp, 1)
        per = -(-n // ranks) if n else 0
        dec = self.decode_us(per, ctx) if per else 0.0
        if not chunks:
            return dec, dec, per
        worst, seqs = dec, per
        for r in range(min(ranks, len(chunks))):
            mine = list(chunks[r::ranks])
            ends = sum(ending[r::ranks])
            total = self.step_us(per, ctx, mine, ends)
            if total > worst:
                worst, seqs = total, per + ends
        return worst, dec, seqs

    def _mixed_us(self, n: int, ctx: float, chunks: Sequence[tuple[float, float]], finishing: int) -> float:
        total = n + sum(p for p, _ in chunks)
        out = self._lin(self._tok, total, self._lin_pre) + self.pp_hop_us
        sampled = n + finishing
        if sampled:
            out += self._lin(self._seq, sampled, self._head)
        if n:
            out += self._bilinear(self._seq, self._ctx, self._attn_dec, n, ctx)
        for p, kv in chunks:
            out += self._bilinear(self._tok, self._ctx, self._attn_pre, p, kv)
        return out


def _attention(lines: list[OpLine]) -> list[OpLine]:
    return [x for x in lines if x.kind in SEQUENCE_KINDS]


def _rest(lines: list[OpLine]) -> list[OpLine]:
    return [x for x in lines if x.kind not in SEQUENCE_KINDS]


def _grid_lines(d: Deployment) -> dict[str, list[OpLine]]:
    """The untimed op lines of every grid of one deployment: one line per op with its shape over the whole
    grid (arrays), so a deployment is a few dozen lines, not thousands."""
    layers = d.model.layers
    tok = np.asarray(TOKENS)
    seq = np.asarray(SEQS)
    n2, c2 = (a.ravel() for a in np.meshgrid(seq, np.asarray(CTX), indexing="ij"))
    p2, k2 = (a[READ_PRE] for a in np.meshgrid(tok, np.asarray(CTX), indexing="ij"))
    out = {
        "linear_dec": _rest(_layer_ops(d, "decode", tok, tok, 1.0, tok, layers)),
        "head": _head_ops(d, "decode", seq),
        "attn_dec": _attention(_layer_ops(d, "decode", n2, n2, 1.0, c2, layers)),
        "attn_pre": _attention(_layer_ops(d, "prefill", p2, 1.0, np.minimum(p2, k2), k2, layers)),
    }
    if d.model.is_mla:  # MLA's prefill decompresses the latent: other GEMMs than the absorbed decode
        out["linear_pre"] = _rest(_layer_ops(d, "prefill", tok, 1.0, tok, tok, layers))
    return out


def _sum(lines: list[OpLine], size: int) -> np.ndarray:
    """Per grid point: the lines' times summed (count included)."""
    total = np.zeros(size)
    for line in lines:
        total = total + np.broadcast_to(np.asarray(line.each_us, dtype="float64"), (size,))
    return total


def _prefill_table(read: np.ndarray) -> np.ndarray:
    """The (tokens, context) prefill-attention table from its readable points (``READ_PRE``); each point
    no interpolation reads holds its row's first readable value (finite, never used)."""
    table = np.zeros(READ_PRE.shape)
    table[READ_PRE] = read
    first = table[np.arange(len(table)), READ_PRE.argmax(axis=1)]
    return np.where(READ_PRE, table, first[:, None])


# Step models kept per op-time function across calls (a server's or notebook's next rank or question on the
# same GPUs: the grids do not depend on the workload), at most KEEP of them per function.
_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple, tuple[Any, StepModel]]] = weakref.WeakKeyDictionary()
KEEP = 1024


def build_step_models(deployments: Sequence[Deployment], op_time: OpTimeFn | None = None) -> list[StepModel]:
    """One :class:`StepModel` per deployment; equal step keys share one, and each GPU's lines are timed in
    one batch (``compose.time_ops``: one op-time call per kind of op). An op engine's op times
    (``ops.engine_op_time``) answer each serving engine's deployments from that engine's own measured
    kernels (``for_framework``): its step is the kernels it runs, not every framework's pooled. Models
    built before with the same op-time function are reused (``_KEPT``)."""
    fn = op_time or roofline_op_time
    own = getattr(fn, "own_kernels", lambda spec: True) if hasattr(fn, "for_framework") else None
    try:
        kept = _KEPT.setdefault(fn, {})
    except TypeError:  # not weak-referenceable: nothing kept
        kept = {}

    def key(d: Deployment) -> tuple:
        return (d.framework if own is not None and own(d.gpu) else "", step_key(d))

    missing = [d for d in deployments if key(d) not in kept]
    if len(kept) + len(missing) > KEEP:
        kept.clear()
        missing = list(deployments)
    built = {}
    if missing:
        # the entry holds the GPU spec: the id(spec) in its key is not reused while it is kept
        for d, model in zip(missing, _from_disk_or_built(missing, fn, key), strict=True):
            kept[key(d)] = (d.gpu, model)
            built[key(d)] = model
    # a kept model starts this call with empty memos (``step_us`` rounds its key's context): an answer
    # never depends on what was asked before
    for d in deployments:
        if key(d) not in built:
            built[key(d)] = replace(kept[key(d)][1])
    return [built[key(d)] for d in deployments]


def _from_disk_or_built(deployments: Sequence[Deployment], fn: OpTimeFn, key: Any) -> list[StepModel]:
    """The step models of ``deployments``: those the disk cache holds (``fn.step_cache``: folder and state
    tag, production's op times only -- ``step_cache``), the others built and stored there."""
    where = getattr(fn, "step_cache", None)
    if where is None:
        return _build_models(deployments, fn)
    from components.deployments import step_cache

    folder, tag = where
    names = [step_cache.model_name(tag, key(d)[0], d) for d in deployments]
    found = {name: step_cache.load(folder, name, StepModel) for name in set(names)}
    out = [found[name] for name in names]
    todo = [i for i, m in enumerate(out) if m is None]
    if todo:
        for i, model in zip(todo, _build_models([deployments[i] for i in todo], fn), strict=True):
            out[i] = model
        for name, model in {names[i]: out[i] for i in todo}.items():  # equal keys: one file
            step_cache.store(folder, name, model)
    return [m for m in out if m is not None]


def _build_models(deployments: Sequence[Deployment], fn: OpTimeFn) -> list[StepModel]:
    per_framework = getattr(fn, "for_framework", None)
    if per_framework is None:
        return _build(deployments, fn)
    own = getattr(fn, "own_kernels", lambda spec: True)  # GPUs without measured kernels share one timing
    out: list[StepModel | None] = [None] * len(deployments)
    by_name: dict[str, list[int]] = {}
    for i, d in enumerate(deployments):
        by_name.setdefault(d.framework if own(d.gpu) else "", []).append(i)
    for name, members in by_name.items():
        models = _build([deployments[i] for i in members], per_framework(name) if name else fn)
        for i, model in zip(members, models, strict=True):
            out[i] = model
    return [m for m in out if m is not None]


def _build(deployments: Sequence[Deployment], fn: OpTimeFn) -> list[StepModel]:
    keys: dict[tuple, int] = {}
    firsts: list[Deployment] = []
    for d in deployments:
        k = step_key(d)
        if k not in keys:
            keys[k] = len(firsts)
            firsts.append(d)
    grids = [_grid_lines(d) for d in firsts]
    by_gpu: dict[int, list[int]] = {}
    for i, d in enumerate(firsts):
        by_gpu.setdefault(id(d.gpu), []).append(i)
    for members in by_gpu.values():
        lines = [x for i in members for part in grids[i].values() for x in part]
        time_ops(lines, firsts[members[0]].gpu, fn)
    models = []
    nt, ns, nc = len(TOKENS), len(SEQS), len(CTX)
    for d, g in zip(firsts, grids, strict=True):
        lin_dec = _sum(g["linear_dec"], nt)
        models.append(
            StepModel(
                tokens=np.asarray(TOKENS),
                linear_dec=lin_dec,
                linear_pre=_sum(g["linear_pre"], nt) if "linear_pre" in g else lin_dec,
                head=_sum(g["head"], ns),
                seqs=np.asarray(SEQS),
                ctx=np.asarray(CTX),
                attn_dec=_sum(g["attn_dec"], ns * nc).reshape(ns, nc),
                attn_pre=_prefill_table(_sum(g["attn_pre"], int(READ_PRE.sum()))),
                pp_hop_us=(d.pp - 1) * 5.0,
                layers=d.model.layers,
                allreduces=2.0 * d.model.layers if d.tp > 1 else 0.0,
                dp=max(int(d.dp), 1),
            )
        )
    return [models[keys[step_key(d)]] for d in deployments]
