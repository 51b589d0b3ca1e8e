"""Reading a model config's fields: the one-line error, an integer field, a stored dtype, and the fields of
the layer kinds beside attention + MLP -- Gated DeltaNet (``linear_attention``), DeepSeek Sparse Attention's
indexer, Mamba2 blocks -- each with one clear error per bad field (``config.model_shape`` reads the rest).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from components.physics.base import PhysicsError
from components.physics.dtypes import STORE_BYTES, canonical_dtype


class DeploymentError(ValueError):
    """A deployment question we cannot answer: one line naming the input and what is wrong."""


def store_dtype(text: str, what: str) -> str:
    """A weight / KV dtype's canonical spelling (``components.physics.dtypes``) that a deployment stores."""
    try:
        name = canonical_dtype(text)
    except PhysicsError:
        name = None
    if name not in STORE_BYTES:
        raise DeploymentError(f"{what} {text!r}: unknown dtype; choose from {', '.join(STORE_BYTES)}")
    return name


def int_field(cfg: dict[str, Any], *names: str, default: int | None = None) -> int:
    for name in names:
        value = cfg.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise DeploymentError(f"model config field {name}: {value!r} is not a non-negative integer")
            return int(value)
    if default is None:
        raise DeploymentError(f"model config field {names[0]}: missing (a decoder LLM config has it)")
    return default


def sparse_attention(cfg: dict[str, Any]) -> dict[str, int]:
    """The DSA indexer fields of an MLA config with ``index_topk`` (DeepSeek-V3.2, GLM-5); {} without."""
    if not int_field(cfg, "index_topk", default=0):
        return {}
    fields = {
        "index_heads": int_field(cfg, "index_n_heads"),
        "index_head_dim": int_field(cfg, "index_head_dim"),
        "index_topk": int_field(cfg, "index_topk"),
    }
    shared = sorted({str(t) for t in cfg.get("indexer_types") or []} - {"full"})
    if shared:  # GLM-5.2: most layers reuse another layer's top-k (the skip-indexer module)
        raise DeploymentError(
            f"model config field indexer_types: {', '.join(shared)} indexer layers (reusing another "
            "layer's top-k) are not modelled"
        )
    for name, key in (("index_n_heads", "index_heads"), ("index_head_dim", "index_head_dim")):
        if not fields[key]:
            raise DeploymentError(f"model config field {name}: must be > 0 for sparse (indexer) attention")
    return fields


def linear_attention(cfg: dict[str, Any], layers: int, layer_types: list) -> dict[str, Any]:
    """The GDN fields of a hybrid config: ``layer_types`` "linear_attention" layers (or, without the list,
    all but every ``full_attention_interval``-th layer when the config has ``linear_num_value_heads``)."""
    if layer_types:
        if len(layer_types) != layers:
            raise DeploymentError(
                f"model config field layer_types: {len(layer_types)} entries for num_hidden_layers {layers}"
            )
        count = sum(t == "linear_attention" for t in layer_types)
    elif cfg.get("linear_num_value_heads") is not None and cfg.get("full_attention_interval"):
        count = layers - layers // int_field(cfg, "full_attention_interval")
    else:
        count = 0
    if not count:
        return {}
    if count == layers:
        raise DeploymentError("model config field layer_types: no full_attention layer (not a hybrid model)")
    state = str(cfg.get("mamba_ssm_dtype") or cfg.get("dtype") or cfg.get("torch_dtype") or "bf16")
    fields = {
        "linear_layers": count,
        "linear_key_heads": int_field(cfg, "linear_num_key_heads"),
        "linear_value_heads": int_field(cfg, "linear_num_value_heads"),
        "linear_key_dim": int_field(cfg, "linear_key_head_dim"),
        "linear_value_dim": int_field(cfg, "linear_value_head_dim"),
        "linear_conv_kernel": int_field(cfg, "linear_conv_kernel_dim"),
        "state_dtype": store_dtype(state, "model config field mamba_ssm_dtype"),
    }
    for name in (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
    ):
        if not int_field(cfg, name):
            raise DeploymentError(f"model config field {name}: must be > 0 for linear_attention layers")
    if fields["linear_value_heads"] % fields["linear_key_heads"]:
        raise DeploymentError(
            f"model config field linear_num_value_heads: {fields['linear_value_heads']} is not a multiple "
            f"of linear_num_key_heads {fields['linear_key_heads']}"
        )
    return fields


# hybrid_override_pattern's letters -> layers_block_type's names (Nemotron-H / Nemotron-3 block kinds)
BLOCK_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _block_kinds(cfg: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(field, each layer's block kind) of a Mamba2 hybrid config, None for attention + MLP layers."""
    pattern, listed = cfg.get("hybrid_override_pattern"), cfg.get("layers_block_type")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise DeploymentError(
                "model config field hybrid_override_pattern: not a string of M * - E blocks"
            )
        return "hybrid_override_pattern", [BLOCK_KINDS.get(c, repr(c)) for c in pattern]
    if listed is not None:
        if not isinstance(listed, list) or not listed:
            raise DeploymentError("model config field layers_block_type: not a list of block kinds")
        return "layers_block_type", [str(k) for k in listed]
    return None


def block_layout(cfg: dict[str, Any]) -> dict[str, Any]:
    """The block counts and Mamba2 fields of a hybrid whose every layer is one block (Nemotron-H,
    Nemotron-3: ``hybrid_override_pattern`` M * - E, or ``layers_block_type``); {} otherwise."""
    found = _block_kinds(cfg)
    if found is None:
        return {}
    field, kinds = found
    odd = sorted(set(kinds) - set(BLOCK_KINDS.values()))
    if odd:
        raise DeploymentError(f"model config field {field}: {', '.join(odd)} blocks are not modelled")
    layers = int_field(cfg, "num_hidden_layers", default=len(kinds))
    if layers != len(kinds):
        raise DeploymentError(
            f"model config field {field}: {len(kinds)} blocks for num_hidden_layers {layers}"
        )
    count = Counter(kinds)
    fields: dict[str, Any] = {
        "layers": layers,
        "mamba_layers": count["mamba"],
        "attention_blocks": count["attention"],
        "mlp_blocks": count["mlp"],
        "moe_blocks": count["moe"],
        "gated_mlp": str(cfg.get("mlp_hidden_act") or cfg.get("hidden_act") or "silu") != "relu2",
        "moe_latent": int_field(cfg, "moe_latent_size", default=0),
    }
    if not count["mamba"]:
        return fields
    mamba = {
        "mamba_heads": ("mamba_num_heads",),
        "mamba_head_dim": ("mamba_head_dim",),
        "mamba_groups": ("n_groups",),
        "mamba_state": ("ssm_state_size", "state_size"),
        "mamba_conv_kernel": ("conv_kernel", "d_conv"),
    }
    for key, names in mamba.items():
        fields[key] = int_field(cfg, *names)
        if not fields[key]:
            raise DeploymentError(f"model config field {names[0]}: must be > 0 for Mamba2 blocks")
    fields["mamba_chunk"] = int_field(cfg, "chunk_size", default=256) or 256
    if fields["mamba_heads"] % fields["mamba_groups"]:
        raise DeploymentError(
            f"model config field n_groups: {fields['mamba_groups']} does not divide mamba_num_heads "
            f"{fields['mamba_heads']}"
        )
    state = cfg.get("mamba_ssm_cache_dtype") or cfg.get("dtype") or cfg.get("torch_dtype") or "bf16"
    fields["state_dtype"] = store_dtype(str(state), "model config field mamba_ssm_cache_dtype")
    return fields
