"""Every op family of the registry (components/physics/registry.py) is wired into every place that maps
families -- or exempt there, with the reason. A new family fails here until it is wired or exempted
(docs/contributing.md, "Adding an op family"); an exemption that is no longer needed fails too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from components.physics.registry import REGISTRY, family

# Family names the data holds that are not op families: measured, never costed by an op formula.
NOT_OP_FAMILIES: dict[str, str] = {
    "program": "a whole program (gpuFLOPBench, KernelBench): counters or per-op tracing, no op formula",
    "collective": "PipeWeave's collectives (all_gather, send_recv): an interconnect model, not an op's work",
    "dedispersion": "a Kernel Tuner benchmark kernel (benchmark_hub): features/analytical's own formula",
}


def _features() -> set[str]:
    from components.features.demand import FORMULA_FAMILIES

    return {name for names in FORMULA_FAMILIES.values() for name in names}


def _questions() -> set[str]:
    from components.serving.query import FAMILY_OF_OP

    return {name for name, _ in FAMILY_OF_OP.values()}


def _ingest() -> set[str]:
    from components.ingest.schema import FAMILIES_OP

    return set(FAMILIES_OP)


def _op_engine() -> set[str]:
    from components.opmodel.store import STORE_FAMILIES

    return set(STORE_FAMILIES)


def _deployments() -> set[str]:
    from components.deployments.ops import EFFICIENCY, SMALL_OP_FAMILIES

    return set(EFFICIENCY) | set(SMALL_OP_FAMILIES)


def _programs() -> set[str]:
    """The families traced aten calls map to (one representative call each)."""
    from components.programs.ops import map_op

    t = "float32"
    calls = [
        ("mm", [([4, 8], t), ([8, 16], t)], [([4, 16], t)]),
        ("bmm", [([2, 4, 8], t), ([2, 8, 16], t)], [([2, 4, 16], t)]),
        ("scaled_dot_product_attention", [([1, 2, 8, 16], t)] * 3, [([1, 2, 8, 16], t)]),
        ("convolution", [([1, 3, 8, 8], t), ([4, 3, 3, 3], t)], [([1, 4, 6, 6], t)]),
        ("add", [([64], t), ([64], t)], [([64], t)]),
        ("_softmax", [([4, 64], t)], [([4, 64], t)]),
        ("native_layer_norm", [([4, 64], t)], [([4, 64], t)]),
        ("rms_norm", [([4, 64], t)], [([4, 64], t)]),
    ]
    ops = [
        {"aten": a, "inputs": [[s, d] for s, d in i], "outputs": [[s, d] for s, d in o]} for a, i, o in calls
    ]
    return {q.family for q in map(map_op, ops) if q.family}


PLACES: dict[str, Callable[[], set[str]]] = {
    "features (components/features/demand.FORMULA_FAMILIES)": _features,
    "questions (components/serving/query.FAMILY_OF_OP)": _questions,
    "ingest schema (components/ingest/schema.FAMILIES_OP)": _ingest,
    "op engine tables (components/opmodel/store.STORE_FAMILIES)": _op_engine,
    "deployments (components/deployments/ops.EFFICIENCY / SMALL_OP_FAMILIES)": _deployments,
    "programs (components/programs/ops.map_op)": _programs,
}
# (place prefix, family) -> why the family is not wired there
EXEMPT: dict[tuple[str, str], str] = {
    (
        "features",
        "allreduce",
    ): "an interconnect op: the op engine's link physics answers it, no features",
    ("op engine", "elementwise"): "small ops: the tabular champion / the roofline, no measured kernel tables",
    ("op engine", "softmax"): "small ops: the tabular champion / the roofline, no measured kernel tables",
    ("op engine", "layernorm"): "small ops: the tabular champion / the roofline, no measured kernel tables",
    ("op engine", "rmsnorm"): "small ops: the tabular champion / the roofline, no measured kernel tables",
    ("op engine", "conv"): "no measured convolution tables; the tabular champion answers it",
    ("deployments", "softmax"): "a decoder step's softmax is inside the attention kernel",
    ("deployments", "layernorm"): "the composed LLMs use RMSNorm",
    ("deployments", "conv"): "no convolution in a decoder LLM",
    ("programs", "moe"): "a fused MoE is a custom kernel: no aten op to trace",
    ("programs", "allreduce"): "programs are traced in one process: no collectives",
    ("features", "gdn"): "no measured GDN rows in the feature table: deployments compose it from physics",
    ("questions", "gdn"): "no --op gdn yet: the GDN layer is asked through a deployment (--llm)",
    ("ingest", "gdn"): "AIConfigurator's gdn_perf tables are not ingested yet (docs/serving.md)",
    ("op engine", "gdn"): "no GDN table in the measured store: deployments answer it by its roofline",
    ("programs", "gdn"): "a fused Triton kernel (FLA): no aten op to trace",
    (
        "features",
        "dsa",
    ): "no measured DSA rows in the feature table: deployments read AIConfigurator's tables",
    ("questions", "dsa"): "no --op dsa: the DSA attention module is asked through a deployment (--llm)",
    ("ingest", "dsa"): "AIConfigurator's dsa module tables are read in place by deployments (dsa_tables)",
    ("op engine", "dsa"): "no DSA table in the measured store: deployments read AIConfigurator's in place",
    ("programs", "dsa"): "fused FlashMLA / DeepGEMM kernels: no aten op to trace",
    ("features", "mamba2"): "no measured Mamba2 rows in the feature table: deployments read AIConfigurator's",
    ("questions", "mamba2"): "no --op mamba2: the Mamba2 block is asked through a deployment (--llm)",
    ("ingest", "mamba2"): "AIConfigurator's mamba2 conv tables are read in place by deployments (gdn_tables)",
    ("op engine", "mamba2"): "no Mamba2 table in the measured store: deployments read AIConfigurator's",
    ("programs", "mamba2"): "fused Triton / CUDA kernels (causal_conv1d, SSD): no aten op to trace",
}


def _exemption(place: str, name: str) -> str | None:
    return next(
        (why for (prefix, fam), why in EXEMPT.items() if place.startswith(prefix) and fam == name), None
    )


@pytest.mark.parametrize("place", list(PLACES))
def test_every_family_is_wired_in_every_place_or_exempt(place: str) -> None:
    covered = {family(name).name for name in PLACES[place]() if name not in NOT_OP_FAMILIES}
    missing = [name for name in REGISTRY if name not in covered and _exemption(place, name) is None]
    assert not missing, f"{place}: families not wired and not exempt: {missing} (docs/contributing.md)"
    stale = [name for name in REGISTRY if name in covered and _exemption(place, name) is not None]
    assert not stale, f"{place}: wired now, drop the exemption of {stale}"


@pytest.mark.parametrize("place", list(PLACES))
def test_every_family_a_place_names_is_in_the_registry(place: str) -> None:
    unknown = []
    for name in PLACES[place]():
        if name in NOT_OP_FAMILIES:
            continue
        try:
            family(name)
        except ValueError:
            unknown.append(name)
    assert not unknown, f"{place} maps families the registry does not know: {unknown}"


def test_exemptions_name_real_places_and_families() -> None:
    for prefix, name in EXEMPT:
        assert name in REGISTRY and any(place.startswith(prefix) for place in PLACES), (prefix, name)
