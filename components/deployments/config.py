"""A model's shape from its HF ``config.json`` and a deployment (model + workload + parallelism + GPU).

Bundled configs are read in place from the datasets folder (PipeWeave's ``config/`` and AIConfigurator's
``model_configs/``); a path or the JSON text itself works too. Anything we cannot compose (not a decoder
LLM, an attention variant not modelled) is a one-line :class:`DeploymentError` naming the field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from components.deployments.config_layers import (
    DeploymentError,
    block_layout,
    int_field,
    linear_attention,
    sparse_attention,
    store_dtype,
)
from components.physics.base import PhysicsError
from components.physics.dtypes import canonical_dtype

PIPEWEAVE_CONFIGS = Path("pipeweave/config")
AIC_CONFIGS = Path("aiconfigurator/aic-core/src/aiconfigurator_core/model_configs")
MODES = ("agg", "disagg")


@dataclass(frozen=True)
class ModelShape:
    """What the composition needs of a decoder LLM. MoE fields are 0 for a dense model."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (dense layers; 0 when every layer is MoE)
    vocab: int
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0  # shared experts' total width is shared_experts * moe_intermediate
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model (first_k_dense_replace)
    sliding_window: int | None = None
    sliding_layers: int = 0  # how many layers use the sliding window
    tied_embeddings: bool = False
    qk_norm: bool = False
    # Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2): K and V come from one cached latent of
    # kv_lora_rank (+ a shared rotary key of qk_rope_head_dim); 0 = ordinary (GQA/MQA) attention.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: queries projected straight from the hidden state
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): MLA whose queries attend to the index_topk keys a
    # lightning indexer of index_heads x index_head_dim picks (0 = dense attention)
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    attn_output_gate: bool = False  # Qwen3.5/3.6: q_proj also emits a sigmoid gate on the attention output
    # Gated DeltaNet layers (``layer_types`` "linear_attention", Qwen3-Next/3.5/3.6): how many, their key and
    # value heads and head dims, the conv kernel, and the recurrent state's dtype (``mamba_ssm_dtype``).
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0  # a multiple of the key heads (each key head serves HV / HK value heads)
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 0
    state_dtype: str = "bf16"
    # Mamba2 hybrids (Nemotron-H, Nemotron-3): every layer is ONE block -- a Mamba2 mixer, attention, an
    # MLP or an MoE (hybrid_override_pattern / layers_block_type: config_layers.block_layout); all 0 for
    # the usual layers of attention + MLP
    mamba_layers: int = 0
    attention_blocks: int = 0
    mlp_blocks: int = 0
    moe_blocks: int = 0
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_groups: int = 0
    mamba_state: int = 0
    mamba_conv_kernel: int = 0
    mamba_chunk: int = 0
    gated_mlp: bool = True  # False: relu2 MLPs and experts (up, relu^2, down: two projections, not three)
    moe_latent: int = 0  # latent MoE: routed experts run on a moe_latent_size projection of the hidden state
    notes: tuple[str, ...] = ()  # what resolving the model's name assumed (find_bundled)
    checkpoint_dtype: str = "-"  # the weights' dtype the checkpoint ships (config_dtype): the default asked

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def kv_elements_per_token_layer(self, tp: int) -> float:
        """KV-cache elements one token keeps per layer on one GPU: K and V of its KV heads, or MLA's
        latent + rotary key (the same on every TP rank: the latent is not split over heads)."""
        if self.is_mla:
            return float(self.kv_lora_rank + self.qk_rope_head_dim)
        return float(2 * max(1, self.kv_heads // tp) * self.head_dim)

    @property
    def is_dsa(self) -> bool:
        return self.is_mla and self.index_topk > 0

    def dsa_dims(self, tp: int) -> dict[str, float]:
        """One GPU's DSA attention module, as ``components.physics.dsa`` names its dimensions."""
        return {
            "H": self.heads / tp,
            "HID": float(self.hidden),
            "QL": float(self.q_lora_rank),
            "KL": float(self.kv_lora_rank),
            "DR": float(self.qk_rope_head_dim),
            "DN": float(self.qk_nope_head_dim),
            "DV": float(self.v_head_dim),
            "IH": float(self.index_heads),
            "ID": float(self.index_head_dim),
            "TOPK": float(self.index_topk),
        }

    @property
    def block_layout(self) -> bool:
        """Each layer one block (Mamba2 hybrids), not attention + MLP."""
        return self.mamba_layers + self.attention_blocks + self.mlp_blocks + self.moe_blocks > 0

    @property
    def moe_layers(self) -> int:
        if self.block_layout:
            return self.moe_blocks
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def attention_layers(self) -> int:
        """Layers with softmax attention and a KV cache (the rest are GDN or Mamba2 layers, each with a
        fixed state)."""
        return self.attention_blocks if self.block_layout else self.layers - self.linear_layers

    def mamba_dims(self, tp: int) -> dict[str, float]:
        """One GPU's share of a Mamba2 block, as ``components.physics.mamba2`` names its dimensions."""
        return {
            "H": self.mamba_heads / tp,
            "P": float(self.mamba_head_dim),
            "G": self.mamba_groups / tp,
            "N": float(self.mamba_state),
            "K": float(self.mamba_conv_kernel),
            "C": float(self.mamba_chunk),
        }

    def _mamba_parameters(self) -> float:
        """One Mamba2 block's weights: in_proj (z, x, B, C, dt), the conv1d, A / D / dt bias, the gated norm,
        out_proj."""
        inner, bc = self.mamba_heads * self.mamba_head_dim, 2 * self.mamba_groups * self.mamba_state
        in_proj = self.hidden * (2 * inner + bc + self.mamba_heads)
        return float(
            in_proj + (inner + bc) * self.mamba_conv_kernel + 3 * self.mamba_heads + inner * (1 + self.hidden)
        )

    def linear_dims(self, tp: int) -> dict[str, float]:
        """One GPU's share of a GDN layer, as ``components.physics.gdn`` names its dimensions."""
        return {
            "HK": self.linear_key_heads / tp,
            "HV": self.linear_value_heads / tp,
            "DK": float(self.linear_key_dim),
            "DV": float(self.linear_value_dim),
            "K": float(self.linear_conv_kernel),
        }

    def _linear_parameters(self) -> float:
        """One GDN layer's weights: in_proj (q, k, v, z) and the a/b gate projection, the conv1d, out_proj."""
        k, v = self.linear_key_heads * self.linear_key_dim, self.linear_value_heads * self.linear_value_dim
        in_proj = self.hidden * (2 * k + 2 * v + 2 * self.linear_value_heads)
        return float(in_proj + (2 * k + v) * self.linear_conv_kernel + v * self.hidden)

    def parameter_counts(self) -> dict[str, float]:
        """Weight elements by role (the whole model, before sharding)."""
        gate = self.heads if self.attn_output_gate else 0
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads + gate)
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                (self.hidden * self.q_lora_rank + self.q_lora_rank * self.heads * qk)
                if self.q_lora_rank
                else (self.hidden * self.heads * qk)
            )
            kv = self.hidden * (
                self.kv_lora_rank + self.qk_rope_head_dim
            ) + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            attn = q + kv + self.heads * self.v_head_dim * self.hidden
            # the lightning indexer: wq_b (from the q latent), wk and its per-head weights
            attn += self.index_heads * self.index_head_dim * self.q_lora_rank
            attn += self.hidden * (self.index_head_dim + self.index_heads)
        projections = 3 if self.gated_mlp else 2
        dense_mlp = projections * self.hidden * self.intermediate
        expert = projections * (self.moe_latent or self.hidden) * self.moe_intermediate
        shared = projections * self.hidden * self.moe_intermediate
        dense_count = self.mlp_blocks if self.block_layout else self.layers - self.moe_layers
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return {
            "attention": float(attn * self.attention_layers),
            "linear_attention": self._linear_parameters() * self.linear_layers,
            "mamba": self._mamba_parameters() * self.mamba_layers,
            "dense_mlp": float(dense_mlp * dense_count),
            "experts": float(expert * self.experts * self.moe_layers),
            "shared_experts": float(shared * self.shared_experts * self.moe_layers),
            # the router, and a latent MoE's projections into and out of the latent
            "router": float(self.hidden * (self.experts + 2 * self.moe_latent) * self.moe_layers),
            "embeddings": float(embed),
        }

    @property
    def parameters(self) -> float:
        return sum(self.parameter_counts().values())


def _datasets_dir() -> Path:
    from components.platform.config import DEFAULT_DATASETS_DIR

    env = os.environ.get("KERNELCAST_DATASETS_DIR")
    return Path(env) if env else DEFAULT_DATASETS_DIR


def _key(name: str) -> str:
    """Spelling-insensitive model name: no org, no "meta-" prefix, no instruct/base suffix, lower case."""
    stem = name.split("/")[-1].removesuffix(".json").removesuffix("_config")
    stem = stem.split("--")[-1].lower()
    stem = re.sub(r"^meta-", "", stem)
    previous = None
    while previous != stem:  # "-Instruct-FP8" -> "": suffixes that do not change the shape
        previous, stem = stem, re.sub(r"-(instruct|base|hf|fp8|nvfp4|fp4|awq|gptq)$", "", stem)
    return stem


@lru_cache(maxsize=4)
def _bundled(root: str) -> dict[str, Path]:
    """Bundled config name (``Org/Name`` as its file names it, or ``Name``) -> its file."""
    configs: dict[str, Path] = {}
    # a datasets folder, or one upstream tree's root (``kernelcast evaluate --from``)
    tree = (PIPEWEAVE_CONFIGS.relative_to("pipeweave"), AIC_CONFIGS.relative_to("aiconfigurator"))
    for folder in [Path(root) / f for f in (PIPEWEAVE_CONFIGS, AIC_CONFIGS, *tree)]:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            if not path.name.endswith("_hf_quant_config.json"):
                configs.setdefault(_config_name(path), path)
    return configs


def _config_name(path: Path) -> str:
    return path.name.removesuffix(".json").removesuffix("_config").replace("--", "/")


def bundled_configs(datasets_dir: Path | None = None) -> dict[str, Path]:
    """Every bundled model config: its name (what ``--llm`` takes) -> its file."""
    return dict(_bundled(str(datasets_dir or _datasets_dir())))


def bundled_names(datasets_dir: Path | None = None) -> list[str]:
    return sorted({_key(name) for name in _bundled(str(datasets_dir or _datasets_dir()))})


def find_bundled(text: str, datasets_dir: Path | None = None) -> tuple[Path, str | None] | None:
    """(file, note) of the bundled config ``text`` names, or None. The exact name wins (any case, with or
    without the org); else a config whose name differs only by suffixes that keep the shape (-Instruct,
    -FP8, ...), and the note says which one answered. Why: "Qwen3-30B-A3B" silently became the -FP8 config."""
    configs = _bundled(str(datasets_dir or _datasets_dir()))
    wanted = text.strip().lower()
    for name, path in configs.items():
        if wanted in (name.lower(), name.split("/")[-1].lower()):
            return path, None
    variants = [name for name in configs if _key(name) == _key(text)]
    if not variants:
        return None
    picked = min(variants, key=len)  # the plainest spelling: fewest suffixes
    note = f"model {text!r}: no bundled config of that exact name; answered with {picked} (the same shape)"
    return configs[picked], note


def load_config_dict(
    ref: str | Path | dict, datasets_dir: Path | None = None, allow_paths: bool = True
) -> tuple[str, dict[str, Any]]:
    """(name, config dict) from a dict, JSON text, a path (unless ``allow_paths`` is off: a server never
    reads a file a client names), or a bundled model name (:func:`find_bundled`; a variant's note is in the
    dict's ``_kernelcast_note``)."""
    if isinstance(ref, dict):
        return str(ref.get("_name_or_path") or ref.get("model_type") or "model"), ref
    text = str(ref).strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DeploymentError(f"model config text: not JSON ({exc.msg} at char {exc.pos})") from None
        return str(data.get("_name_or_path") or data.get("model_type") or "model"), data
    path, note = Path(text), None
    if not allow_paths or not path.is_file():
        found = find_bundled(text, datasets_dir)
        if found is None:
            close = [k for k in bundled_names(datasets_dir) if _key(text)[:5] in k][:5]
            hint = f"; close: {', '.join(close)}" if close else ""
            raise DeploymentError(
                f"model {text!r}: not a file and not a bundled config{hint} (`kernelcast models list`)"
            )
        path, note = found
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DeploymentError(f"model config {path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise DeploymentError(f"model config {path}: not a JSON object")
    data = {**data, "_kernelcast_dtype": config_dtype(data, path)}
    return _config_name(path), {**data, "_kernelcast_note": note} if note else data


def config_dtype(data: dict[str, Any], path: Path | None = None) -> str:
    """The dtype of the weights a config ships: its quantisation (in the config, or the modelopt
    ``*_hf_quant_config.json`` beside it), else its ``torch_dtype``; ``-`` when it names none."""
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    quant = data.get("quantization_config") or text.get("quantization_config") or {}
    sidecar = path and path.with_name(path.name.removesuffix("_config.json") + "_hf_quant_config.json")
    if not quant and sidecar and sidecar.is_file():
        quant = json.loads(sidecar.read_text()).get("quantization", {})
    algo = str(quant.get("quant_algo") or "").lower()
    method = str(quant.get("quant_method") or "").lower()
    if algo == "mixed_precision":
        return "mixed (nvfp4 + fp8)"
    if algo in ("nvfp4", "fp8"):
        return algo
    if method == "fp8":
        return "fp8_block" if quant.get("weight_block_size") else "fp8"
    if method:
        return method  # mxfp4, compressed-tensors: named as the config names them
    stored = str(
        data.get("torch_dtype") or data.get("dtype") or text.get("torch_dtype") or text.get("dtype") or ""
    ).lower()
    try:
        return canonical_dtype(stored)
    except PhysicsError:
        return stored or "-"


# Fields that mark an attention/mixer the composition does not model (the reason names the field).
UNMODELLED_FIELDS: dict[str, str] = {
    "linear_attn_config": "Kimi Delta Attention (linear attention) layers are not modelled",
    "compress_ratios": "compressed sparse attention layers (DeepSeek-V4's CSA/HCA) are not modelled",
    "block_configs": "layers of their own shape each (DeciLM / Llama-Nemotron NAS: attention skipped or "
    "linear, FFN widths per layer) are not modelled",
}


def _text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: multimodal configs nest it under ``text_config``."""
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        return {**cfg["text_config"], "architectures": cfg.get("architectures")}
    return cfg


def _check_decoder(cfg: dict[str, Any]) -> None:
    archs = cfg.get("architectures") or []
    if archs and not any(
        re.search(r"(ForCausalLM|LMHeadModel|ForConditionalGeneration)$", str(a)) for a in archs
    ):
        raise DeploymentError(
            f"model config field architectures: {archs} is not a decoder LLM (…ForCausalLM)"
        )
    if cfg.get("is_encoder_decoder"):
        raise DeploymentError(
            "model config field is_encoder_decoder: an encoder-decoder model is not a decoder LLM"
        )
    for name, reason in UNMODELLED_FIELDS.items():
        if cfg.get(name) not in (None, 0, False, ""):
            raise DeploymentError(f"model config field {name}: {reason}")
    layer_types = cfg.get("layer_types") or []
    for name, local in (
        ("global_head_dim", "head_dim"),
        ("num_global_key_value_heads", "num_key_value_heads"),
    ):
        if cfg.get(name) not in (None, cfg.get(local)):
            raise DeploymentError(
                f"model config field {name}: global attention layers with another shape than the sliding "
                f"ones ({name} {cfg.get(name)} vs {local} {cfg.get(local)}, Gemma 4) are not modelled"
            )
    known = {"full_attention", "sliding_attention", "linear_attention"}
    if cfg.get("index_topk"):  # GLM-5.2 names its sparse (indexer) MLA layers
        known.add("deepseek_sparse_attention")
    odd = sorted({str(t) for t in layer_types} - known)
    if odd:
        raise DeploymentError(f"model config field layer_types: {', '.join(odd)} layers are not modelled")


def model_shape(
    ref: str | Path | dict, datasets_dir: Path | None = None, allow_paths: bool = True
) -> ModelShape:
    """Parse a decoder LLM's HF config into a :class:`ModelShape` (one-line error otherwise)."""
    name, raw = load_config_dict(ref, datasets_dir, allow_paths)
    cfg = _text_part(raw)
    _check_decoder(cfg)
    blocks = block_layout(cfg)
    layers = blocks.pop("layers", None) or int_field(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = int_field(cfg, "hidden_size", "n_embd", "d_model")
    heads = int_field(cfg, "num_attention_heads", "n_head")
    if layers == 0 or hidden == 0 or heads == 0:
        raise DeploymentError(
            "model config field num_hidden_layers/hidden_size/num_attention_heads: must be > 0"
        )
    kv_heads = int_field(cfg, "num_key_value_heads", "num_kv_heads", default=heads) or heads
    head_dim = int_field(cfg, "head_dim", "attention_head_dim", default=hidden // heads) or hidden // heads
    mla = {}
    if int_field(cfg, "kv_lora_rank", default=0):
        mla = {
            "kv_lora_rank": int_field(cfg, "kv_lora_rank"),
            "q_lora_rank": int_field(cfg, "q_lora_rank", default=0),
            "qk_rope_head_dim": int_field(cfg, "qk_rope_head_dim"),
            "qk_nope_head_dim": int_field(cfg, "qk_nope_head_dim"),
            "v_head_dim": int_field(cfg, "v_head_dim"),
        }
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        mla.update(sparse_attention(cfg))
        kv_heads = heads  # every query head has its own K/V, decompressed from the shared latent
    if int_field(cfg, "index_topk", default=0) and not mla:
        raise DeploymentError(
            "model config field index_topk: sparse (indexer) attention layers without kv_lora_rank (MLA) "
            "are not modelled"
        )
    vocab = int_field(cfg, "vocab_size")
    experts = int_field(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    topk = int_field(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", default=0) if experts else 0
    intermediate = int_field(cfg, "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)
    moe_inter = int_field(cfg, "moe_intermediate_size", default=intermediate) if experts else 0
    if experts and topk == 0:
        raise DeploymentError("model config field num_experts_per_tok: missing for an MoE model")
    shared = int_field(cfg, "n_shared_experts", "num_shared_experts", default=0) if experts else 0
    shared_width = int_field(
        cfg,
        "shared_expert_intermediate_size",
        "shared_intermediate_size",
        "moe_shared_expert_intermediate_size",
        default=0,
    )
    if experts and shared_width:  # the width, where given, counts (Nemotron-3: one shared expert of 2 I)
        shared = max(1, round(shared_width / max(moe_inter, 1)))
    dense_layers = min(int_field(cfg, "first_k_dense_replace", default=0), layers) if experts else 0
    window = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types") or []
    if blocks and "linear_attention" in layer_types:
        raise DeploymentError("model config field layer_types: linear_attention layers in a Mamba2 hybrid")
    linear = linear_attention(cfg, layers, layer_types)
    use_window = bool(window) and cfg.get("use_sliding_window", True) is not False
    sliding_layers = 0
    if use_window:
        sliding_layers = sum(t == "sliding_attention" for t in layer_types) if layer_types else layers
    return ModelShape(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        experts=experts,
        topk=topk,
        moe_intermediate=moe_inter,
        shared_experts=shared,
        dense_layers=dense_layers,
        sliding_window=int(window) if sliding_layers else None,
        sliding_layers=sliding_layers,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qk_norm=bool(cfg.get("use_qk_norm")) or "qwen3" in str(cfg.get("model_type", "")),
        attn_output_gate=bool(cfg.get("attn_output_gate", False)),
        notes=(raw["_kernelcast_note"],) if raw.get("_kernelcast_note") else (),
        checkpoint_dtype=str(raw.get("_kernelcast_dtype") or config_dtype(raw)),
        **mla,
        **linear,
        **blocks,
    )


@dataclass(frozen=True)
class Deployment:
    """One serving question: a model on ``tp*pp`` GPUs of one kind, ``concurrency`` requests of isl in,
    osl out."""

    model: ModelShape
    gpu: Any  # DeviceSpec
    isl: int
    osl: int
    concurrency: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str | None = None  # default: the weight dtype for 16-bit, fp8 stays fp8, fp4/int4 -> bf16
    tp: int = 1
    pp: int = 1
    ep: int = 1
    mode: str = "agg"
    notes: tuple[str, ...] = field(default_factory=tuple)
    framework: str = "vllm"  # the serving engine (components.deployments.engines)
    # attention data parallelism: dp ranks of tp*pp GPUs, each running the attention (and dense layers) of
    # its own ``concurrency`` requests; the experts are placed over all tp*pp*dp GPUs (ep of them)
    dp: int = 1

    def __post_init__(self) -> None:
        # the model's resolution notes come first, once (replace() runs this again)
        object.__setattr__(self, "notes", tuple(dict.fromkeys((*self.model.notes, *self.notes))))
        from components.deployments.engines.registry import engine_name

        object.__setattr__(self, "framework", engine_name(self.framework))
        for name in ("isl", "osl", "concurrency", "tp", "pp", "ep", "dp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DeploymentError(f"{name} {value!r}: must be a positive integer")
        if self.mode not in MODES:
            raise DeploymentError(f"mode {self.mode!r}: choose agg or disagg")
        object.__setattr__(self, "weight_dtype", store_dtype(self.weight_dtype, "dtype"))
        kv = self.kv_dtype or {"fp8": "fp8", "fp8_block": "fp8", "fp16": "fp16", "fp32": "fp32"}.get(
            self.weight_dtype, "bf16"
        )
        object.__setattr__(self, "kv_dtype", store_dtype(kv, "kv dtype"))
        m = self.model
        if m.heads % self.tp:
            raise DeploymentError(f"tp {self.tp}: does not divide num_attention_heads {m.heads} of {m.name}")
        if m.kv_heads % self.tp and self.tp % m.kv_heads:
            raise DeploymentError(
                f"tp {self.tp}: neither divides nor is a multiple of num_key_value_heads "
                f"{m.kv_heads} of {m.name}"
            )
        for name, count in (("mamba_num_heads", m.mamba_heads), ("n_groups", m.mamba_groups)):
            if m.mamba_layers and count % self.tp:
                raise DeploymentError(f"tp {self.tp}: does not divide {name} {count} of {m.name}")
        if m.linear_layers and m.linear_key_heads % self.tp:
            raise DeploymentError(
                f"tp {self.tp}: does not divide linear_num_key_heads {m.linear_key_heads} of {m.name}"
            )
        if self.pp > m.layers:
            raise DeploymentError(f"pp {self.pp}: more pipeline stages than num_hidden_layers {m.layers}")
        if self.ep > 1 and (not m.is_moe or m.experts % self.ep):
            what = (
                "a dense model has no experts" if not m.is_moe else f"does not divide num_experts {m.experts}"
            )
            raise DeploymentError(f"ep {self.ep}: {what}")
        if self.ep > self.tp * self.pp * self.dp:
            raise DeploymentError(
                f"ep {self.ep}: larger than the tp*pp*dp={self.tp * self.pp * self.dp} GPUs of the group"
            )
        if self.dp > 1 and not m.is_moe:
            raise DeploymentError(f"dp {self.dp}: attention data parallelism is modelled for MoE models only")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def with_(self, **changes: Any) -> Deployment:
        return replace(self, **changes)
