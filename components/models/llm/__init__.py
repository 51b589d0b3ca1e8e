"""LLM predictor family: LoRA on a causal LM (default: embedded SmolLM2-135M) + heads.

Nothing heavy is imported here; ``load`` and ``fit_for_bench`` pull in torch/transformers/peft/ray
only when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from components.config import Settings


def load(directory: Path | str) -> Any:
    """Restore a saved ``LLMPredictor`` (the loader MLflow's pyfunc wrapper and the registry use)."""
    from components.models.llm.model import LLMPredictor

    return LLMPredictor.load(Path(directory))


def fit_for_bench(train: pd.DataFrame, split: str | None, settings: Settings) -> Any:
    """The ``kernelcast bench accuracy`` entry point: a Ray Train fine-tune on the split's train side
    with params.yaml ``train.llm`` (capped to ``max_train_rows``), not registered."""
    from components.config import load_params
    from components.training.llm import fit_on_side, llm_params

    params = load_params(settings.params_file)
    config, run = llm_params(params)
    predictor, _ = fit_on_side(train, split, settings, config=config, run=run, register_as="",
                               run_name=f"llm-bench-{split}")
    return predictor


__all__ = ["fit_for_bench", "load"]
