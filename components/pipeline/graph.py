"""The stage graph, read from ``dvc.yaml`` -- its one definition.

``dvc.yaml`` says which stages exist, what each reads (deps, params) and writes (outs, metrics);
the flows take their stage list and order from here instead of keeping a list of their own, so a
stage added to ``dvc.yaml`` is run by ``kernelcast pipeline`` without touching the flows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class StageGraphError(ValueError):
    """``dvc.yaml`` is missing, malformed, or its stages form a cycle."""


@dataclass(frozen=True)
class Stage:
    name: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]  # outs and metrics, as written (relative to the project root)
    params: tuple[str, ...]
    upstream: tuple[str, ...]  # stages whose outs this stage reads


def _paths(entries: Any) -> tuple[str, ...]:
    """``outs``/``metrics`` entries are a path or a one-key mapping ``{path: options}``."""
    paths = []
    for entry in entries or []:
        paths.append(str(next(iter(entry))) if isinstance(entry, dict) else str(entry))
    return tuple(paths)


def _under(path: str, out: str) -> bool:
    return path == out or path.startswith(out.rstrip("/") + "/")


def read_stages(dvc_yaml: Path) -> list[Stage]:
    """Every stage of ``dvc_yaml`` in an order where each comes after the stages it reads from
    (file order among independent stages)."""
    import yaml

    try:
        document = yaml.safe_load(Path(dvc_yaml).read_text())
    except FileNotFoundError:
        raise StageGraphError(f"{dvc_yaml}: not found (the pipeline's stage graph)") from None
    except yaml.YAMLError as exc:
        raise StageGraphError(f"{dvc_yaml}: not valid YAML ({exc})") from None
    raw = (document or {}).get("stages")
    if not isinstance(raw, dict) or not raw:
        raise StageGraphError(f"{dvc_yaml}: no `stages:` mapping")
    declared = []
    for name, body in raw.items():
        if not isinstance(body, dict) or "cmd" not in body:
            raise StageGraphError(f"{dvc_yaml}: stage {name!r} has no cmd")
        outs = _paths(body.get("outs")) + _paths(body.get("metrics"))
        params = tuple(str(p) for p in body.get("params") or [] if not isinstance(p, dict))
        declared.append((str(name), tuple(str(d) for d in body.get("deps") or []), outs, params))
    producers = {out: name for name, _, outs, _ in declared for out in outs}
    stages = {
        name: Stage(
            name,
            deps,
            outs,
            params,
            tuple(
                dict.fromkeys(
                    producers[o] for d in deps for o in producers if _under(d, o) and producers[o] != name
                )
            ),
        )
        for name, deps, outs, params in declared
    }
    ordered: list[Stage] = []
    placed: set[str] = set()
    while len(ordered) < len(stages):
        ready = [s for s in stages.values() if s.name not in placed and set(s.upstream) <= placed]
        if not ready:
            left = sorted(set(stages) - placed)
            raise StageGraphError(f"{dvc_yaml}: stages {', '.join(left)} depend on each other in a cycle")
        ordered.append(ready[0])
        placed.add(ready[0].name)
    return ordered


def stage_names(dvc_yaml: Path) -> tuple[str, ...]:
    return tuple(s.name for s in read_stages(dvc_yaml))


def select_stages(dvc_yaml: Path, from_stage: str | None = None, only: list[str] | None = None) -> list[str]:
    """The stages to run: all, those from ``from_stage`` on, or just ``only`` (in graph order)."""
    names = list(stage_names(dvc_yaml))
    if only:
        unknown = [s for s in only if s not in names]
        if unknown:
            raise ValueError(f"--only {', '.join(unknown)}: unknown stage; dvc.yaml has {', '.join(names)}")
        return [s for s in names if s in only]
    if from_stage is None:
        return names
    if from_stage not in names:
        raise ValueError(f"--from-stage {from_stage}: unknown stage; dvc.yaml has {', '.join(names)}")
    return names[names.index(from_stage) :]


def ready_stages(chosen: list[str], graph: dict[str, Stage], done: set[str], started: set[str]) -> list[str]:
    """The stages of ``chosen`` (graph order) that can start now: not started, and every upstream stage that
    this run also runs is done. Independent stages (ingest and static, which reads the datasets, not ingest's
    tables) are ready together, so the flow runs them side by side."""
    wanted = set(chosen)
    return [
        name
        for name in chosen
        if name not in started and all(up in done for up in graph[name].upstream if up in wanted)
    ]


__all__ = ["Stage", "StageGraphError", "read_stages", "ready_stages", "select_stages", "stage_names"]
