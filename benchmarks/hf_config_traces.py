"""Does every HF-config module trace, or name why not? The tracer over every local transformers config.

Issue 36: "HF-style models build and trace from their config on fake tensors (MoE routing included)".
Each model is a KernelBench-style module text that builds ``AutoModelForCausalLM.from_config`` (or the
``*Model`` of the families ``benchmarks/hf_whole_models.py`` scores) inside the tracer's sandbox, on fake
tensors, as ``kernelcast predict MODULE.py`` traces it, in FP32 and BF16. The configs are all local:

- every ``*_config.json`` of the aiconfigurator bundle (``../shared/datasets/aiconfigurator``: the LLM
  catalog's model configs; ``*_hf_quant_config.json`` are quantizer settings, not models), one per
  ``model_type`` unless ``--all``;
- the six families of ``benchmarks/hf_whole_models.py`` (BERT, GPT-2, OPT), and a Switch-Transformer
  (``SwitchTransformersConfig()``'s defaults, switch-base-8: the MoE the issue saw fail).

Kept short to trace fast: ``--layers`` decoder layers (per-layer lists cut to match; 4 keeps a dense and a
MoE layer where the first layers are dense), batch 1 x ``--seq`` tokens. ``quantization_config`` is dropped
(the module is traced in the dtype asked; the table says so). A ``model_type`` this transformers has no
class for is refused before tracing, naming the model and the type.

Usage (from the repository root):
  KERNELCAST_DATASETS_DIR=../shared/datasets python benchmarks/hf_config_traces.py [--all] [--layers 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATASETS = Path(
    os.environ.get("KERNELCAST_DATASETS_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets")
)
CONFIGS = DATASETS / "aiconfigurator" / "aic-core" / "src" / "aiconfigurator_core" / "model_configs"
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "num_decoder_layers")
MODULE = """
import json
import torch
import transformers

CONFIG = json.loads({config!r})


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        kind = CONFIG.pop("model_type")
        config = transformers.AutoConfig.for_model(kind, **CONFIG)
        try:  # a multimodal config (Qwen3-VL, Kimi-K2.5) has no causal-LM class: its *Model takes ids
            model = {builder}.from_config(config)
        except ValueError:
            model = transformers.AutoModel.from_config(config)
        self.m = model.to({dtype}).eval()
        self.enc_dec = bool(getattr(config, "is_encoder_decoder", False))

    def forward(self, ids):
        if self.enc_dec:
            return self.m(input_ids=ids, decoder_input_ids=ids)[0]
        return self.m(input_ids=ids)[0]


def get_inputs():
    return [torch.randint(0, 1000, (1, {seq}))]


def get_init_inputs():
    return []
"""


def shortened(config: dict[str, Any], layers: int, counts: frozenset[int] = frozenset()) -> dict[str, Any]:
    """The config with at most ``layers`` layers: each layer count cut, and every list as long as an old
    count (per-layer types, MoE frequencies) cut to match, in nested configs (``text_config``) too, where
    a parent's count holds for them (MiniMax-M3's ``text_config.layer_types``)."""
    out = dict(config)
    for key in LAYER_KEYS:
        n = out.get(key)
        if isinstance(n, int) and n > layers:
            out[key] = layers
            counts = counts | {n}
    for k, v in list(out.items()):
        if isinstance(v, list) and len(v) in counts:
            out[k] = v[:layers]
    for key, value in list(out.items()):
        if isinstance(value, dict) and key.endswith("_config") and key != "quantization_config":
            out[key] = shortened(value, layers, counts)
    return out


def local_models(every: bool) -> dict[str, dict[str, Any]]:
    """name -> config dict (with ``model_type``): the aiconfigurator configs and the named families."""
    from hf_whole_models import MODELS
    from transformers import SwitchTransformersConfig

    models: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for path in sorted(CONFIGS.glob("*_config.json")):
        if path.name.endswith("_hf_quant_config.json"):
            continue
        config = json.loads(path.read_text(encoding="utf-8"))
        kind = str(config.get("model_type"))
        if every or kind not in seen:
            models[path.name.removesuffix("_config.json")] = config
        seen.add(kind)
    for name, (cls, kwargs, _batch, _seq) in MODELS.items():
        models[name] = {"model_type": {"Bert": "bert", "GPT2": "gpt2", "OPT": "opt"}[cls], **kwargs}
    switch = SwitchTransformersConfig().to_dict()
    models["switch-base-8"] = {k: v for k, v in switch.items() if not k.startswith("_")}
    return models


def refusal(name: str, config: dict[str, Any]) -> str | None:
    """Why this config cannot be built here, naming it; None when transformers has its class."""
    from transformers import CONFIG_MAPPING

    kind = config.get("model_type")
    if kind not in CONFIG_MAPPING:
        return (
            f"{name}: transformers has no architecture for model_type {kind!r} "
            "(custom-code models need trust_remote_code, which the tracer never runs)"
        )
    return None


def module_text(config: dict[str, Any], dtype: str, layers: int, seq: int) -> str:
    config = shortened({k: v for k, v in config.items() if k not in ("quantization_config",)}, layers)
    for key in ("torch_dtype", "dtype", "architectures", "auto_map", "transformers_version"):
        config.pop(key, None)
    builder = "transformers.AutoModelForCausalLM"
    if config["model_type"] in ("bert", "switch_transformers"):
        builder = "transformers.AutoModel"
    return MODULE.format(config=json.dumps(config), builder=builder, dtype=f"torch.{dtype}", seq=seq)


def main() -> None:
    from kernelbench_traces import unnamed

    from components.programs.trace import ModuleJob, trace_many

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--all", action="store_true", help="every config file, not one per model_type")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--only", default=None, help="comma-separated names (substrings) to run")
    parser.add_argument("--per-module-s", type=float, default=180.0)
    parser.add_argument("--memory-gb", type=float, default=3.0, help="the tracer child's address-space limit")
    ns = parser.parse_args()
    models = local_models(ns.all)
    if ns.only:
        models = {n: c for n, c in models.items() if any(s in n for s in ns.only.split(","))}
    rows: list[tuple[str, str, str, str, str]] = []
    jobs: list[ModuleJob] = []
    for name, config in models.items():
        quant = "quant dropped" if "quantization_config" in config else ""
        why = refusal(name, config)
        for dtype in ns.dtypes.split(","):
            if why is not None:
                rows.append((name, str(config.get("model_type")), dtype, "refused: unsupported", why))
                continue
            jobs.append(ModuleJob(f"{name} [{dtype}]", text=module_text(config, dtype, ns.layers, ns.seq)))
            rows.append((name, str(config["model_type"]), dtype, "", quant))
    results = iter(trace_many(jobs, per_module_s=ns.per_module_s, memory_bytes=int(ns.memory_gb * 1024**3)))
    table = []
    for name, kind, dtype, status, note in rows:
        if not status:
            r = next(results)
            kernels = sum(not op.get("view") for op in r.ops)
            if r.ok:
                status, note = "traced", f"{kernels} ops, {r.seconds:.0f} s" + (f"; {note}" if note else "")
            else:
                status = "NO REASON" if unnamed(r.error, r.reason) else f"refused: {r.reason}"
                note = (r.error or "").splitlines()[0][:160] if r.error else ""
        table.append((name, kind, dtype, status, note))
        print(f"{name[:44]:44s} {kind[:18]:18s} {dtype:8s} {status:22s} {note}", flush=True)
    statuses = [t[3] for t in table]
    print(
        f"\n{len(models)} models x {len(ns.dtypes.split(','))} dtypes: traced {statuses.count('traced')}; "
        f"refused with a named reason {sum(s.startswith('refused') for s in statuses)}; "
        f"no reason named {statuses.count('NO REASON')}"
    )


if __name__ == "__main__":
    main()
