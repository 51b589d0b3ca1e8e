"""Per-thread instruction counts of a source question's kernels, loops counted by the source.

The SASS of a kernel says which instructions sit in loops, not how often the loops run. Here the
source is compiled a second time with every loop pinned (``#pragma unroll 1``, static.loops) so
that each source loop is one SASS loop; when the compiled nest matches the source nest, each
loop's body runs its source trip count (known from constants, macros, template and scalar
arguments, the launch) times its enclosing loops'. A loop whose bound stays unknown runs
``LOOP_TRIPS`` times and the note names what it lacks; a nest that does not match falls back
to the plain assumption for the whole kernel, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from components.programs.errors import ProgramError


@dataclass
class LoopCount:
    """How one kernel's loops were counted: ``dynamic`` per-thread counts (None: every loop body
    assumed ``LOOP_TRIPS`` times), the source loops, and why the source could not count them."""

    kernel: str
    dynamic: dict[str, float] | None = None
    loops: list[Any] = field(default_factory=list)
    why: str | None = None
    active: float = 1.0  # share of the launched threads past the kernel's thread-index guard
    guard: str | None = None
    depth_matched: int = 0  # compiled loops (unswitched or split copies) given their depth's trips
    branches: str | None = None  # lane-guarded branches weighed by their share (static.guards)
    atomics: list[float] | None = None  # mean rounds of the compiler's atomic retry loops

    @property
    def known(self) -> bool:
        """Every loop's trip count is known (a kernel without loops counts as known)."""
        return self.why is None and all(lp.trips is not None for lp in self.loops)

    def describe(self) -> str:
        if self.why:
            return f"{self.kernel}: {self.why}"
        retries = (
            f" (atomic retry loops: {', '.join(f'{r:g}' for r in self.atomics)} rounds per thread from "
            "the threads sharing each address)"
            if self.atomics
            else ""
        )
        if not self.loops:
            return f"{self.kernel}: no loops" + retries + self._guard_note()
        parts = [
            f"{lp.header} x{lp.trips:g}"
            if lp.trips is not None
            else f"{lp.header} unknown ({', '.join(lp.unknown)})"
            for lp in self.loops
        ]
        matched = (
            f" ({self.depth_matched} compiled loops matched by nesting depth)" if self.depth_matched else ""
        )
        return f"{self.kernel}: " + "; ".join(parts) + matched + retries + self._guard_note()

    def _guard_note(self) -> str:
        out = f" ({self.active:.1%} of the threads pass {self.guard}: the rest exit)" if self.guard else ""
        return out + (f" ({self.branches})" if self.branches else "")


def check_args(args: Any) -> dict[str, float]:
    """Kernel scalar arguments of a question: names to finite numbers."""
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ProgramError(
            'launch args: expected an object of kernel argument names to numbers, e.g. {"n": 4096}'
        )
    out: dict[str, float] = {}
    for name, value in args.items():
        if not isinstance(name, str) or not all(w.isidentifier() for w in name.split(".")):
            raise ProgramError(f"launch args: {name!r} is not a kernel argument name (NAME or STRUCT.FIELD)")
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise ProgramError(f"launch args {name}: {value!r} is not a number")
        out[name] = int(value) if float(value).is_integer() else float(value)
    return out


def check_arg_names(source: str, kernels: list[Any], args: dict[str, float]) -> None:
    """Every given argument names a scalar parameter of at least one analysed kernel."""
    from components.features.static.loops import kernel_param_names, kernel_parameters

    if not args:
        return
    known: set[str] = set()
    whole: set[str] = set()  # every parameter: a struct one takes its fields (p.k)
    for k in kernels:
        scalars, _ = kernel_parameters(source, k.short_name)
        known.update(scalars)
        whole.update(kernel_param_names(source, k.short_name))
    for name in args:
        if name not in known and not ("." in name and name.split(".")[0] in whole):
            raise ProgramError(
                f"launch args: {name!r} is no scalar parameter of the kernel(s) "
                f"({', '.join(sorted(known)) or 'none has scalar parameters'})"
            )


def count_loops(source: str, kernel: Any, pinned: Any | None, known: Any) -> LoopCount:
    """Per-thread dynamic counts of ``kernel`` from the pinned compile and the source's trips."""
    from components.features.static.guards import guarded_loops
    from components.features.static.loops import kernel_loops, match_nest
    from components.features.static.reduction import tree_reductions
    from components.models.cuda_estimate import LOOP_TRIPS, counted_instructions, nest_counts

    name = kernel.instance or kernel.short_name
    if int(kernel.loops.get("count", 0)) == 0:
        return LoopCount(name, None, [])
    loops = kernel_loops(source, kernel.short_name, kernel.instance, known)
    if loops is not None:
        tree_reductions(source, kernel.short_name, loops, known)
        guarded_loops(source, kernel.short_name, loops, known)
    if loops is None:
        return LoopCount(
            name, why=f"kernel body not found in the source: loop bodies assumed {LOOP_TRIPS:g} runs"
        )
    if pinned is None or not pinned.loop_detail:
        return LoopCount(
            name, loops=loops, why=f"no loop nest compiled: loop bodies assumed {LOOP_TRIPS:g} runs"
        )
    detail = pinned.loop_detail
    cas = _cas_trips(source, kernel, known, detail) if not match_nest(loops, detail) else None
    if cas is not None:  # the compiler's atomic retry loops set aside: the rest is the source's nest
        detail = [d for d in detail if not d.get("cas")]
        detail = [{**d, "parent": _renumber(pinned.loop_detail, d.get("parent", -1))} for d in detail]
    if not match_nest(loops, detail):
        by_depth = _trips_by_depth(loops, detail)
        if by_depth is None:
            return LoopCount(
                name,
                loops=loops,
                why=(
                    f"{len(loops)} source loops vs {len(detail)} compiled ones (device functions "
                    f"or loops the compiler removed): loop bodies assumed {LOOP_TRIPS:g} runs"
                ),
            )
        trips, depth_matched = by_depth, len(detail)
    else:
        trips, depth_matched = [lp.trips for lp in loops], 0
    trips = _assumed(detail, trips)
    if cas is not None:
        trips = _merge_cas(pinned.loop_detail, trips, cas)
    dynamic = nest_counts(*counted_instructions(pinned), pinned.loop_detail, trips)
    count = LoopCount(name, dynamic, loops, depth_matched=depth_matched)
    count.atomics = cas
    return count


def count_kernel(
    source: str, kernel: Any, pinned: Any | None, known: Any, stripped: Any | None = None
) -> LoopCount:
    """``count_loops``; then the branches few threads take (static.guards: ``stripped`` is the kernel
    compiled without them) weighed by the share of threads that take them; then the share of threads a
    thread-index guard lets through (static.guards.thread_guard): the per-thread counts are averaged over
    every launched thread."""
    from components.features.static.guards import thread_guard
    from components.models.cuda_estimate import counted_instructions, dynamic_counts

    count = count_loops(source, kernel, pinned, known)
    if stripped is not None:
        _weigh_lane_guards(count, source, kernel, stripped, known)
    guard = thread_guard(source, kernel.short_name, known)
    if guard is None or guard[0] >= 1.0:
        return count
    share, text = guard
    per_thread = count.dynamic if count.dynamic is not None else dynamic_counts(*counted_instructions(kernel))
    count.dynamic = {c: n * share for c, n in per_thread.items()}
    count.active, count.guard = share, text
    return count


def _weigh_lane_guards(count: LoopCount, source: str, kernel: Any, stripped: Any, known: Any) -> None:
    """Straight-line instructions only lane-guarded branches hold (the full compile's minus the stripped
    one's), counted per thread at the guards' mean share instead of once for every thread."""
    from components.features.static.guards import lane_guards
    from components.models.cuda_estimate import counted_instructions, dynamic_counts

    guards = lane_guards(source, kernel.short_name, known)
    if not guards:
        return
    share = sum(g.share for g in guards) / len(guards)
    full, full_loop = counted_instructions(kernel)
    less, less_loop = counted_instructions(stripped)
    per_thread = count.dynamic if count.dynamic is not None else dynamic_counts(full, full_loop)
    moved = False
    for c, n in full.items():
        branch = (n - full_loop.get(c, 0)) - (less.get(c, 0) - less_loop.get(c, 0))
        if c == "total" or branch <= 0 or c not in per_thread:
            continue
        per_thread[c] = max(per_thread[c] - branch * (1.0 - share), 0.0)
        moved = True
    if moved:
        count.dynamic = per_thread
        conditions = ", ".join(dict.fromkeys(g.condition for g in guards))
        count.branches = f"branches under {conditions}: counted for {share:.2%} of the threads"


def _cas_trips(source: str, kernel: Any, known: Any, detail: list[dict]) -> list[float] | None:
    """Mean rounds of each compiled atomic retry loop (static.atomics); None when there is none."""
    from components.features.static.atomics import atomic_contention, cas_retries

    loops = sum(1 for d in detail if d.get("cas"))
    if not loops:
        return None
    return cas_retries(atomic_contention(source, kernel.short_name, known), loops)


def _renumber(detail: list[dict], parent: int) -> int:
    """``parent`` (an index into ``detail``) as an index into ``detail`` without its CAS loops: a CAS loop
    parent is replaced by its own parent."""
    while 0 <= parent < len(detail) and detail[parent].get("cas"):
        parent = int(detail[parent].get("parent", -1))
    if parent < 0:
        return -1
    return sum(1 for d in detail[:parent] if not d.get("cas"))


def _merge_cas(detail: list[dict], trips: list[float], cas: list[float]) -> list[float]:
    """Trips of every compiled loop in order: the source's for the others, the retry rounds for CAS loops."""
    rest, rounds = iter(trips), iter(cas)
    return [next(rounds) if d.get("cas") else next(rest) for d in detail]


def _assumed(detail: list[dict], trips: list[float | None]) -> list[float]:
    """Trips with the unknown ones assumed: ``LOOP_TRIPS`` runs of the body per run of its nearest
    enclosing loop of known count -- an unknown loop inside another unknown one runs once per run of
    it, so that guesses do not compound (``LOOP_TRIPS`` is the flat runs of a loop body, measured with
    no nesting; gpuFLOPBench ``bonds``: while-loops three deep counted 8^3 times, 4.3x Nsight)."""
    from components.models.cuda_estimate import LOOP_TRIPS

    out: list[float] = []
    for i, t in enumerate(trips):
        if t is not None:
            out.append(t)
            continue
        parent, guessed = int(detail[i].get("parent", -1)), False
        while 0 <= parent < i and not guessed:
            guessed = trips[parent] is None
            parent = int(detail[parent].get("parent", -1))
        out.append(1.0 if guessed else LOOP_TRIPS)
    return out


def _trips_by_depth(loops: list[Any], detail: list[dict]) -> list[float | None] | None:
    """Trips for compiled loops that do not line up one to one with the source's (the compiler
    unswitched or split some): each compiled loop at nesting depth d runs as the source loops at
    depth d, when those agree on one trip count (unknown ones None); else None."""

    def depths(parents: list[int]) -> list[int]:
        out: list[int] = []
        for p in parents:
            out.append(out[p] + 1 if 0 <= p < len(out) else 0)
        return out

    source_depth = depths([lp.parent for lp in loops])
    trips_at: dict[int, set[float]] = {}
    for lp, d in zip(loops, source_depth, strict=True):
        trips_at.setdefault(d, set()).add(lp.trips)
    out: list[float | None] = []
    for d in depths([int(x.get("parent", -1)) for x in detail]):
        if len(trips_at.get(d, set())) != 1:
            return None
        out.append(next(iter(trips_at[d])))
    return out


def loop_note(counts: list[LoopCount]) -> str:
    """One note on how the kernels' loops were counted and, when some are unknown, what they lack."""
    from components.models.cuda_estimate import LOOP_TRIPS

    looped = [c for c in counts if c.loops or c.why or c.guard or c.branches]
    if not looped:
        return "static estimate: no loops, per-thread instruction counts exact"
    unknown = sorted({n for c in counts for lp in c.loops if lp.trips is None for n in lp.unknown})
    head = (
        "loop trip counts from the source"
        if all(c.known for c in counts)
        else f"some loop trip counts unknown (each assumed {LOOP_TRIPS:g})"
        + (f"; give {', '.join(unknown)} with --arg NAME=V or --define NAME=V" if unknown else "")
    )
    how = "; loops compiled un-unrolled to count them" if any(c.loops for c in counts) else ""
    return f"static estimate: {head}{how}: " + " | ".join(c.describe() for c in looped)


__all__ = ["LoopCount", "check_arg_names", "check_args", "count_kernel", "count_loops", "loop_note"]
