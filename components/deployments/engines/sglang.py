"""SGLang (``sglang.launch_server``) as its scheduler runs by default.

- ``--mem-fraction-static`` about 0.88 on an 80 GB GPU (SGLang derives it from the GPU memory and TP; it
  covers weights and the KV pool; the rest is left for activations and CUDA graphs).
- ``--page-size`` 1: the radix KV cache is token-granular.
- ``--chunked-prefill-size`` 8192 on H100/H200-class GPUs (smaller GPUs 2048-4096); ``--schedule-policy``
  fcfs for a closed loop of identical prompts (no prefix sharing), and prefill has priority: a step with
  prefill work runs prefill only (``--enable-mixed-chunk`` off), the running decodes wait for it.
- ``--max-running-requests``: derived from the KV pool (here: what the pool holds, capped at 4096).
- Decode batches up to ``--cuda-graph-max-bs`` (160-256 on H100-class GPUs; 256 here) replay CUDA graphs.
- Admission reserves the prompt plus a share of the output (``new_token_ratio``); when decodes run out of
  room SGLang retracts the newest requests back to the queue.
"""

from __future__ import annotations

from typing import Any

from components.deployments.engines.base import ServingEngine


def engine(spec: Any = None) -> ServingEngine:
    big = spec is None or float(getattr(spec, "memory_gb", 80) or 80) >= 70
    return ServingEngine(
        name="sglang",
        max_num_batched_tokens=8192 if big else 4096,
        max_num_seqs=4096,
        memory_fraction=0.88,
        block_size=1,
        chunked_prefill=True,
        cuda_graph_max_batch=256,
        policy="prefill-first",
    )
