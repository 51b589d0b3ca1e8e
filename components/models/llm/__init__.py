"""LLM predictor family: LoRA on a causal LM (default: embedded SmolLM2-135M) + heads.

Nothing heavy is imported here; ``load`` pulls in torch/transformers/peft only when called. How the
family is fitted (the LoRA fine-tune on Ray Train, the bench's entry point) is training's business:
``components.training.llm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load(directory: Path | str) -> Any:
    """Restore a saved ``LLMPredictor`` (the loader MLflow's pyfunc wrapper and the registry use)."""
    from components.models.llm.model import LLMPredictor

    return LLMPredictor.load(Path(directory))


__all__ = ["load"]
