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
    with pytest.raises(
        ValueError, match=r"params.yaml train.llm: unknown key 'lora_rank' \(known: .*lora_r, "
    ):
        llm_params({"train": {"llm": {"lora_rank": 8}}})
    with pytest.raises(ValueError, match=r"'train\.llm:' must be a mapping, got list"):
        llm_params({"train": {"llm": [1, 2]}})


def test_log_runtime_answers_round_trip_and_clamp() -> None:
    import math

    from components.models.llm.model import LLMConfig, format_log_runtime, parse_log_runtime

    assert format_log_runtime(123.4) == "2.09"
    assert parse_log_runtime([2, 0, 9]) == pytest.approx(10**2.09)
    assert format_log_runtime(0.4) == "0.00" and format_log_runtime(1e12) == "9.99"  # clamped
    assert format_log_runtime(math.nan) is None and format_log_runtime(-3.0) is None
    # "d.dd" loses at most half a step of 0.01 in log10: 1.16% relative error at worst.
    for value in (1.7, 38.0, 4096.0, 2.5e6):
        decoded = parse_log_runtime([int(c) for c in format_log_runtime(value).replace(".", "")])
        assert abs(decoded / value - 1) < 0.0117
    with pytest.raises(ValueError, match="head 'digits'"):
        LLMConfig(head="digits")
