"""SGLang (``sglang.launch_server``) as its scheduler runs by default.

- ``--mem-fraction-static`` derived from the GPU's memory and the TP x PP group when not given
  (``ServerArgs._handle_gpu_memory_settings``, SGLang 0.5): it keeps ``reserved`` GiB out -- 2.8 + tp*pp/10
  under 35 GiB, 9.5 + tp*pp/2 under 90 GiB (H100, A100), 12 + tp*pp/2 under 160 GiB (H20, H200), 32 above
  (B200, MI300) -- and the fraction is (memory - reserved) / memory. The fraction holds the weights and the
  KV pool; activations and CUDA graphs live in the reserve (``kv_rule`` "static").
- ``--page-size`` 1: the radix KV cache is token-granular.
- ``--chunked-prefill-size`` by GPU memory from the same function: 2048 under 35 GiB, 4096 under 60 GiB,
  8192 under 160 GiB (H100, H200), 16384 above. ``--schedule-policy`` fcfs for a closed loop of identical
  prompts (no prefix sharing), and prefill has priority: a step with prefill work runs prefill only
  (``--enable-mixed-chunk`` off), the running decodes wait for it.
- ``--max-running-requests``: derived from the KV pool (here: what the pool holds, capped at 4096).
- Decode batches up to ``--cuda-graph-max-bs`` replay CUDA graphs (256 with tp < 4, 512 from tp 4 on
  H100/H200-class GPUs), captured at 1, 2, 4, 8, 12, every 8 from 16 to 256, every 16 from 272
  (``ServerArgs._generate_cuda_graph_batch_sizes``); a decode batch is padded up to the next captured size.
- Admission reserves the prompt plus a share of the output (``new_token_ratio``); when decodes run out of
  room SGLang retracts the newest requests back to the queue.
"""

from __future__ import annotations

from typing import Any

from components.deployments.engines.base import DERIVED_FRACTION, ServingEngine


def _by_memory(gib: float) -> tuple[tuple[float, float], int]:
    """(reserved GiB: base, per GPU of the TP x PP group) and the chunked-prefill size for a GPU's memory."""
    if gib < 35:
        return (2.8, 0.1), 2048
    if gib < 60:
        return (9.5, 0.5), 4096
    if gib < 90:
        return (9.5, 0.5), 8192
    if gib < 160:
        return (12.0, 0.5), 8192
    return (32.0, 0.0), 16384


def capture_sizes(max_bs: int) -> tuple[int, ...]:
    """SGLang's default CUDA-graph batch sizes up to ``--cuda-graph-max-bs`` (no speculative decoding)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return tuple(s for s in sizes if s <= max_bs)


def engine(spec: Any = None) -> ServingEngine:
    gib = float(getattr(spec, "memory_gb", 80) or 80) if spec is not None else 80.0
    reserve, chunk = _by_memory(gib)
    return ServingEngine(
        name="sglang",
        max_num_batched_tokens=chunk,
        max_num_seqs=4096,
        memory_fraction=DERIVED_FRACTION,
        kv_rule="static",
        reserve_gib=reserve,
        block_size=1,
        chunked_prefill=True,
        cuda_graph_max_batch=256,
        graph_sizes=capture_sizes(256),
        policy="prefill-first",
    )
