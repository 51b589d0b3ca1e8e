"""The fleet (GPUs we can run on) against the devices we have measurements for.

The fleet comes from the Ray cluster -- each alive node's ``accelerator_type:<X>`` resources (Ray
sets them for detected GPUs; a KubeRay group or ``ray start --resources`` can declare them) and its
``ray.io/accelerator-type`` label -- or from a list the operator keeps (one GPU name per line, or a
YAML list). Names resolve through the device catalog (aliases included). A catalog GPU without
measurements is profiled where a node of that type exists; otherwise it can only be predicted from
its spec, and the plan says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESOURCE_PREFIX = "accelerator_type:"
LABEL = "ray.io/accelerator-type"


@dataclass(frozen=True)
class FleetNode:
    accelerator: str  # as the cluster names it (resource / label value, or the operator's list)
    node_id: str | None  # Ray node id; None for an operator-kept entry
    address: str | None = None


@dataclass
class NewGpuPlan:
    measured: list[str] = field(default_factory=list)  # catalog ids with measurements
    to_profile: dict[str, list[FleetNode]] = field(default_factory=dict)  # catalog id -> nodes of that type
    unprofilable: list[str] = field(default_factory=list)  # in the fleet list or catalog, no node, no data
    unknown: list[str] = field(default_factory=list)  # fleet accelerators the catalog does not know

    def to_json(self) -> dict[str, Any]:
        return {
            "measured": self.measured,
            "to_profile": {k: [n.node_id for n in v] for k, v in self.to_profile.items()},
            "unprofilable": self.unprofilable,
            "unknown": self.unknown,
        }


def nodes_from_ray(nodes: Iterable[Mapping[str, Any]]) -> list[FleetNode]:
    """Accelerators of the alive nodes in ``ray.nodes()`` (one entry per node and type)."""
    fleet = []
    for node in nodes:
        if not node.get("Alive", False):
            continue
        names = {
            key[len(RESOURCE_PREFIX) :]
            for key in (node.get("Resources") or {})
            if key.startswith(RESOURCE_PREFIX)
        }
        label = (node.get("Labels") or {}).get(LABEL)
        if label:
            names.add(str(label))
        node_id, address = str(node.get("NodeID")), node.get("NodeManagerAddress")
        fleet += [FleetNode(name, node_id, address) for name in sorted(names)]
    return fleet


def nodes_from_file(path: Path) -> list[FleetNode]:
    """An operator-kept list: a YAML list of names, or one name per line (``#`` comments)."""
    import yaml

    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"fleet list not found: {path}") from None
    loaded = yaml.safe_load(text)
    if isinstance(loaded, list):
        names = [str(n) for n in loaded]
    elif loaded is None or isinstance(loaded, str):
        names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    else:
        raise ValueError(f"{path}: a fleet list is a YAML list of GPU names or one name per line")
    return [FleetNode(name, None) for name in names if name]


def measured_devices(canonical_dir: Path) -> set[str]:
    """Device ids with at least one measurement in the canonical tables (none when absent)."""
    import pyarrow.parquet as pq

    table = Path(canonical_dir) / "measurements.parquet"
    if not table.is_file():
        return set()
    column = pq.read_table(table, columns=["device_id"]).column("device_id")
    return {str(v) for v in column.unique().to_pylist() if v is not None}


def plan_new_gpus(
    catalog: Any, fleet: list[FleetNode], measured: set[str], candidates: Iterable[str] | None = None
) -> NewGpuPlan:
    """What to profile where. ``candidates`` (catalog names) are the GPUs to report on even with no
    node (default: those in ``fleet``); every fleet GPU with a Ray node and no data is profiled."""
    plan = NewGpuPlan(measured=sorted(measured))
    with_node: dict[str, list[FleetNode]] = {}
    listed: list[str] = []
    for node in fleet:
        try:
            device = catalog.resolve(node.accelerator).id
        except (KeyError, LookupError, ValueError):
            plan.unknown.append(node.accelerator)
            continue
        listed.append(device)
        if node.node_id is not None:
            with_node.setdefault(device, []).append(node)
    for name in candidates or []:
        try:
            listed.append(catalog.resolve(name).id)
        except (KeyError, LookupError, ValueError):
            plan.unknown.append(name)
    for device in dict.fromkeys(listed):
        if device in measured:
            continue
        if device in with_node:
            plan.to_profile[device] = with_node[device]
        else:
            plan.unprofilable.append(device)
    plan.unknown = sorted(set(plan.unknown))
    return plan


__all__ = [
    "FleetNode",
    "NewGpuPlan",
    "measured_devices",
    "nodes_from_file",
    "nodes_from_ray",
    "plan_new_gpus",
]
