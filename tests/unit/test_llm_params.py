"""params.yaml -> LLM fine-tune settings: defaults, the embedded base, unknown keys refused."""

from __future__ import annotations

import pytest
import yaml

from components.training.llm import LLMRunParams, llm_params
from kernelcast.settings import PROJECT_ROOT


def test_project_params_give_a_cpu_sized_llm_run() -> None:
    config, run = llm_params(yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text()))
    assert config.base is None  # "embedded" = the SmolLM2-135M wheel
    assert config.numeric_targets == ("duration_us",) and config.target_modules == ("q_proj", "v_proj")
    assert config.seed == 17  # train.seed when train.llm sets none
    assert run.workers == 2 and run.max_train_rows and run.max_test_rows


def test_missing_section_gives_defaults_and_hub_ids_pass_through() -> None:
    config, run = llm_params({"train": {"llm": {"base": "Qwen/Qwen2.5-Coder-1.5B", "max_test_rows": None}}})
    assert config.base == "Qwen/Qwen2.5-Coder-1.5B" and run.max_test_rows is None
    assert llm_params({})[1] == LLMRunParams()


def test_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match=r"train.llm: unknown key\(s\) \['lora_rank'\]"):
        llm_params({"train": {"llm": {"lora_rank": 8}}})
