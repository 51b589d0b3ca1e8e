"""Rank GPUs for a workload (kernels with counts) by predicted time, optionally by cost per run.

Shared by ``kernelcast rank`` and ``POST /v1/rank``: the workload's kernels are asked on every
device as ordinary questions (``components.serving.questions``), then summed per device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.serving.query import QueryError

MAX_COUNT = 10**12  # times one kernel runs in a workload


class UnknownDevice(QueryError):
    """A device name the catalog does not know (the message suggests the closest ones)."""


def resolve_devices(
    devices: Sequence[Any] | str, where: str = "devices", allow_files: bool = False
) -> list[Any]:
    """DeviceSpecs for catalog names and full specs (or ``"all"``), duplicates collapsed by id.

    ``allow_files``: a name ending in .yaml/.json is a spec file to read (the CLI); the server never
    reads its own files for a request, so there it is just an unknown name.
    """
    from components.devices import CatalogError, DeviceSpec, load_catalog, resolve_spec, spec_from_mapping

    catalog = load_catalog()
    if isinstance(devices, str):
        if devices.strip().lower() != "all":
            raise QueryError(f'{where}: give a list of devices or "all"')
        return catalog.all()
    specs: dict[str, Any] = {}
    for i, device in enumerate(devices):
        try:
            if isinstance(device, DeviceSpec):
                spec = device
            elif isinstance(device, Mapping):
                spec = spec_from_mapping(dict(device), f"{where}[{i}]")
            elif isinstance(device, str) and device.strip().lower() == "all":
                for known in catalog.all():
                    specs.setdefault(known.id, known)
                continue
            elif (
                isinstance(device, str)
                and allow_files
                and device.strip().lower().endswith((".yaml", ".yml", ".json"))
            ):
                spec = resolve_spec(device.strip(), catalog)
            elif isinstance(device, str):
                spec = catalog.resolve(device)
            else:
                raise QueryError(f"{where}[{i}]: expected a catalog name or a full spec object")
        except LookupError as exc:
            raise UnknownDevice(f"{where}[{i}]: {exc.args[0] if exc.args else exc}") from None
        except (CatalogError, OSError) as exc:
            raise QueryError(f"{where}[{i}]: {exc}") from None
        known = specs.get(spec.id) or (catalog._by_id.get(spec.id) if isinstance(device, Mapping) else None)
        if known is not None and known != spec:
            raise QueryError(
                f"{where}[{i}]: id {spec.id!r} already names a device with other figures; "
                "give the spec another id"
            )
        specs.setdefault(spec.id, spec)
    if not specs:
        raise QueryError(f"{where}: empty; name at least one GPU")
    return list(specs.values())


@dataclass(frozen=True)
class Prices:
    """A prices mapping read against the GPUs being ranked: the one rule of every rank (kernels, workloads,
    deployments; CLI and HTTP). A shared prices file names more GPUs than one question asks about, and
    maybe some no catalog knows (a TPU): those are ignored and named in the note, never an error; a price
    that is not a positive number is."""

    table: dict[str, float]  # USD/hour per ranked device id
    unranked: tuple[str, ...] = ()  # names of catalog GPUs not being ranked
    unknown: tuple[str, ...] = ()  # names the catalog does not know

    def note(self) -> str | None:
        notes = []
        if self.unranked:
            notes.append(f"prices of GPUs not ranked ignored: {', '.join(self.unranked)}")
        if self.unknown:
            notes.append(f"prices of names not in the catalog ignored: {', '.join(self.unknown)}")
        return "; ".join(notes) or None


def prices_for(prices: Mapping[str, Any] | None, specs: Sequence[Any]) -> Prices:
    """USD/hour per ranked device id, and the names ignored (see :class:`Prices`)."""
    if not prices:
        return Prices({})
    from components.devices import load_catalog

    catalog = load_catalog()
    by_id = {s.id: s for s in specs}
    table: dict[str, float] = {}
    unranked, unknown = [], []
    for name, value in prices.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < float(value) < 1e6
            or not math.isfinite(float(value))
        ):
            raise QueryError(f"prices.{name} = {value!r}: expected a positive USD/hour below 1,000,000")
        try:  # a ranked device's id (a spec file's own id), else a catalog name or alias
            device_id = str(name) if str(name) in by_id else catalog.resolve(str(name)).id
        except LookupError:
            unknown.append(str(name))
            continue
        if device_id in by_id:
            table[device_id] = float(value)
        else:
            unranked.append(str(name))
    return Prices(table, tuple(unranked), tuple(unknown))


def rank_answers(
    answers: Sequence[Mapping[str, Any]], counts: Sequence[int], n_devices: int, prices: Mapping[str, float]
) -> list[dict[str, Any]]:
    """Sum count x time per device over answers laid out kernel-major (kernel k, device d at k*n+d)."""
    totals: dict[str, dict[str, Any]] = {}
    for position, answer in enumerate(answers):
        count = counts[position // n_devices]
        entry = totals.setdefault(
            answer["device"],
            {
                "device": answer["device"],
                "device_name": answer["device_name"],
                "total_us": 0.0,
                "total_us_lo": 0.0,
                "total_us_hi": 0.0,
            },
        )
        for key, source in (
            ("total_us", "duration_us"),
            ("total_us_lo", "duration_us_lo"),
            ("total_us_hi", "duration_us_hi"),
        ):
            value = answer.get(source)
            entry[key] = None if value is None or entry[key] is None else entry[key] + count * float(value)
    ranking = list(totals.values())
    for entry in ranking:
        price = prices.get(entry["device"])
        if prices:
            entry["usd_per_hour"] = price
            entry["usd_per_run"] = (
                None
                if price is None or entry["total_us"] is None
                else entry["total_us"] * 1e-6 / 3600.0 * price
            )
    # Priced GPUs by cost per run first (when prices are given), then the rest by predicted time:
    # a GPU without a price is still ranked by the objective the user can compare, never by name.
    key = "usd_per_run" if prices else "total_us"

    def order(entry: dict[str, Any]) -> tuple[bool, bool, float, str]:
        primary, time = entry.get(key), entry.get("total_us")
        value = primary if primary is not None else time
        return primary is None, value is None, value if value is not None else 0.0, entry["device"]

    ranking.sort(key=order)
    for position, entry in enumerate(ranking, start=1):
        entry["rank"] = position
    return ranking


def rank(
    predictor: Any,
    kernels: Sequence[Mapping[str, Any]],
    counts: Sequence[int],
    specs: Sequence[Any],
    prices: Mapping[str, Any] | None,
    *,
    model_version: str,
    allow_modules: bool = False,
) -> tuple[list[dict[str, Any]], str]:
    """(ranking, ranked_by): ``kernels`` are question fields without a device; ``counts`` per kernel."""
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    for i, count in enumerate(counts):
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise QueryError(f"workload[{i}].count = {count!r}: expected an integer from 1 to {MAX_COUNT:,}")
    table = prices_for(prices, specs).table
    misfits = set(too_small(kernels, specs))
    if misfits and len(misfits) < len(specs):  # rank the GPUs the workload fits; rank_note names the others
        specs = [s for s in specs if s.id not in misfits]
    rows = [{**dict(kernel), "device": spec} for kernel in kernels for spec in specs]
    answers = answer_questions(
        predictor, parse_questions(rows), model_version=model_version, allow_modules=allow_modules
    )
    return rank_answers(answers, counts, len(specs), table), ("cost" if table else "time")


def too_small(kernels: Sequence[Mapping[str, Any]], specs: Sequence[Any]) -> list[str]:
    """Ids of the GPUs whose memory some op kernel of the workload does not fit
    (``components.serving.memory_fit``); a kernel that does not parse is left to ``rank`` to report."""
    from components.serving.memory_fit import check_memory_fit
    from components.serving.question_forms import parse_questions

    small = []
    for spec in specs:
        try:
            for question in parse_questions([{**dict(k), "device": spec} for k in kernels if "op" in k]):
                check_memory_fit(question)
        except QueryError as exc:
            if "does not fit" not in str(exc):
                return []
            small.append(spec.id)
    return small


def rank_note(
    kernels: Sequence[Mapping[str, Any]], specs: Sequence[Any], prices: Mapping[str, Any] | None
) -> str | None:
    """What the ranking left out, for the user: GPUs the workload does not fit, prices of GPUs not ranked."""
    notes = []
    small = too_small(kernels, specs)
    if small and len(small) < len(specs):
        notes.append(f"not ranked, the workload does not fit their memory: {', '.join(small)}")
    priced = prices_for(prices, specs).note()
    if priced:
        notes.append(priced)
    return "; ".join(notes) or None
