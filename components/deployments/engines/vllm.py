"""vLLM (V1 engine, ``vllm serve``) as its scheduler runs by default.

- ``--gpu-memory-utilization`` 0.9: the share of each GPU vLLM takes; weights and the profiled activation
  peak come out of it, the rest is the paged KV cache.
- ``--block-size`` 16 tokens per KV block.
- Chunked prefill always on in V1: one unified scheduler fills each step's ``--max-num-batched-tokens``
  budget with every running decode first, then prefill chunks (FCFS), so a long prompt is split over steps
  and the decodes never stall for a whole prompt. Defaults for ``vllm serve`` on a GPU with >= 70 GiB:
  8192 batched tokens and 1024 sequences (smaller GPUs: 2048 tokens, 256 sequences).
- Decode batches up to 512 run as captured CUDA graphs (``max_cudagraph_capture_size`` = min(2 x
  max_num_seqs, 512)), captured at 1, 2, 4, then every 8 below 256 and every 16 from 256
  (``VllmConfig._set_cudagraph_sizes``); a decode batch is padded up to the next captured size (33 runs
  as 40).
- Runs on NVIDIA, AMD (ROCm) and Intel GPUs.
- When the KV cache is full, the newest running request is preempted (its blocks freed, recomputed later).
"""

from __future__ import annotations

from typing import Any

from components.deployments.engines.base import ServingEngine


def capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return tuple(s for s in sizes if s <= top)


def engine(spec: Any = None) -> ServingEngine:
    big = spec is None or float(getattr(spec, "memory_gb", 80) or 80) >= 70
    seqs = 1024 if big else 256
    return ServingEngine(
        name="vllm",
        max_num_batched_tokens=8192 if big else 2048,
        max_num_seqs=seqs,
        memory_fraction=0.9,
        block_size=16,
        chunked_prefill=True,
        cuda_graph_max_batch=512,
        graph_sizes=capture_sizes(seqs),
        policy="decode-first",
        vendors=("nvidia", "amd", "intel"),
    )
