"""TensorRT-LLM (``trtllm-serve``, PyTorch backend) as its scheduler runs by default.

- ``kv_cache_config.free_gpu_memory_fraction`` 0.9 of the memory left after weights and activations goes
  to the paged KV cache, ``tokens_per_block`` 32.
- ``max_num_tokens`` 8192 per step, ``max_batch_size`` 2048; chunked prefill off (``enable_chunked_prefill``
  False): a context request enters a step whole, so one step can carry at most 8192 prompt tokens.
- The capacity scheduler is ``GUARANTEED_NO_EVICT``: a request is admitted only when the KV cache holds its
  whole isl + osl, so nothing is ever evicted; inflight batching puts context and generation requests in
  the same step.
- NVIDIA GPUs only (CUDA): a deployment on another vendor's GPU is refused.
- CUDA graphs for generation batches (AIConfigurator's serving configs enable them up to the batch size);
  ``CudaGraphConfig.enable_padding`` is False by default, so a batch runs at its own size (no padding).
"""

from __future__ import annotations

from typing import Any

from components.deployments.engines.base import ServingEngine


def engine(spec: Any = None) -> ServingEngine:
    return ServingEngine(
        name="trtllm",
        max_num_batched_tokens=8192,
        max_num_seqs=2048,
        memory_fraction=0.9,
        kv_rule="free",
        block_size=32,
        chunked_prefill=False,
        cuda_graph_max_batch=2048,
        policy="no-evict",
        vendors=("nvidia",),
    )
