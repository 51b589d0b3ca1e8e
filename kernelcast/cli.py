"""The ``kernelcast`` command line.

Each subcommand lives in ``kernelcast/commands/<area>.py`` and imports heavy libraries (torch,
ray, great_expectations, peft, mlflow) only inside its function body, so ``--help`` stays fast.
A single command (``kernelcast predict ...``) builds only that command's options: Typer inspects the
signature of every registered command when it runs, ~0.2-0.4 s for all 24 on a loaded 2-core box.
"""

from __future__ import annotations

import sys
from importlib import import_module

import typer

HELP = (
    "Predict GPU kernel runtime, bandwidth, GFLOP/s, cache hit rates and roofline class "
    "from source or op + shapes and a GPU's spec."
)
# Sub-apps (name -> module holding ``app``) and commands (name -> module, function), in --help order.
GROUPS: dict[str, str] = {
    "devices": "kernelcast.commands.devices",
    "features": "kernelcast.commands.features",
    "bench": "kernelcast.commands.bench",
    "llm": "kernelcast.commands.llm",
    "models": "kernelcast.commands.models",
}
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("kernelcast.commands.ingest", "ingest_command"),
    "validate": ("kernelcast.commands.validate", "validate_command"),
    "train": ("kernelcast.commands.train", "train_command"),
    "evaluate": ("kernelcast.commands.evaluate", "evaluate_command"),
    "promote": ("kernelcast.commands.promote", "promote_command"),
    "predict": ("kernelcast.commands.predict", "predict_command"),
    "rank": ("kernelcast.commands.rank", "rank_command"),
    "serve": ("kernelcast.commands.serve", "serve_command"),
    "profile": ("kernelcast.commands.profile", "profile_command"),
    "calibrate": ("kernelcast.commands.calibrate", "calibrate_command"),
    "pipeline": ("kernelcast.commands.pipeline", "pipeline_command"),
    "deploy": ("kernelcast.commands.deploy", "deploy_command"),
    "mlflow-ui": ("kernelcast.commands.mlflow_ui", "mlflow_ui_command"),
}


def build_app(only: str | None = None) -> typer.Typer:
    """The CLI with every command, or with command/group ``only`` alone (a group of one: same usage lines)."""
    built = typer.Typer(name="kernelcast", help=HELP, no_args_is_help=True, pretty_exceptions_enable=False)
    for name, module in GROUPS.items():
        if only in (None, name):
            built.add_typer(import_module(module).app, name=name)
    for name, (module, function) in COMMANDS.items():
        if only in (None, name):
            built.command(name)(getattr(import_module(module), function))
    if only is not None:

        @built.callback()
        def _group() -> None:  # keeps a one-command app a group: `kernelcast predict ...` as always
            """"""

    return built


app = build_app()


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else None
    (build_app(name) if name in COMMANDS or name in GROUPS else app)()


if __name__ == "__main__":
    main()
