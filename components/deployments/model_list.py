"""The bundled model configs ``--llm`` takes by name: each with its weights' dtype and size
(``kernelcast models list``). Why: the names were only to be found as "close:" hints of an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.deployments.config import DeploymentError, bundled_configs, model_shape
from components.physics.base import PhysicsError
from components.physics.dtypes import canonical_dtype


def config_dtype(data: dict[str, Any], path: Path) -> str:
    """The dtype of the weights a config ships: its quantisation (in the config, or the modelopt
    ``*_hf_quant_config.json`` beside it), else its ``torch_dtype``; ``-`` when it names none."""
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    quant = data.get("quantization_config") or text.get("quantization_config") or {}
    sidecar = path.with_name(path.name.removesuffix("_config.json") + "_hf_quant_config.json")
    if not quant and sidecar.is_file():
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
