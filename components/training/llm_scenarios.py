"""Bolet et al.'s four roofline-classification scenarios on the ``bolet-roofline`` split.

(i) ``profiled``: the prompt carries the measured intensities and rates (the class then follows
from the ridge points); (ii) ``zero-shot``; (iii) ``few-shot`` with the 4 upstream example kernels;
(iv) ``fine-tune``: the LoRA classifier trained (Ray Train) on the split's train side.
(i)-(iii) pick the answer by constrained choice: the log-likelihood of each answer word after the
chat prompt, with the local model, or by asking an OpenAI-compatible endpoint when
``KERNELCAST_LLM_ENDPOINT`` is set. Scores: accuracy + balanced accuracy on the test side.
It lives with training (it runs the fine-tune and scores the scenarios): a model does not know how it
is trained or evaluated.
"""

from __future__ import annotations

import copy
import json
import math
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from components.models.llm.prompt import ANSWERS, build_prompt

if TYPE_CHECKING:
    from components.platform.config import Settings

SYSTEM = (
    "You are a GPU performance expert. Using the roofline model, classify CUDA and OpenMP-offload "
    "kernels as Bandwidth-bound or Compute-bound on the given GPU."
)
FEW_SHOT_DIR = Path("gpuflopbench/_history/61cbd9e4/few-shot-examples")
FEW_SHOT_FILES: tuple[tuple[str, str], ...] = (
    ("cuda_BB_kernel.cu", "bandwidth"),
    ("cuda_CB_kernel.cu", "compute"),
    ("omp_BB_kernel.cpp", "bandwidth"),
    ("omp_CB_kernel.cpp", "compute"),
)
PROFILE_COLUMNS: tuple[str, ...] = (
    "fp32_arith_intensity",
    "fp64_arith_intensity",
    "int_arith_intensity",
    "fp32_gflops",
    "fp64_gflops",
    "int_gops",
    "achieved_gbps",
)
# Bolet's label thresholds (RTX 3080 balance points at base clock), from the upstream notebook.
BOLET_SP_AI, BOLET_DP_AI, BOLET_INT_AI = 32.97, 0.515, 16.49
PROFILED_EXTRA_TOKENS = 192
PROFILING_CSV = "gpuflopbench/cuda-profiling/profiling-data.csv"


class EndpointError(RuntimeError):
    """The OpenAI-compatible endpoint could not be reached or answered nonsense."""


@dataclass
class ScenarioResult:
    scenario: str
    accuracy: float
    balanced_accuracy: float
    n: int
    seconds: float
    per_kernel_s: float
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- data


def _parse_dim3(text: Any) -> tuple[int | None, int | None, int | None]:
    numbers = [int(v) for v in re.findall(r"\d+", str(text))] if isinstance(text, str) else []
    return tuple(([*numbers, None, None, None])[:3])  # type: ignore[return-value]


def _program_sources(
    src_root: Path, program: str, kernel_name: str, cache: dict[str, list[tuple[str, str]]]
) -> str | None:
    """All of a program's source files, the one defining ``kernel_name`` first (None if not shipped)."""
    if program not in cache:
        folder = src_root / program
        files = []
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.suffix in {".cu", ".cuh", ".cpp", ".c", ".h", ".hpp", ".cc"} and path.is_file():
                    files.append(
                        (str(path.relative_to(folder)), path.read_bytes().decode("utf-8", "replace"))
                    )
        cache[program] = files
    files = cache[program]
    if not files:
        return None
    short = kernel_name.split("(")[0].split("<")[0].split("::")[-1].strip()
    files = sorted(files, key=lambda f: (short not in f[1], f[0]))
    return "\n".join(f"// file: {name}\n{text}" for name, text in files)


def read_gpuflopbench(datasets_dir: Path) -> pd.DataFrame:
    """Development fallback when ``components.ingest.gpuflopbench`` is absent: the HEAD profiling
    CSV as one joined frame with the columns the split and the prompts need."""
    from components.ingest.schema import stable_id

    path = datasets_dir / PROFILING_CSV
    raw = pd.read_csv(path)
    src_root = datasets_dir / "gpuflopbench" / "src"
    cache: dict[str, list[tuple[str, str]]] = {}
    rows = []
    for i, r in raw.iterrows():
        kernel_id = stable_id("gpuflopbench", r["targetName"], r["Kernel Name"])
        grid, block = _parse_dim3(r["Grid Size"]), _parse_dim3(r["Block Size"])
        bandwidth = r["spAI"] < BOLET_SP_AI and r["dpAI"] < BOLET_DP_AI and r["intAI"] < BOLET_INT_AI
        rows.append(
            {
                "measurement_id": stable_id(kernel_id, i),
                "kernel_id": kernel_id,
                "device_id": "rtx-3080",
                "source": "gpuflopbench",
                "upstream_file": "cuda-profiling/profiling-data.csv",
                "upstream_row": i,
                "program": r["targetName"],
                "name": r["Kernel Name"],
                "op": r["kernelName"],
                "language": "cuda" if str(r["targetName"]).endswith("-cuda") else "openmp",
                "grid_x": grid[0],
                "grid_y": grid[1],
                "grid_z": grid[2],
                "block_x": block[0],
                "block_y": block[1],
                "block_z": block[2],
                "duration_us": r["xtime"] / 1e3,
                "achieved_gbps": r["traffic"] / 1e9,
                "fp32_gflops": r["spPerf"] / 1e9,
                "fp64_gflops": r["dpPerf"] / 1e9,
                "int_gops": r["intPerf"] / 1e9,
                "fp32_arith_intensity": r["spAI"],
                "fp64_arith_intensity": r["dpAI"],
                "int_arith_intensity": r["intAI"],
                "roofline_class_published": "bandwidth" if bandwidth else "compute",
                "source_text": _program_sources(src_root, r["targetName"], str(r["Kernel Name"]), cache),
            }
        )
    frame = pd.DataFrame(rows)
    for column in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "upstream_row"):
        frame[column] = frame[column].astype("Int64")
    return frame


def load_bolet_table(settings: Settings) -> pd.DataFrame:
    """gpuFLOPBench measurements joined with kernel source: the canonical ingest when it exists."""
    try:
        from components.ingest.gpuflopbench import ingest  # type: ignore[import-not-found]
    except ImportError:
        return read_gpuflopbench(settings.datasets_dir)
    from components.devices import load_catalog
    from components.ingest.schema import with_measurement_ids

    out = ingest(settings.datasets_dir / "gpuflopbench", load_catalog())
    measurements = with_measurement_ids(out.measurements)  # the adapter leaves ids to the ingest runner
    kernels = out.kernels.drop(columns=[c for c in ("source",) if c in out.kernels]).drop_duplicates(
        "kernel_id"
    )
    keep = [c for c in measurements.columns if c not in kernels.columns or c == "kernel_id"]
    joined = measurements[keep].merge(kernels, on="kernel_id", how="left")
    joined.index = measurements.index  # split folds are row labels of this frame
    return joined


def bolet_sides(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    from components.evaluation.splits import make_split

    fold = make_split(table, "bolet-roofline")[0]
    return table.loc[fold.train], table.loc[fold.test]


def balanced_subsample(
    frame: pd.DataFrame, per_class: int, column: str = "roofline_class_published", salt: str = "llm-sub"
) -> pd.DataFrame:
    """Deterministic (hash-ordered) ``per_class`` rows of each class; all rows if fewer."""
    from components.common.sampling import balanced_sample

    return balanced_sample(frame, per_class, column, salt, key="kernel_id", sep="|")


# --------------------------------------------------------------------------- scoring


def _messages_for(row: pd.Series, catalog: Any, tokenizer: Any, scenario: str, max_tokens: int) -> str:
    from components.models.llm.model import LLMConfig, row_prompt

    # The metrics section costs ~150-200 tokens (digits tokenize one by one); grant it on top so the
    # profiled prompt shows as much source as the others.
    budget = max_tokens + PROFILED_EXTRA_TOKENS if scenario == "profiled" else max_tokens
    return row_prompt(
        row,
        catalog,
        LLMConfig(max_tokens=budget),
        tokenizer,
        scenario=scenario,
        profile_columns=PROFILE_COLUMNS if scenario == "profiled" else (),
        question=True,
    )


def few_shot_messages(
    datasets_dir: Path, catalog: Any, tokenizer: Any, max_tokens: int
) -> list[dict[str, str]]:
    """The 4 upstream examples as user/assistant turns (RTX 3080, the dataset's GPU)."""
    device = catalog.get("rtx-3080")
    messages = []
    for file_name, label in FEW_SHOT_FILES:
        source = (datasets_dir / FEW_SHOT_DIR / file_name).read_bytes()
        prompt = build_prompt(source, None, None, device, "few-shot", max_tokens, tokenizer, kernel_name=None)
        messages += [
            {"role": "user", "content": prompt.text},
            {"role": "assistant", "content": ANSWERS[label]},
        ]
    return messages


class LocalChoiceScorer:
    """Constrained choice with a local causal LM: argmax over answers of log P(answer | chat prompt).

    A shared prefix (system + few-shot turns) is run once and its KV cache copied per kernel.
    """

    def __init__(self, model: Any, tokenizer: Any, prefix: list[dict[str, str]]) -> None:
        import torch

        self.model, self.tokenizer, self.prefix = model, tokenizer, prefix
        self.answer_ids = {
            label: tokenizer.encode(word, add_special_tokens=False) for label, word in ANSWERS.items()
        }
        self.prefix_ids = self._template(prefix, generation=False) if prefix else []
        self.prefix_cache = None
        if self.prefix_ids:
            with torch.no_grad():
                out = model(input_ids=torch.tensor([self.prefix_ids]), use_cache=True)
            self.prefix_cache = out.past_key_values

    def _template(self, messages: list[dict[str, str]], generation: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)

    def score(self, user_text: str) -> dict[str, float]:
        import torch

        full = self._template([*self.prefix, {"role": "user", "content": user_text}], generation=True)
        use_prefix = self.prefix_cache is not None and full[: len(self.prefix_ids)] == self.prefix_ids
        query = full[len(self.prefix_ids) :] if use_prefix else full
        scores = {}
        with torch.no_grad():
            cache = copy.deepcopy(self.prefix_cache) if use_prefix else None
            # Only the last position's logits are needed: skips the 49k-vocab projection of every token.
            out = self.model(
                input_ids=torch.tensor([query]), past_key_values=cache, use_cache=True, logits_to_keep=1
            )
            first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            for label, ids in self.answer_ids.items():
                logp = float(first[ids[0]])
                if len(ids) > 1:  # the rest of a multi-token answer, continuing this prompt's cache
                    branch = copy.deepcopy(out.past_key_values)
                    more = self.model(
                        input_ids=torch.tensor([ids[:-1]]),
                        past_key_values=branch,
                        use_cache=True,
                        logits_to_keep=len(ids) - 1,
                    )
                    logps = torch.log_softmax(more.logits[0].float(), dim=-1)
                    logp += float(sum(logps[k, ids[k + 1]] for k in range(len(ids) - 1)))
                scores[label] = logp
        return scores


class EndpointChooser:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint; the reply's first answer word counts."""

    def __init__(
        self, url: str, prefix: list[dict[str, str]], model: str = "default", timeout_s: float = 60.0
    ) -> None:
        self.url = url.rstrip("/") + "/v1/chat/completions" if "/chat/completions" not in url else url
        self.prefix, self.model, self.timeout_s = prefix, model, timeout_s

    def score(self, user_text: str) -> dict[str, float]:
        body = json.dumps(
            {
                "model": self.model,
                "temperature": 0,
                "max_tokens": 8,
                "messages": [*self.prefix, {"role": "user", "content": user_text}],
            }
        ).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                reply = json.loads(response.read())["choices"][0]["message"]["content"]
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            raise EndpointError(f"LLM endpoint {self.url} unreachable: {exc}") from exc
        except (KeyError, IndexError, ValueError) as exc:
            raise EndpointError(f"LLM endpoint {self.url} gave no chat completion: {exc}") from exc
        text = reply.strip().lower()
        # An answer naming neither class scores -inf for both and counts as wrong.
        return {label: (0.0 if text.startswith(label[:4]) else -math.inf) for label in ANSWERS}


def _pick(scores: dict[str, float]) -> str | None:
    best = max(scores, key=lambda k: scores[k])
    return None if not math.isfinite(scores[best]) else best


def run_prompt_scenario(
    test: pd.DataFrame, scenario: str, chooser: Any, catalog: Any, tokenizer: Any, max_tokens: int
) -> ScenarioResult:
    from components.common.metrics import accuracy, balanced_accuracy

    started = time.perf_counter()
    preds = [
        _pick(chooser.score(_messages_for(row, catalog, tokenizer, scenario, max_tokens)))
        for _, row in test.iterrows()
    ]
    seconds = time.perf_counter() - started
    truth = test["roofline_class_published"].tolist()
    preds_s = [p if p is not None else "none" for p in preds]
    return ScenarioResult(
        scenario,
        accuracy(truth, preds_s),
        balanced_accuracy(truth, preds_s),
        len(test),
        seconds,
        seconds / max(len(test), 1),
        {"predicted_bandwidth_share": float(np.mean([p == "bandwidth" for p in preds]))},
    )


def run_finetune_scenario(
    train: pd.DataFrame,
    test: pd.DataFrame,
    settings: Settings,
    *,
    per_class: int,
    workers: int,
    epochs: int,
    max_tokens: int,
    batch_size: int,
) -> ScenarioResult:
    """(iv): LoRA classifier trained with Ray Train on a balanced subsample of the train side."""
    from components.common.metrics import accuracy, balanced_accuracy
    from components.models.llm.model import LLMConfig, LLMPredictor
    from components.training.llm import split_validation, train_llm

    subset = balanced_subsample(train, per_class)
    fit_side, val_side = split_validation(subset)
    config = LLMConfig(class_column="roofline_class_published", numeric_targets=())
    started = time.perf_counter()
    out_dir = train_llm(
        fit_side,
        val_side,
        settings,
        workers=workers,
        epochs=epochs,
        max_tokens=max_tokens,
        batch_size=batch_size,
        config=config,
        run_name="llm-bolet-finetune",
    )
    train_s = time.perf_counter() - started
    predictor = LLMPredictor.load(out_dir)
    started = time.perf_counter()
    preds = predictor.predict(test)["pred_roofline_class"].tolist()
    seconds = time.perf_counter() - started
    truth = test["roofline_class_published"].tolist()
    return ScenarioResult(
        "fine-tune",
        accuracy(truth, preds),
        balanced_accuracy(truth, preds),
        len(test),
        seconds,
        seconds / max(len(test), 1),
        {
            "train_s": train_s,
            "n_train": len(fit_side),
            "n_val": len(val_side),
            "model_dir": str(out_dir),
            "history": predictor.history,
        },
    )


def run_bolet(
    settings: Settings,
    scenarios: tuple[str, ...],
    *,
    test_per_class: int | None = None,
    max_tokens: int = 384,
    ft_per_class: int = 48,
    ft_workers: int = 2,
    ft_epochs: int = 2,
    ft_max_tokens: int = 192,
    ft_batch_size: int = 8,
    endpoint: str | None = None,
    base: str | None = None,
    on_result: Callable[[list[ScenarioResult]], None] | None = None,
) -> list[ScenarioResult]:
    """Run the chosen scenarios; ``test_per_class`` subsamples the 170+170 test side (stated in results)."""
    from components.devices import load_catalog
    from components.models.llm.loader import load_base_model, load_tokenizer

    table = load_bolet_table(settings)
    train, test = bolet_sides(table)
    if test_per_class is not None:
        test = balanced_subsample(test, test_per_class, salt="llm-test-sub")
    catalog = load_catalog()
    results: list[ScenarioResult] = []
    prompt_scenarios = [s for s in scenarios if s != "fine-tune"]
    if prompt_scenarios:
        tokenizer = load_tokenizer(base, settings.cache_dir / "llm")
        model = None if endpoint else load_base_model(base, settings.cache_dir / "llm")[0]
        for scenario in prompt_scenarios:
            prefix = [{"role": "system", "content": SYSTEM}]
            if scenario == "few-shot":
                prefix += few_shot_messages(settings.datasets_dir, catalog, tokenizer, max_tokens)
            chooser = (
                EndpointChooser(endpoint, prefix) if endpoint else LocalChoiceScorer(model, tokenizer, prefix)
            )
            results.append(run_prompt_scenario(test, scenario, chooser, catalog, tokenizer, max_tokens))
            if on_result:
                on_result(results)  # keep what is done if a later scenario fails
    if "fine-tune" in scenarios:
        results.append(
            run_finetune_scenario(
                train,
                test,
                settings,
                per_class=ft_per_class,
                workers=ft_workers,
                epochs=ft_epochs,
                max_tokens=ft_max_tokens,
                batch_size=ft_batch_size,
            )
        )
    return results


def plot_results(results: list[ScenarioResult], path: Path) -> Path:
    """Bar chart: accuracy and balanced accuracy per scenario, chance (0.5) marked."""
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    names = [r.scenario for r in results]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(x - 0.2, [r.accuracy for r in results], 0.4, label="accuracy")
    ax.bar(x + 0.2, [r.balanced_accuracy for r in results], 0.4, label="balanced accuracy")
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
    ax.set_xticks(x, [f"{n}\n(n={r.n})" for n, r in zip(names, results, strict=False)])
    ax.set_ylim(0, 1)
    ax.set_title("Bolet roofline scenarios, bolet-roofline test side")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
