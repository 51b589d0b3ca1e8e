"""The bundled model configs ``--llm`` takes by name: each with its weights' dtype and size
(``kernelcast models list``). Why: the names were only to be found as "close:" hints of an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.deployments.config import DeploymentError, bundled_configs, config_dtype, model_shape


def bundled_models(datasets_dir: Path | None = None) -> list[dict[str, Any]]:
    """One entry per bundled config, by name: dtype, parameters (billions), layers, experts, and whether the
    composition models it (``reason`` when not)."""
    models = []
    for name, path in sorted(bundled_configs(datasets_dir).items(), key=lambda item: item[0].lower()):
        data = json.loads(path.read_text())
        entry: dict[str, Any] = {
            "name": name,
            "dtype": config_dtype(data, path),
            "parameters_b": None,
            "layers": None,
            "moe": None,
            "modelled": True,
            "reason": None,
            "source": "pipeweave" if "pipeweave" in path.parts else "aiconfigurator",
        }
        try:
            shape = model_shape(str(path))
        except DeploymentError as exc:
            entry.update(modelled=False, reason=str(exc))
        else:
            entry.update(
                parameters_b=round(shape.parameters / 1e9, 2),
                layers=shape.layers,
                moe=f"{shape.experts} experts, top-{shape.topk}" if shape.is_moe else None,
            )
        models.append(entry)
    return models
