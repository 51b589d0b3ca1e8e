"""`kernelcast llm bolet`: Bolet et al.'s four roofline scenarios with the LLM family.

Register in ``kernelcast/cli.py`` as ``app.add_typer(llm.app, name="llm")``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

app = typer.Typer(
    help="LLM predictor: Bolet et al.'s roofline scenarios on gpuFLOPBench.", no_args_is_help=True
)
ALL_SCENARIOS = ("profiled", "zero-shot", "few-shot", "fine-tune")


@app.callback()
def llm() -> None:
    """LLM family commands (a group, so `kernelcast llm bolet` keeps its name with one command)."""


@app.command("bolet")
@clean_errors
def bolet(
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", "-s", help="repeatable; default all four")
    ] = None,
    test_per_class: Annotated[
        int | None, typer.Option(help="subsample the 170+170 test side (deterministic)")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="prompt budget for scenarios i-iii")] = 384,
    ft_per_class: Annotated[
        int, typer.Option(help="fine-tune: train kernels per class (balanced subsample)")
    ] = 48,
    ft_epochs: Annotated[
        int, typer.Option(help="fine-tune: epochs (early stopping on a train-side slice)")
    ] = 2,
    ft_max_tokens: Annotated[int, typer.Option(help="fine-tune: prompt budget")] = 192,
    workers: Annotated[int, typer.Option(help="Ray Train workers for fine-tuning")] = 2,
    base: Annotated[
        str | None, typer.Option(help="HF causal LM path/id; default the embedded SmolLM2-135M")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="results JSON (default: reports/llm-bolet-<time>.json)")
    ] = None,
) -> None:
    """Score (i) profiled, (ii) zero-shot, (iii) few-shot, (iv) fine-tuned on the bolet-roofline test side."""
    from components.common.atomic import atomic_write
    from components.training.llm_scenarios import plot_results, run_bolet

    chosen = tuple(scenario or ALL_SCENARIOS)
    unknown = sorted(set(chosen) - set(ALL_SCENARIOS))
    if unknown:
        raise UserError(f"unknown scenario(s) {unknown}; choose from {', '.join(ALL_SCENARIOS)}")
    settings = prepared_settings()
    path = out or settings.reports_dir / f"llm-bolet-{time.strftime('%Y%m%d-%H%M%S')}.json"

    def write(results: list) -> None:
        report = {
            "split": "bolet-roofline",
            "test_per_class": test_per_class,
            "base": base or "embedded-smollm2-135m",
            "endpoint": settings.llm_endpoint,
            "max_tokens": max_tokens,
            "ft_per_class": ft_per_class,
            "ft_epochs": ft_epochs,
            "ft_max_tokens": ft_max_tokens,
            "results": [asdict(r) for r in results],
        }
        text = json.dumps(report, indent=1, default=str)
        atomic_write(path, lambda tmp: tmp.write_text(text))

    results = run_bolet(
        settings,
        chosen,
        test_per_class=test_per_class,
        max_tokens=max_tokens,
        ft_per_class=ft_per_class,
        ft_workers=workers,
        ft_epochs=ft_epochs,
        ft_max_tokens=ft_max_tokens,
        endpoint=settings.llm_endpoint,
        base=base,
        on_result=write,
    )
    write(results)
    for r in results:
        typer.echo(
            f"{r.scenario:10s} acc {r.accuracy:.3f}  bal-acc {r.balanced_accuracy:.3f}  n={r.n}  "
            f"{r.per_kernel_s:.2f} s/kernel"
        )
    figure = plot_results(results, path.with_suffix(".png"))
    typer.echo(f"wrote {path} and {figure}")
