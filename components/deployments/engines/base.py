"""A serving engine as the simulator sees it: its scheduler's documented defaults and its fitted constants.

Vidur's and AIConfigurator's shape: one small class per engine holding what its scheduler does by default
(chunked-prefill token budget, max running requests, KV-cache memory fraction, block size, CUDA graphs for
decode, scheduling policy). The per-engine constants the simulator cannot derive (the CPU/launch cost of
one step) are DATA (``constants.json`` beside this file, with what they were fitted on), not code.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

CONSTANTS_FILE = Path(__file__).with_name("constants.json")

# Scheduling policies the simulator knows:
# - "decode-first": every step runs all running decodes, then fills the token budget with prefill chunks
#   (vLLM V1's unified scheduler; chunked prefill).
# - "prefill-first": a step with prefill work runs prefill only (new requests first), decodes wait (SGLang's
#   default: no mixed chunk).
# - "no-evict": inflight batching that admits a request only when its whole isl + osl KV fits (TensorRT-LLM's
#   GUARANTEED_NO_EVICT capacity scheduler); context and generation requests share a step.
POLICIES = ("decode-first", "prefill-first", "no-evict")
# ``memory_fraction`` of an engine whose fraction is derived per deployment (``reserve_gib``): a fitted offset
# moves it away from this value and the derived fraction by as much
DERIVED_FRACTION = 0.88


@dataclass(frozen=True)
class StepCost:
    """A step's time: ``decode_scale`` x its decode kernels + ``prefill_scale`` x its prefill kernels (the
    engine's kernels vs the op engine's: 1 = as the op engine answers) + ``base_us`` + ``per_seq_us`` x
    sequences in the step + ``prefill_us`` when the step carries prefill work + ``allreduce_us`` per TP
    all-reduce of the step (the collective's start-up latency, beyond its bytes on the link) +
    ``per_layer_us`` per model layer the step runs (the small kernels between a layer's timed ops: norms,
    rotary, activation, residual adds, KV-cache writes -- at small decode batches the measured TPOT exceeds
    the op times by about as much per layer at every TP size; microseconds).
    A request's TTFT adds the server front end's ``request_us`` + ``per_client_us`` x concurrent clients
    (HTTP, tokenisation and the event loop serving the other clients' streams)."""

    decode_scale: float = 1.0
    prefill_scale: float = 1.0
    base_us: float = 0.0
    per_seq_us: float = 0.0
    prefill_us: float = 0.0
    allreduce_us: float = 0.0
    per_layer_us: float = 0.0
    request_us: float = 0.0
    per_client_us: float = 0.0

    def vector(self) -> tuple[float, ...]:
        """The coefficients in the order of ``simulate``'s step features."""
        return (
            self.decode_scale,
            self.prefill_scale,
            self.base_us,
            self.per_seq_us,
            self.prefill_us,
            self.allreduce_us,
            self.per_layer_us,
            self.request_us,
            self.per_client_us,
        )

    @staticmethod
    def from_vector(values: tuple[float, ...] | list[float]) -> StepCost:
        return StepCost(*(float(v) for v in values))


@dataclass(frozen=True)
class ServingEngine:
    """One serving engine's scheduler defaults (documented per subclass) and fitted step cost."""

    name: str = "base"
    max_num_batched_tokens: int = 8192  # token budget of one step (chunked prefill)
    max_num_seqs: int = 256  # max running requests
    memory_fraction: float = 0.9  # share of GPU memory the engine takes (weights + activations + KV cache)
    kv_rule: str = "total"  # how the fraction sizes the KV cache (``memory.KV_RULES``)
    # SGLang: the fraction derived per deployment as (GPU memory - base - per_gpu x tp x pp) / GPU memory
    # (GiB; ``kv_fraction``), None = ``memory_fraction`` as it is
    reserve_gib: tuple[float, float] | None = None
    block_size: int = 16  # KV-cache page, tokens
    chunked_prefill: bool = True
    cuda_graph_max_batch: int = 512  # decode batches up to this run as captured CUDA graphs
    # the captured decode batch sizes a decode-only step is padded up to (its GEMMs run at the padded
    # batch); () = no padding (the batch runs at its own size)
    graph_sizes: tuple[int, ...] = ()
    policy: str = "decode-first"
    # "prefill-first" only: a step with prefill work also runs the running decodes, which count against its
    # token budget (SGLang's ``--enable-mixed-chunk``); off, the decodes wait for the prefill step
    mixed_chunk: bool = False
    vendors: tuple[str, ...] = ("nvidia", "amd")  # GPU vendors the engine runs on
    cost: StepCost = field(default_factory=StepCost)
    provenance: str = "defaults only (no fitted constants)"
    # leave-one-GPU-out MAPE of (TTFT, TPOT) of the fitted constants: the half-width of an answer's interval
    errors: tuple[float, float] = (0.5, 0.5)

    def kv_fraction(self, memory_gib: float, tp: int, pp: int) -> float:
        """The memory fraction on one deployment (``reserve_gib``: what the engine keeps out of it)."""
        if self.reserve_gib is None:
            return self.memory_fraction
        base, per_gpu = self.reserve_gib
        derived = (memory_gib - base - per_gpu * tp * pp) / memory_gib
        return derived + (self.memory_fraction - DERIVED_FRACTION)

    def graph_batch(self, n: int) -> int:
        """The batch a decode-only step of ``n`` sequences runs at: the smallest captured CUDA-graph size
        >= n (the engine pads the rest with dummy slots), ``n`` past the largest or without padding."""
        i = bisect_left(self.graph_sizes, n)
        return self.graph_sizes[i] if i < len(self.graph_sizes) else n

    def with_cost(self, cost: StepCost, provenance: str = "") -> ServingEngine:
        return replace(self, cost=cost, provenance=provenance or self.provenance)

    def with_settings(self, **settings: Any) -> ServingEngine:
        return replace(self, **settings)

    def settings(self) -> dict[str, Any]:
        """What the answer states: the engine, its settings and where its constants come from."""
        out = asdict(self)
        out["cost"] = {k: round(v, 4) for k, v in out["cost"].items()}
        return out


@lru_cache(maxsize=4)
def _read_constants(path: str) -> dict[str, Any]:
    file = Path(path)
    return json.loads(file.read_text()) if file.is_file() else {}


def with_fitted(engine: ServingEngine, path: Path = CONSTANTS_FILE) -> ServingEngine:
    """``engine`` with its fitted step cost, memory fraction and errors from the constants file (as it is
    when the file holds none for it)."""
    data = _read_constants(str(path)).get("engines", {}).get(engine.name)
    if not data:
        return engine
    fields = {k: float(v) for k, v in data.get("cost", {}).items() if k in StepCost.__dataclass_fields__}
    prov = data.get("provenance", {})
    held = prov.get("leave_one_gpu_out_mape", {})
    return replace(
        engine,
        cost=StepCost(**fields),
        memory_fraction=engine.memory_fraction + float(data.get("memory_fraction_offset", 0.0)),
        provenance="constants fitted on " + str(prov.get("fitted_on", "?")) + f" ({prov.get('date', '?')}, "
        f"commit {prov.get('commit', '?')})",
        errors=(float(held.get("ttft", 0.5)), float(held.get("tpot", 0.5))),
    )


def framework_constants(path: Path = CONSTANTS_FILE) -> dict[str, Any]:
    """The offline-batch framework cost (PipeWeave parts) kept in the same data file."""
    return dict(_read_constants(str(path)).get("framework", {}))
