"""The README's speed section from one ``kernelcast bench serve`` result (``components.serving.bench``):
``readme_block`` draws it, ``write_readme_block`` puts it in the file's bench-serve block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.common.marked_blocks import markers, write_marked_block

SERVE_BLOCK = "bench-serve"
MARKER_START, MARKER_END = markers(SERVE_BLOCK)


def _rate(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.0f}k"


def _ms(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    return "n/a" if value is None else (f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s")


def readme_block(result: dict[str, Any], command: str) -> str:
    """The README's speed section (between the bench-serve markers) from one ``run_bench`` result."""
    raw, targets = result["raw"], result["targets"]
    model, roof = raw["model"], raw["roofline"]
    load = result["machine"].get("load_average", [float("nan")])[0]
    load_after = result["machine"].get("load_average_after", [float("nan")])[0]
    cpus = result["machine"]["cpus"]
    goal, share = targets["end_to_end_rows_per_cpu_s"], targets["share_of_roofline_rate"]
    fast_enough = model["end_to_end_rows_per_cpu_s"] >= goal
    close_enough = raw["model_over_roofline_end_to_end"] >= share
    shared = load > 0.5 * cpus or load_after > 0.5 * cpus
    lines = [
        f"Speed, `{command}` ({model['rows']:,} op questions per path in chunks of "
        f"{model.get('chunk_rows', 0):,}, "
        f"one thread; rates per CPU-second of that thread; `benchmarks/results/bench_serve.json`), "
        f"{result['model_version']}, on {cpus} cores, "
        f"load average {load:.1f} before / {load_after:.1f} after"
        + (
            " (a shared, loaded box: wall-clock figures and latencies are inflated; "
            "per-CPU-second rates much less)"
            if shared
            else ""
        )
        + ":",
        "",
        "| path | featurise | design matrix | trees | derived answers | model (all after featurise) | "
        "end to end /CPU-s | end to end /s (wall) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in (
        (f"tabular champion, trees: {model.get('trees') or 'n/a'}", model),
        ("roofline model (training-free)", roof),
    ):
        stages = entry.get("model_stages_rows_per_cpu_s") or {}
        cells = [
            _rate(entry["featurise_rows_per_cpu_s"]),
            *(_rate(stages.get(k)) for k in ("design", "trees", "derive")),
            _rate(entry["model_rows_per_cpu_s"]),
            _rate(entry["end_to_end_rows_per_cpu_s"]),
            _rate(entry["end_to_end_rows_per_s"]),
        ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines += [
        "",
        f"Targets: >= {_rate(goal)} op questions per CPU-second end to end -- "
        f"{'met' if fast_enough else '**not met**'} ({_rate(model['end_to_end_rows_per_cpu_s'])}); >= "
        f"{share:.0%} of the roofline model's rate -- {'met' if close_enough else '**not met**'} "
        f"({raw['model_over_roofline_end_to_end']:.0%}).",
    ]
    tiers = result.get("engine_tiers") or {}
    if tiers and not tiers.get("unavailable"):
        slower = tiers["measured_over_spec"] < targets.get("measured_over_spec", 1.0)
        verdict = (
            "**is slower than the model it replaces**."
            if slower
            else "is not slower than the model it replaces."
        )
        lines += [
            "",
            f"Op engine tiers, bf16 GEMMs on the {len(tiers['devices'])} GPUs with measured "
            f"kernels ({tiers['rows']:,} questions, {tiers['measured_hits']:,} answered by the "
            f"measured tier), per CPU-second: measured-tier lookup "
            f"{_rate(tiers['measured_rows_per_cpu_s'])}, the "
            f"spec model it replaces {_rate(tiers['spec_rows_per_cpu_s'])}, `OpEngine.predict` whole "
            f"{_rate(tiers['engine_rows_per_cpu_s'])} -- the measured tier " + verdict,
        ]
    elif tiers:
        lines += ["", f"Op engine tiers: {tiers['unavailable']}."]
    server, source, llm = result.get("server_op", {}), result.get("server_source", {}), result.get("llm", {})
    single, deployments = result.get("single_question", {}), result.get("deployments", {})
    lines += ["", "| figure | p50 | p99 | notes |", "|---|---|---|---|"]
    if server:
        cpu = server.get("server_cpu_ms_per_request")
        lines.append(
            f"| server, one op question per request at {server['rate_rps']:g} req/s (separate client) | "
            f"{_ms(server, 'p50_ms')} | {_ms(server, 'p99_ms')} | "
            f"{server['achieved_rps']:.0f} req/s achieved, "
            f"{server['errors']} errors, {'n/a' if cpu is None else f'{cpu:.1f}'} server CPU-ms per "
            "request; "
            f"target p99 < {targets['server_p99_ms_at_100rps']:g} ms |"
        )
    if single:
        lines.append(
            "| one op question in process (parse, features, champion, physics, answer), one at a "
            f"time | {_ms(single, 'p50_ms')} | {_ms(single, 'p99_ms')} | {single.get('n', '')} questions |"
        )
    if deployments and not deployments.get("unavailable"):
        lines.append(
            f"| `predict --llm` {deployments['llm']} on {deployments['device']} (isl/osl "
            f"{deployments['params']['isl']}/{deployments['params']['osl']}, concurrency "
            f"{deployments['params']['concurrency']}, TP {deployments['params']['tp']}) | "
            f"{_ms(deployments, 'p50_ms')} | {_ms(deployments, 'p99_ms')} | "
            f"{deployments['deployments_per_cpu_s']:.0f} deployments per CPU-second |"
        )
        within = deployments["rank_s"] < targets.get("catalog_rank_s", 2.0)
        lines.append(
            f"| whole-catalog ranking of {deployments['llm']} ({deployments['rank_gpus']} GPUs x TP "
            "options: "
            f"{deployments['rank_options']} options, {deployments['rank_fitting']} fit) | "
            f"{deployments['rank_s']:.2f} s | | {deployments['rank_cpu_s']:.2f} CPU-s; target < "
            f"{targets.get('catalog_rank_s', 2.0):g} s -- {'met' if within else '**not met**'} |"
        )
    elif deployments:
        lines.append(f"| `predict --llm` deployments | n/a | n/a | {deployments['unavailable']} |")
    if source:
        what = source.get("unavailable") or f"{source.get('n', '')} requests"
        lines.append(
            f"| server, CUDA source question (compile + static analysis) | {_ms(source, 'p50_ms')} | "
            f"{_ms(source, 'p99_ms')} | {what} |"
        )
    if llm and not llm.get("skipped"):
        lines.append(
            f"| llm path, one op question on 2 GPUs | {_ms(llm, 'p50_ms')} | {_ms(llm, 'p99_ms')} | "
            f"{llm.get('unavailable') or llm.get('model', '')} |"
        )
    return "\n".join(lines)


def write_readme_block(path: Path, section: str) -> None:
    """Write ``section`` into the bench-serve block of ``path`` (``write_marked_block``)."""
    write_marked_block(path, SERVE_BLOCK, section)
