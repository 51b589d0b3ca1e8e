"""`kernelcast models list`: the bundled LLM configs `--llm` takes by name, with dtype and size."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kernelcast.commands._common import clean_errors

app = typer.Typer(help="The bundled LLM configs that --llm takes by name.", no_args_is_help=True)


@app.command("list")
@clean_errors
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Every bundled model config: name, weights' dtype, parameters, layers, experts; a path to an HF
    config.json (or its JSON text) works with --llm too."""
    from components.deployments.model_list import bundled_models

    models = bundled_models()
    if as_json:
        typer.echo(json.dumps({"models": models}, indent=2))
        return
    header = ["name", "dtype", "params_b", "layers", "moe"]
    rows = [
        [
            m["name"],
            m["dtype"],
            "-" if m["parameters_b"] is None else f"{m['parameters_b']:g}",
            "-" if m["layers"] is None else str(m["layers"]),
            m["moe"] or ("-" if m["modelled"] else f"not modelled: {m['reason']}"),
        ]
        for m in models
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        typer.echo("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]))
    modelled = sum(m["modelled"] for m in models)
    typer.echo(
        f"{len(models)} bundled configs, {modelled} modelled; --llm takes a name, a config path or its JSON"
    )
