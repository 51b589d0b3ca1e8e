"""docs/devices.md: its spec example is valid and names every field; optional fields are optional
(issue 26)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from components.devices import DeviceSpec, spec_from_mapping
from components.devices.catalog import CatalogError, PeakTflops

DOC = Path(__file__).resolve().parents[2] / "docs" / "devices.md"


def _example() -> tuple[str, dict]:
    text = DOC.read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    return block, yaml.safe_load(block)


def test_the_documented_spec_is_valid_and_lists_every_field_with_the_optional_ones_marked() -> None:
    block, data = _example()
    spec = spec_from_mapping(data, "docs/devices.md")
    assert spec.id == "my-l4-oc"
    assert set(data) == set(DeviceSpec.model_fields)
    assert set(data["peak_tflops"]) == set(PeakTflops.model_fields)
    optional = {line.split(":")[0].strip() for line in block.splitlines() if "# optional" in line}
    required = {name for name, info in DeviceSpec.model_fields.items() if info.is_required()}
    occupancy = {"warp_size", "max_ctas_per_sm", "max_warps_per_sm"}  # required in the model, defaulted
    assert optional == (set(DeviceSpec.model_fields) - required) | occupancy | (
        set(PeakTflops.model_fields) - {"fp32"}
    ), optional
    bare = {k: v for k, v in data.items() if k not in optional}
    bare["peak_tflops"] = {"fp32": data["peak_tflops"]["fp32"]}
    assert spec_from_mapping(bare, "bare").max_ctas_per_sm == 24  # defaults from compute capability 8.9


def test_an_unknown_architecture_asks_for_the_occupancy_fields_instead_of_calling_them_missing() -> None:
    _, data = _example()
    bare = {k: v for k, v in data.items() if k not in ("max_ctas_per_sm", "warp_size", "max_warps_per_sm")}
    bare["compute_capability"] = "13.0"  # no default known
    with pytest.raises(CatalogError) as caught:
        spec_from_mapping(bare, "new.yaml")
    message = str(caught.value)
    assert "missing field 'max_ctas_per_sm'" not in message, message
    assert (
        "max_ctas_per_sm: optional where kernelcast knows the architecture" in message and "'13.0'" in message
    )
    unquoted = dict(data, compute_capability=8.9)  # YAML reads an unquoted 8.9 as a number
    assert spec_from_mapping(unquoted, "unquoted").compute_capability == "8.9"
    no_cc = {k: v for k, v in bare.items() if k != "compute_capability"}
    with pytest.raises(CatalogError) as caught:
        spec_from_mapping(no_cc, "no-cc.yaml")
    assert "missing field 'compute_capability'" in str(caught.value) and "max_ctas_per_sm" not in str(
        caught.value
    )
