"""Worker counts of a disaggregated run that records none, derived the way AIConfigurator sizes one.

AIConfigurator (``DisaggInferenceSession.find_best_disagg_result_under_constraints``, its ``_match_workers``)
does not simulate the two pools to size them: it rate-matches. Per candidate (prefill workers x, decode
workers y) the system's throughput is ``min(x * P * 0.9, y * D * 0.92)`` -- P and D one worker's
requests per second, 0.9 and 0.92 its documented degradation factors (prefill pipeline bubbles, decode
batch under-saturation) -- and it keeps the pair with the most throughput per GPU.

A closed-loop run of total concurrency C fixes what the decode side holds (C = batch x attention DP x y),
so here, per run:

- y and the decode batch: the largest power-of-two batch per attention-DP rank, at most 64, that splits C
  over whole workers (``power_of_two_decode_workers``: what the recorded runs deployed -- it reproduces the
  recorded decode split of 29 of the 36 disaggregated runs that record one, packing each worker's KV cache
  full 8); where none does, the fewest decode workers whose KV cache holds their share of C
  (``fewest_decode_workers``, the engine's memory fraction as ``serve.kv_capacity`` sizes it);
- x: AIConfigurator's objective over 1..``MAX_PREFILL_WORKERS`` at that y, with P from one request's
  prefill and D from the decode step at the worker's batch (kernel times of the given op source).

The run records no total GPU count to bound x + y: the bound is AIConfigurator's own worker limit. The
answer says the counts were derived (``workers_derived``) and what they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from components.deployments.compose import compose_many
from components.deployments.config import Deployment, DeploymentError
from components.deployments.ops import OpTimeFn

# AIConfigurator's rate-matching degradation factors (sdk ``set_rate_matching_degradation_factors``
# defaults: prefill throughput x 0.9 for pipeline bubbles, decode x 0.92 for batch under-saturation)
PREFILL_DEGRADATION = 0.9
DECODE_DEGRADATION = 0.92
MAX_PREFILL_WORKERS = 32  # AIConfigurator's MAX_PREFILL_WORKERS: the most prefill workers it considers
MAX_DECODE_WORKERS = 32  # AIConfigurator's max_decode_worker default: the most decode workers it considers
# The decode batch per attention-DP rank the recorded disaggregated runs deployed (the 36 with worker counts
# and a ``_c<C>_`` id in silicon_sample.csv, an input like their TP size): a power of two from 4 to 64 on
# every H200 run (64 the largest), 2 / 3 / 10 / 20 / 77 on the H100 ones; AIConfigurator's benchmark runs
# C = decode workers x batch x attention DP (``benchmark/*.rule``: ``estimated_concurrency``).
DECODE_BATCH_MAX = 64
WORKER_COLUMNS = ("prefill_num_workers", "decode_num_workers")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def needs_workers(row: Mapping[str, Any]) -> bool:
    """A disaggregated run recording neither or only one of its worker counts."""
    return row.get("mode") == "disagg" and any(_missing(row.get(c)) for c in WORKER_COLUMNS)


def fewest_decode_workers(dec: Deployment, total: int) -> tuple[int, int]:
    """(decode workers, clients per attention-DP rank): the fewest workers whose KV cache -- what the
    serving engine's memory fraction leaves, as the simulator sizes it (``serve.kv_capacity``) -- holds
    every client of ``total``, each worker's share at once."""
    from components.deployments.engines.registry import engine_for
    from components.deployments.serve import kv_capacity

    engine = engine_for(dec.framework, dec.gpu, fitted=False)
    for workers in range(1, total + 1):
        batch = math.ceil(total / (workers * dec.dp))
        if kv_capacity(dec.with_(concurrency=batch), engine)[1]["concurrent_requests"] >= batch:
            return workers, batch
    return total, 1  # one client per worker; kv_capacity already refused a worker that holds none


def power_of_two_decode_workers(dec: Deployment, total: int) -> tuple[int, int]:
    """(decode workers, clients per attention-DP rank) as AIConfigurator's benchmarked disaggregated runs
    are sized: the largest power-of-two batch per rank, at most ``DECODE_BATCH_MAX``, that splits ``total``
    evenly over whole workers (C = workers x batch x DP). Where none does within ``MAX_DECODE_WORKERS``
    workers, or the engine's KV cache does not hold that batch, the fewest workers that hold the clients
    (``fewest_decode_workers``). On the 36 recorded disaggregated runs this reproduces the recorded (decode
    workers) of 29 (packing each worker's KV cache full: 8; ``benchmarks/silicon_disagg_split.py agree``)."""
    from components.deployments.engines.registry import engine_for
    from components.deployments.serve import kv_capacity

    dp = max(int(dec.dp), 1)
    if total % dp == 0:
        per_rank, batch = total // dp, 1
        while batch * 2 <= DECODE_BATCH_MAX and per_rank % (batch * 2) == 0:
            batch *= 2
        workers = per_rank // batch
        engine = engine_for(dec.framework, dec.gpu, fitted=False)
        fits = kv_capacity(dec.with_(concurrency=batch), engine)[1]["concurrent_requests"] >= batch
        if workers <= MAX_DECODE_WORKERS and fits:
            return workers, batch
    return fewest_decode_workers(dec, total)


def match_prefill_workers(
    prefill_rate: float, prefill_gpus: int, decode_rate: float, decode_gpus: int
) -> int:
    """AIConfigurator's ``_match_workers`` objective at a fixed decode side (rates in requests per second
    of all the decode workers together, one prefill worker; GPUs of the decode side, one prefill worker):
    the prefill worker count with the most rate-matched throughput per GPU."""
    best, best_x = -1.0, 1
    for x in range(1, MAX_PREFILL_WORKERS + 1):
        rate = min(x * prefill_rate * PREFILL_DEGRADATION, decode_rate * DECODE_DEGRADATION)
        per_gpu = rate / (x * prefill_gpus + decode_gpus)
        if per_gpu > best:
            best, best_x = per_gpu, x
    return best_x


def id_concurrency(row: Mapping[str, Any]) -> int | None:
    """The run's whole-system concurrency as its id records it (``_c<C>_``), or None."""
    import re

    found = re.search(r"_c(\d+)_", str(row.get("id", "")))
    return int(found.group(1)) if found else None


def total_clients(row: Mapping[str, Any]) -> int:
    """The run's whole-system concurrency: the ``_c<C>_`` of its id."""
    total = id_concurrency(row)
    if total is None:
        raise DeploymentError(
            "concurrency: a disaggregated run with no worker counts and no _c<C>_ in its id"
        )
    return total


def with_derived_workers(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None = None,
    decode_rule: Callable[[Deployment, int], tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """``runs`` with the worker counts of every disaggregated run that records none derived (module
    docstring: the decode split by ``decode_rule``, default ``power_of_two_decode_workers``; the prefill
    workers by rate matching) and ``workers_derived`` True on those rows; a run whose workers cannot be
    derived keeps its blanks (and is refused later, with its reason)."""
    from components.deployments.bench_silicon import silicon_deployments

    out = runs.copy()
    out["workers_derived"] = False
    todo = [i for i, row in zip(out.index, out.to_dict("records"), strict=True) if needs_workers(row)]
    if not todo:
        return out
    plans: list[tuple[Any, int, Deployment, Deployment]] = []
    for i in todo:
        row = out.loc[i].to_dict()
        try:
            total = total_clients(row)
            one = {**row, "prefill_num_workers": 1.0, "decode_num_workers": 1.0, "decode_batch_size": None}
            pre, dec = silicon_deployments(one, catalog, datasets_dir)
            workers, batch = (decode_rule or power_of_two_decode_workers)(dec, total)
        except (DeploymentError, LookupError):
            continue  # silicon_deployments refuses the run again, naming why
        plans.append((i, workers, pre.with_(concurrency=1), dec.with_(concurrency=batch)))
    phases = compose_many([d for p in plans for d in (p[2], p[3])], op_time)
    for k, (i, workers, pre, dec) in enumerate(plans):
        one_us, step_us = phases[2 * k].prefill_one_us, phases[2 * k + 1].decode_kernels_us
        prefill_rate = pre.dp * 1e6 / one_us  # requests per second, one prefill worker
        batch = dec.concurrency * dec.dp
        decode_rate = workers * batch * 1e6 / (dec.osl * step_us)  # every decode worker together
        x = match_prefill_workers(prefill_rate, pre.gpus, decode_rate, workers * dec.gpus)
        out.loc[i, "prefill_num_workers"] = float(x)
        out.loc[i, "decode_num_workers"] = float(workers)
        out.loc[i, "workers_derived"] = True
    return out


def derived_note(runs: pd.DataFrame) -> str:
    """One line stating the derived worker counts (how many runs, which (prefill, decode) splits)."""
    if "workers_derived" not in runs or not runs["workers_derived"].any():
        return ""
    got = runs[runs["workers_derived"]]
    splits = got.groupby(["prefill_num_workers", "decode_num_workers"]).size().sort_values(ascending=False)
    shown = ", ".join(f"{int(p)}P{int(d)}D x {n}" for (p, d), n in splits.head(8).items())
    return (
        f"{len(got)} disaggregated runs record no worker counts: derived (the largest power-of-two decode "
        f"batch per rank up to {DECODE_BATCH_MAX} splitting the clients over whole decode workers, else the "
        f"fewest holding their KV cache; prefill workers by AIConfigurator's rate matching, maximising "
        f"min({PREFILL_DEGRADATION} x prefill, {DECODE_DEGRADATION} x decode) throughput per GPU): "
        f"{shown}{' ...' if len(splits) > 8 else ''}"
    )


__all__ = [
    "derived_note",
    "fewest_decode_workers",
    "id_concurrency",
    "match_prefill_workers",
    "needs_workers",
    "power_of_two_decode_workers",
    "total_clients",
    "with_derived_workers",
]
