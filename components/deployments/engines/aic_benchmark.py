"""The engine settings AIConfigurator's benchmark gives an aggregated worker: how the measured serving runs
(``silicon_sample.csv``) were deployed, which is not each engine's out-of-the-box default.

AIConfigurator generates each benchmarked deployment's engine arguments from its rule files
(``src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule`` of ai-dynamo/aiconfigurator,
mapped to engine flags by ``generator/config/backend_config_mapping.yaml``; the TensorRT-LLM defaults from
``backend_templates/trtllm/extra_engine_args.yaml.j2``). For an aggregated worker at concurrency C and input
length ISL:

- ``max_batch_size`` = C: vLLM ``--max-num-seqs``, SGLang ``--max-running-requests``, TensorRT-LLM
  ``max_batch_size``;
- the step's token budget ``max_num_tokens`` = C + ISL + 1500 (vLLM ``--max-num-batched-tokens``,
  TensorRT-LLM ``max_num_tokens``): room for every running decode and about one prompt, not the engine's
  8192 -- so a wave of C new prompts enters over ~C steps, one or two prompts each;
- SGLang: ``--max-prefill-tokens`` ISL + 1500 (a prefill batch's new tokens, within the default
  ``--chunked-prefill-size``) and ``enable_mixed_chunk`` for agg (prefill steps carry the running decodes) --
  emitted as a flag only from the SGLang 0.5.6 template on (``sglang/cli_args.0.5.6.post2.j2`` tests the
  mapped key ``enable-mixed-chunk``; ``cli_args.0.5.1.post1.j2`` tests ``enable-mix-chunk``, a key the
  mapping never sets, so the 0.5.1 runs served without it); a version with no template of its own (0.5.8,
  0.5.9, a named build) is rendered by the default ``cli_args.j2``, which passes it;
- CUDA graphs captured at every batch size 1..C (``cuda_graph_batch_sizes = range(1, C + 1)``), so a decode
  batch runs at its own size (no padding);
- TensorRT-LLM: ``enable_chunked_prefill`` false and ``kv_cache_config.free_gpu_memory_fraction`` 0.80 (the
  template's default; the engine's own is 0.9; not applied, see ``PARTS``).

A disaggregated run's workers (the same rule files, ``prefill`` and ``decode`` lines): a prefill worker
``max_batch_size`` = the run's prefill batch size, else 1 (per attention-DP rank), ``max_num_tokens`` = ISL +
1500 (SGLang ``--max-prefill-tokens``); a decode worker ``max_batch_size`` = its batch (default 128),
``max_num_tokens`` = that batch, CUDA graphs at 1..batch (``as_disaggregated``).

Only the bench's simulation of those runs uses this (the run's deployment is an input, like its TP size);
a user's deployment question is answered with the engine's own defaults (``engines/<name>.py``).
"""

from __future__ import annotations

from components.deployments.engines.base import ServingEngine

SOURCE = (
    "AIConfigurator benchmark rules (ai-dynamo/aiconfigurator generator/rule_plugin/benchmark/*.rule): "
    "max_batch_size = C, max_num_tokens = C + ISL + 1500, CUDA graphs at 1..C"
)
EXTRA_TOKENS = 1500  # the rules' headroom over ISL (+ C) in a step's token budget
TRTLLM_KV_FRACTION = 0.80  # extra_engine_args template: kv_cache_config.free_gpu_memory_fraction default


MIXED_CHUNK_FROM = (0, 5, 6)  # the first SGLang version whose AIConfigurator template passes the flag


def _version(text: object) -> tuple[int, ...] | None:
    """``0.5.6.post2`` -> (0, 5, 6); None when the version is not a number (``glm5-hopper``)."""
    parts = []
    for piece in str(text or "").split(".")[:3]:
        if not piece.isdigit():
            return None
        parts.append(int(piece))
    return tuple(parts) if parts else None


# the rules' parts applied: batch limit and CUDA graphs at 1..C, the token budget, SGLang's mixed chunk.
# "kv" (TensorRT-LLM's KV at the template's 0.80) is available but not applied: chosen on the training side,
# the H200 runs erred more with it (bench_engines, fit on H200: TTFT 40.2% -> 46.8%), H100's alike (29.5 /
# 29.4%) -- the runs may have set the fraction themselves
PARTS = ("batch", "budget", "mixed")


def as_benchmarked(
    engine: ServingEngine,
    isl: int,
    concurrency: int,
    parts: tuple[str, ...] = PARTS,
    version: object = None,
) -> ServingEngine:
    """``engine`` as AIConfigurator's benchmark deploys an aggregated worker at ``concurrency`` clients of
    ``isl``-token prompts (module docstring); ``parts`` the rules applied; ``version`` the engine's (SGLang's
    mixed chunk depends on it; unknown: the engine's default)."""
    c = max(int(concurrency), 1)
    settings: dict = {}
    if "batch" in parts:
        settings.update(max_num_seqs=c, graph_sizes=tuple(range(1, c + 1)), cuda_graph_max_batch=c)
    if "budget" in parts and engine.name == "sglang":
        # max-prefill-tokens bounds a prefill batch within the default chunked-prefill size
        settings["max_num_batched_tokens"] = min(isl + EXTRA_TOKENS, engine.max_num_batched_tokens)
    elif "budget" in parts:
        settings["max_num_batched_tokens"] = c + isl + EXTRA_TOKENS
    found = _version(version)
    if "mixed" in parts and engine.name == "sglang":
        # a version without a template of its own (a named build such as ``glm5-hopper``, none recorded) is
        # rendered by the default ``cli_args.j2`` (``rendering/engine.py``: ``cli_args.<version>.j2`` else
        # the default), which passes the flag, as the 0.5.6 template does
        settings["mixed_chunk"] = found is None or found >= MIXED_CHUNK_FROM
    if "kv" in parts and engine.name == "trtllm":
        settings["memory_fraction"] = TRTLLM_KV_FRACTION
    out = engine.with_settings(**settings)
    return out.with_cost(out.cost, f"{out.provenance}; settings: {SOURCE}")


DISAGG_PREFILL_BATCH = 1  # the rules' prefill ``max_batch_size`` when none is given


def as_disaggregated(
    engine: ServingEngine, isl: int, decode_batch: int, prefill_batch: int | None = None
) -> tuple[ServingEngine, ServingEngine]:
    """(prefill worker, decode worker) engines as AIConfigurator's benchmark rules deploy a disaggregated
    run (module docstring): the prefill worker one prompt of ``isl`` tokens per rank and step (its
    ``prefill_batch`` when the run records one), the decode worker ``decode_batch`` sequences per rank
    with a graph captured at each size."""
    batch = max(int(prefill_batch or DISAGG_PREFILL_BATCH), 1)
    budget = isl + EXTRA_TOKENS
    if engine.name == "sglang":  # max-prefill-tokens bounds a prefill batch within the chunk size
        budget = min(budget, engine.max_num_batched_tokens)
    pre = engine.with_settings(max_num_seqs=batch, max_num_batched_tokens=budget)
    b = max(int(decode_batch), 1)
    dec = engine.with_settings(max_num_seqs=b, graph_sizes=tuple(range(1, b + 1)), cuda_graph_max_batch=b)
    return pre, dec
