"""The serving engines by name: ``engine_for("vllm", spec)`` is the engine's defaults on that GPU with its
fitted step cost from ``constants.json``. A new engine is one module with an ``engine(spec)`` function,
named here."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

from components.deployments.config import DeploymentError
from components.deployments.engines.base import ServingEngine, with_fitted

ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
DEFAULT_ENGINE = "vllm"
ALIASES = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm", "trt": "trtllm"}


def engine_name(name: Any) -> str:
    """The canonical engine name (DeploymentError naming the choices otherwise)."""
    text = str(name or DEFAULT_ENGINE).strip().lower()
    text = ALIASES.get(text, text)
    if text not in ENGINES:
        raise DeploymentError(f"framework {name!r}: unknown serving engine; choose {' | '.join(ENGINES)}")
    return text


def engine_for(
    name: Any = None, spec: Any = None, fitted: bool = True, constants: Path | None = None
) -> ServingEngine:
    """The engine's documented defaults (on GPU ``spec``), with its fitted step cost unless ``fitted`` is
    False (the bench's folds fit their own); ``constants``: the constants file a model carries (its
    provenance then names it), else the package's."""
    canon = engine_name(name)
    module = import_module(f"components.deployments.engines.{canon}")
    base: ServingEngine = module.engine(spec)
    if not fitted:
        return base
    if constants is None:
        return with_fitted(base)
    engine = with_fitted(base, Path(constants))
    return engine.with_cost(engine.cost, f"{engine.provenance}; read from {constants}")
