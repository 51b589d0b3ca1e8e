"""The public sources kernelcast ingests: adapter lookup and each source's pinned upstream.

Adapters are imported lazily (``components.ingest.<name>.ingest``) so that listing sources or
validating a name costs nothing. Commits are the full hashes of the snapshots in
``shared/datasets/PROVENANCE.csv`` (each source's HEAD at assembly time): fetching a source from
upstream at that commit gives the same files the local bundle holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from components.ingest.base import AdapterOutput

SOURCES: tuple[str, ...] = (
    "neusight",
    "gpuflopbench",
    "kernelbench",
    "benchmark_hub",
    "pipeweave",
    "aiconfigurator",
    "aiter",
    "kernelcast",
    "csv",
)
# Our own measurements (``kernelcast profile`` on lent GPUs) are project data, committed under
# ``profiled-data/``; their adapter module is ``profiled``.
# aiconfigurator's tables are read by ``aiconfigurator`` (shared with the op engine's measured store);
# its canonical adapter is ``aiconfigurator_canonical``.
# A team's own timings (``--source csv --from FILE``) have no default location: the user names the file.
MODULES: dict[str, str] = {
    "kernelcast": "profiled",
    "aiconfigurator": "aiconfigurator_canonical",
    "csv": "user_csv",
}
PROJECT_DATA_DIRS: dict[str, str] = {"kernelcast": "profiled-data"}
FILE_SOURCES: frozenset[str] = frozenset({"csv"})

Adapter = Callable[[Path, object], "AdapterOutput"]


@dataclass(frozen=True)
class Upstream:
    repo: str  # owner/name on GitHub
    commit: str  # full 40-hex commit the adapters were written against

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}.git"


UPSTREAMS: dict[str, Upstream] = {
    "neusight": Upstream("sitar-lab/NeuSight", "6945927d9afcca2b9daf021f8395e53edc5b4eef"),
    "gpuflopbench": Upstream(
        "Scientific-Computing-Lab/gpuFLOPBench", "4738733b337e9455edea5e7172886a08830eee34"
    ),
    "kernelbench": Upstream("ScalingIntelligence/KernelBench", "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"),
    "benchmark_hub": Upstream(
        "AutoTuningAssociation/benchmark_hub", "8eeb99e7179e6838af95d392ac6c60cebfd8c434"
    ),
    "pipeweave": Upstream("zksainx/pipeweave", "55e03178d15a79ca3fa8385a399fbcfb48771719"),
    "aiconfigurator": Upstream("ai-dynamo/aiconfigurator", "095f58a51c4ca8e61b66ec108d86f223f8d559ce"),
    "aiter": Upstream("ROCm/aiter", "e4048607a535ace3a2b51ded31b1c8c2d45c0879"),
}


def check_source(name: str) -> str:
    """``name`` if it is a known source; a ValueError listing the valid names otherwise."""
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; valid sources: {', '.join(SOURCES)}")
    return name


def get_adapter(name: str) -> Adapter:
    """The ``ingest(root, catalog) -> AdapterOutput`` function of source ``name``."""
    module = import_module(f"components.ingest.{MODULES.get(check_source(name), name)}")
    return module.ingest


def upstream(name: str) -> Upstream:
    if check_source(name) not in UPSTREAMS:
        raise ValueError(f"source {name!r} is this project's own data (no upstream repository to fetch)")
    return UPSTREAMS[name]


def default_root(name: str, datasets_dir: Path) -> Path:
    """Where a source is read from by default: the public bundle, or the project's own data."""
    from components.platform.config import PROJECT_ROOT

    if check_source(name) in FILE_SOURCES:
        raise ValueError(f"source {name!r} reads your own file: give --from FILE.csv (or a folder of them)")
    if name in PROJECT_DATA_DIRS:
        return PROJECT_ROOT / PROJECT_DATA_DIRS[name]
    return datasets_dir / name
