"""``kernelcast bench serve``: how fast the serving paths are (a benchmark, not a timed test).

1. Raw batched prediction of the op-level model on ONE thread: N op questions (a mix of families,
   shapes, dtypes and catalog GPUs) as arrays, in chunks of ``CHUNK_ROWS`` -> vectorised features
   (``featurise``) -> the model (a tabular model's ``predict_columns`` on the arrays). Reported per
   stage (featurise; for a tabular model also its design matrix and trees, each timed alone) and end
   to end, per CPU-second of the thread and per wall second, for the given model and for the
   training-free roofline; for flat trees the bulk engine (lleaves, compiled first in the foreground;
   LightGBM where lleaves is missing) and the numpy walk's rate.
   ``--markdown README.md`` writes these figures as the README's speed table (``bench_readme``).
1b. The op engine's tiers (measured-tier lookup vs the spec model it replaces), ``predict --llm``
   deployments per CPU-second and the whole-catalog ranking of a 70B model, and one op question at a
   time in process.
2. The HTTP server (a real uvicorn process) queried from a SEPARATE client process at a fixed
   rate (default 100 requests/s, one op question each): p50/p95/p99/max latency, errors.
3. A CUDA source question through the server (compile + static analysis included), sequentially.
4. The llm path's latency: one op question answered by an LLMPredictor (embedded SmolLM2 + LoRA
   heads; untrained weights cost the same as trained ones) -- or the one in ``llm_model``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SAXPY = """
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

OPS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # (question op, family, canonical op, dims drawn)
    ("gemm", "gemm", "matmul", ("M", "N", "K")),
    ("linear", "linear", "linear", ("B", "M", "N", "K")),
    ("bmm", "bmm", "bmm", ("B", "M", "N", "K")),
    ("add", "elementwise", "add", ("N",)),
    ("gelu", "elementwise", "gelu", ("B", "H")),
    ("softmax", "softmax", "softmax", ("B", "H")),
    ("layernorm", "layernorm", "layer_norm", ("B", "H")),
    ("rmsnorm", "rmsnorm", "rmsnorm", ("B", "H")),
)
DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16")


def random_op_batch(n: int, specs: list[Any], seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` op questions as arrays: family, op, dtype, dims (n x DIMS) and a device index into ``specs``."""
    from components.features.dims import DIMS

    rng = np.random.default_rng(seed)
    which = rng.integers(0, len(OPS), n)
    dims = np.full((n, len(DIMS)), np.nan)
    position = {d: i for i, d in enumerate(DIMS)}
    for k, (_, _, _, names) in enumerate(OPS):
        rows = which == k
        for name in names:
            high = {"B": 64, "N": 1 << 24}.get(name, 8192)
            dims[rows, position[name]] = rng.integers(1, high + 1, rows.sum())
    # Labels as categoricals (codes into a few distinct names): how a bulk caller sweeping a design space
    # holds them, and what the featuriser compares fastest (object arrays of str work too, slower).
    import pandas as pd

    def labels(names: list[str], codes: np.ndarray) -> pd.Categorical:
        distinct = list(dict.fromkeys(names))
        positions = np.array([distinct.index(x) for x in names])
        return pd.Categorical.from_codes(positions[codes], categories=distinct)

    return {
        "family": labels([o[1] for o in OPS], which),
        "op": labels([o[2] for o in OPS], which),
        "dtype": labels(list(DTYPES), rng.integers(0, len(DTYPES), n)),
        "dims": dims,
        "device_index": rng.integers(0, len(specs), n),
    }


def _single_thread(predictor: Any) -> None:
    """The tree predictor on one thread (the benchmark's rule), flat trees or boosters alike; flat trees
    compiled by lleaves first (in the foreground: a load only starts the compile in the background)."""
    from components.serving import tree_compile

    for model in getattr(predictor, "models", {}).values():
        if getattr(model, "booster_file", None) is not None:
            tree_compile.compile_now(model.booster_file)
        if hasattr(model, "booster_file"):
            model.threads = 1
        elif hasattr(model, "params"):
            model.params["num_threads"] = 1


CHUNK_ROWS = 16_384  # rows per featurise + predict call: every column of a chunk stays in the CPU's L2/L3
# (measured: featurise 376k rows/CPU-s in chunks of 200,000 rows, 716k in chunks of 16,384; 322k at 2,048)


def raw_throughput(predictor: Any, n: int, chunk: int = CHUNK_ROWS, seed: int = 0) -> dict[str, Any]:
    """Predictions per second: featurise, model, end to end (chunks of ``chunk`` rows), on the path the
    server uses (a tabular model's ``predict_columns`` on arrays, else the feature DataFrame). For a
    tabular model the design matrix and the trees are also timed alone, on the same chunks."""
    from components.devices import load_catalog
    from components.serving.featurise import op_feature_columns, table_of

    specs = load_catalog().all()
    batch = random_op_batch(n, specs, seed)
    on_arrays = hasattr(predictor, "predict_columns")
    stage_cpu: dict[str, float] = {}

    def featurise(part: slice) -> Any:
        cols = op_feature_columns(
            batch["family"][part],
            batch["op"][part],
            batch["dtype"][part],
            batch["dims"][part],
            batch["device_index"][part],
            specs,
        )
        return cols if on_arrays else table_of(cols)

    def model(features: Any) -> np.ndarray:
        out = predictor.predict_columns(features) if on_arrays else predictor.predict(features)
        return np.asarray(out["pred_duration_us"], dtype="float64")

    model(featurise(slice(0, min(n, 2000))))  # warm-up, untimed: imports (LightGBM for bulk), first calls
    featurise_s = model_s = featurise_cpu = model_cpu = 0.0
    finite = 0
    for start in range(0, n, chunk):
        t0, c0 = time.perf_counter(), time.thread_time()
        features = featurise(slice(start, start + chunk))
        t1, c1 = time.perf_counter(), time.thread_time()
        duration = model(features)
        t2, c2 = time.perf_counter(), time.thread_time()
        if on_arrays:  # outside the timed stretch: the stages again, each alone
            _time_stages(predictor, features, stage_cpu)
        featurise_s += t1 - t0
        model_s += t2 - t1
        featurise_cpu += c1 - c0
        model_cpu += c2 - c1
        finite += int(np.isfinite(duration).sum())
    # Wall-clock rates, and rates per CPU second of this thread: on a shared, overloaded box the
    # second is what one thread of its own would do.
    return {
        "rows": n,
        "chunk_rows": chunk,
        "answered": finite,
        "path": "arrays (predict_columns)" if on_arrays else "feature DataFrame",
        "trees": tree_engine(predictor),
        "featurise_rows_per_s": n / featurise_s,
        "model_rows_per_s": n / model_s,
        "end_to_end_rows_per_s": n / (featurise_s + model_s),
        "featurise_s": featurise_s,
        "model_s": model_s,
        "featurise_rows_per_cpu_s": n / featurise_cpu,
        "model_rows_per_cpu_s": n / max(model_cpu, 1e-9),
        "end_to_end_rows_per_cpu_s": n / (featurise_cpu + model_cpu),
        "model_stages_rows_per_cpu_s": {k: n / max(v, 1e-9) for k, v in stage_cpu.items()},
    }


def _time_stages(predictor: Any, cols: dict[str, Any], stages: dict[str, float]) -> None:
    """Add the thread CPU seconds of the design matrix and of every tree model alone to ``stages``."""
    c0 = time.thread_time()
    x = predictor.design_matrix(cols)
    c1 = time.thread_time()
    for tree_model in predictor.models.values():
        tree_model.predict(x)
    c2 = time.thread_time()
    stages["design"] = stages.get("design", 0.0) + c1 - c0
    stages["trees"] = stages.get("trees", 0.0) + c2 - c1


def engine_tier_rates(n: int = 200_000, seed: int = 0) -> dict[str, Any]:
    """The op engine's tiers on bf16 GEMM questions (M, N, K up to 16k) on the GPUs its store measured, per
    CPU-second of this thread: the measured tier's lookup (``MeasuredTier.resolve``) against the spec model it
    replaces (``OpEngine.spec_log_util``) on the same rows and rooflines, and ``OpEngine.predict`` whole."""
    from components.devices import load_catalog
    from components.opmodel.loading import engine_for
    from components.opmodel.spec import SpecRows
    from components.physics import roofline as physics

    engine = engine_for(object())
    measured = getattr(engine, "measured", None)
    if measured is None:
        return {"unavailable": "no measured op store in this state folder (train the op engine first)"}
    catalog = load_catalog()
    devices = sorted(d for d in measured.devices() if ("gemm", d, "bf16", None) in measured.groups)
    if not devices:
        return {"unavailable": "the measured store has no bf16 GEMM rows"}
    rng = np.random.default_rng(seed)
    per = max(1, n // len(devices))
    cpu = {"measured": 0.0, "spec": 0.0, "engine": 0.0}
    hits = 0
    for device in devices:
        spec = catalog.resolve(device)
        shape = {k: rng.integers(1, 16_385, per).astype("float64") for k in ("M", "N", "K")}
        roof = physics.roofline("gemm", "bf16", shape, spec)
        # warm-up: the GPU's site table, the spec boosters
        engine.predict("gemm", "bf16", {k: v[:100] for k, v in shape.items()}, spec)
        c0 = time.thread_time()
        resolved = measured.resolve("gemm", "bf16", shape, spec, roof.time_us)
        c1 = time.thread_time()
        engine.spec_log_util(SpecRows("gemm", "bf16", shape, spec, roof))
        c2 = time.thread_time()
        engine.predict("gemm", "bf16", shape, spec)
        c3 = time.thread_time()
        cpu["measured"] += c1 - c0
        cpu["spec"] += c2 - c1
        cpu["engine"] += c3 - c2
        hits += 0 if resolved is None else int(np.isfinite(resolved.duration_us).sum())
    rows = per * len(devices)
    rates = {f"{k}_rows_per_cpu_s": rows / max(v, 1e-9) for k, v in cpu.items()}
    return {
        "rows": rows,
        "devices": devices,
        "measured_hits": hits,
        **rates,
        "measured_over_spec": rates["measured_rows_per_cpu_s"] / rates["spec_rows_per_cpu_s"],
    }


LLM_DEPLOYMENT = {"isl": 2048, "osl": 256, "concurrency": 32, "tp": 4}


def deployment_rates(repeats: int = 20, llm: str = "Llama-3.1-70B", device: str = "H100") -> dict[str, Any]:
    """``kernelcast predict --llm`` answers per CPU-second (one deployment on one GPU, through the public
    ``predict_deployment``), and the whole-catalog ranking (every GPU x TP option) of the same model."""
    from components.deployments.service import predict_deployment, rank_deployments
    from components.devices import load_catalog

    catalog = load_catalog()
    spec = catalog.resolve(device)
    try:
        predict_deployment(llm, [spec], LLM_DEPLOYMENT)  # warm-up: config, op engine, first calls
    except Exception as exc:
        return {"unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    latencies = []
    c0 = time.thread_time()
    for _ in range(repeats):
        t0 = time.perf_counter()
        predict_deployment(llm, [spec], LLM_DEPLOYMENT)
        latencies.append((time.perf_counter() - t0) * 1e3)
    cpu = time.thread_time() - c0
    specs = catalog.all()
    params = {k: v for k, v in LLM_DEPLOYMENT.items() if k != "tp"}
    t0, c1 = time.perf_counter(), time.thread_time()
    ranked, skipped = rank_deployments(llm, specs, params, {})
    rank_s, rank_cpu = time.perf_counter() - t0, time.thread_time() - c1
    return {
        "llm": llm,
        "device": spec.id,
        "params": LLM_DEPLOYMENT,
        "deployments_per_cpu_s": repeats / cpu,
        **_percentiles(latencies),
        "rank_gpus": len(specs),
        "rank_options": len(ranked) + skipped,
        "rank_fitting": len(ranked),
        "rank_s": rank_s,
        "rank_cpu_s": rank_cpu,
    }


def single_question_latency(predictor: Any, repeats: int = 300) -> dict[str, Any]:
    """One op question answered in process (parse, featurise, model, physics, the answer dict), one at a
    time: what the server does per request without HTTP."""
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    question = [{"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "fp32", "device": "H100"}]
    answer_questions(predictor, parse_questions(question), model_version="bench")
    latencies = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        answer_questions(predictor, parse_questions(question), model_version="bench")
        latencies.append((time.perf_counter() - t0) * 1e3)
    return {"question": question[0], **_percentiles(latencies)}


def tree_engine(predictor: Any) -> str | None:
    """How the tree models of ``predictor`` answer bulk batches: lleaves, LightGBM or the numpy walk."""
    from components.serving.native import FlatTrees

    models = list(getattr(predictor, "models", {}).values())
    if not models:
        return None
    flats = [m for m in models if isinstance(m, FlatTrees)]
    if len(flats) < len(models):
        return "LightGBM Booster.predict"
    engines = sorted({m.engine() for m in flats})
    return f"{', '.join(engines)} ({sum(len(m.roots) for m in flats)} trees)"


def flat_tree_rows_per_s(predictor: Any, n: int = 2_000) -> float | None:
    """The numpy flat-tree walk alone (what answers small batches), rows/s on ``n`` rows."""
    from components.devices import load_catalog
    from components.serving.featurise import op_feature_columns, table_of
    from components.serving.native import FlatTrees

    models = getattr(predictor, "models", {})
    if not models or not all(isinstance(m, FlatTrees) for m in models.values()):
        return None
    specs = load_catalog().all()
    batch = random_op_batch(n, specs, seed=1)
    table = table_of(
        op_feature_columns(
            batch["family"], batch["op"], batch["dtype"], batch["dims"], batch["device_index"], specs
        )
    )
    x = predictor.design_matrix(table)
    t0 = time.perf_counter()
    for model in models.values():
        model.raw(x)
    return n / (time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------ server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    model: str,
    port: int,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    limits: dict[str, Any] | None = None,
    api_key_env: str | None = None,
    allow_modules: bool = False,
) -> subprocess.Popen:
    """A real ``run_server`` process (own process group) on loopback, returned once /readyz says ready."""
    import urllib.request

    config = {
        "host": "127.0.0.1",
        "port": port,
        "model": model,
        "log_level": "warning",
        "api_key_env": api_key_env,
        "allow_modules": allow_modules,
        "limits": {"request_timeout_s": 60.0, **(limits or {})},
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from components.serving.app import run_server; run_server(sys.argv[1])",
            json.dumps(config),
        ],
        env={**os.environ, **(env or {})},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            pass
        time.sleep(0.3)
    stop_server(process)
    raise RuntimeError(f"server not ready after {timeout_s:g} s")


def stop_server(process: subprocess.Popen) -> None:
    from components.serving.processes import stop_group

    stop_group(process.pid, grace_s=10.0, leader=process)
    process.wait(timeout=30)


CLIENT = r"""
import http.client, json, sys, time
port, rate, seconds, body = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4].encode()
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
headers = {"content-type": "application/json"}
for _ in range(20):  # warm-up (connection, first-request costs)
    connection.request("POST", "/v1/predict", body, headers); connection.getresponse().read()
latencies, errors, n = [], 0, int(rate * seconds)
start = time.perf_counter()
for i in range(n):
    due = start + i / rate
    pause = due - time.perf_counter()
    if pause > 0:
        time.sleep(pause)
    sent = time.perf_counter()
    connection.request("POST", "/v1/predict", body, headers)
    response = connection.getresponse(); response.read()
    done = time.perf_counter()
    errors += response.status != 200
    # Latency from when the request was due: a slow answer delays the next ones, and that counts.
    latencies.append((done - min(due, sent)) * 1e3)
elapsed = time.perf_counter() - start
print(json.dumps({"latencies_ms": latencies, "errors": errors, "achieved_rps": n / elapsed}))
"""


def _percentiles(values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype="float64")
    return {
        "p50_ms": float(np.percentile(array, 50)),
        "p95_ms": float(np.percentile(array, 95)),
        "p99_ms": float(np.percentile(array, 99)),
        "max_ms": float(array.max()),
        "n": int(array.size),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc), 0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def server_latency(port: int, rate: float, seconds: float, server_pid: int | None = None) -> dict[str, Any]:
    """One op question per request at ``rate`` requests/s from a separate client process."""
    body = json.dumps(
        {
            "kernels": [{"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "bf16"}],
            "devices": ["H100"],
        }
    )
    cpu_before = _cpu_seconds(server_pid) if server_pid else 0.0
    result = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), str(rate), str(seconds), body],
        capture_output=True,
        text=True,
        timeout=seconds * 10 + 120,
        check=True,
    )
    data = json.loads(result.stdout)
    served = len(data["latencies_ms"]) + 20  # + the client's warm-up requests
    cpu_ms = (_cpu_seconds(server_pid) - cpu_before) * 1e3 / served if server_pid else None
    return {
        "rate_rps": rate,
        "achieved_rps": data["achieved_rps"],
        "errors": data["errors"],
        "server_cpu_ms_per_request": cpu_ms,
        **_percentiles(data["latencies_ms"]),
    }


def source_latency(port: int, repeats: int = 5) -> dict[str, Any]:
    """A CUDA source question (saxpy; compile + static analysis included), sent ``repeats`` times."""
    import urllib.error
    import urllib.request

    latencies, status, message = [], None, None
    for i in range(repeats):
        # A fresh -D each time: no cache can answer it, the compiler runs every time.
        body = json.dumps(
            {
                "kernels": [
                    {
                        "source": SAXPY,
                        "language": "cuda",
                        "launch": {"grid": [4096], "block": [256], "defines": {"BENCH": str(i)}},
                    }
                ],
                "devices": ["H100"],
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/predict", body, {"content-type": "application/json"}
        )
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            status, message = exc.code, json.loads(exc.read() or b"{}").get("error", {}).get("message")
        latencies.append((time.perf_counter() - t0) * 1e3)
        if status != 200:
            return {"status": status, "unavailable": message}
    return {"status": status, **_percentiles(latencies)}


def llm_latency(llm_model: str | None, repeats: int = 5) -> dict[str, Any]:
    """Seconds to answer one op question (two GPUs) with the llm family, after one warm-up."""
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    try:
        if llm_model:
            from components.serving.models import load_model

            predictor, what = load_model(llm_model).predictor, llm_model
        else:
            import pandas as pd

            from components.models.llm.encoding import LLMConfig
            from components.models.llm.model import LLMPredictor
            from components.models.llm.module import build_module

            predictor = LLMPredictor(LLMConfig(max_tokens=192, predict_class=False))
            predictor.prepare(pd.DataFrame({"duration_us": [10.0, 100.0, 1000.0]}))
            predictor.module = build_module(predictor.config, len(predictor.config.numeric_targets), 0)
            predictor.module.eval()
            what = "embedded SmolLM2-135M + LoRA heads (untrained weights: same cost as trained)"
    except Exception as exc:
        return {"unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    # fp32: a bf16 GEMM would be answered by the op engine, never reaching the llm predictor
    questions = parse_questions(
        [
            {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "fp32", "device": d}
            for d in ("H100", "MI300X")
        ]
    )
    answer_questions(predictor, questions, model_version="bench")
    latencies = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        answer_questions(predictor, questions, model_version="bench")
        latencies.append((time.perf_counter() - t0) * 1e3)
    return {"model": what, "questions_per_call": len(questions), **_percentiles(latencies)}


def run_bench(
    model: str,
    *,
    rows: int = 1_000_000,
    rate: float = 100.0,
    seconds: float = 10.0,
    llm_model: str | None = None,
    skip_llm: bool = False,
) -> dict[str, Any]:
    """Every figure of the module docstring, as one JSON-able dict."""
    import platform

    from components.models.roofline import RooflinePredictor
    from components.serving.models import load_model

    loaded = load_model(model)
    _single_thread(loaded.predictor)
    result: dict[str, Any] = {
        "model_version": loaded.version,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": list(os.getloadavg()),
        },
        "targets": {
            "end_to_end_rows_per_cpu_s": 1_000_000,
            "share_of_roofline_rate": 0.5,
            "server_p99_ms_at_100rps": 10.0,
            "catalog_rank_s": 2.0,
            "measured_over_spec": 1.0,
        },
        "raw": {
            "model": raw_throughput(loaded.predictor, rows),
            "roofline": raw_throughput(RooflinePredictor(), rows),
        },
    }
    raw = result["raw"]
    raw["model_over_roofline_end_to_end"] = (
        raw["model"]["end_to_end_rows_per_cpu_s"] / raw["roofline"]["end_to_end_rows_per_cpu_s"]
    )
    result["raw"]["flat_tree_walk_rows_per_s"] = flat_tree_rows_per_s(loaded.predictor)
    result["engine_tiers"] = engine_tier_rates(min(rows, 20_000))  # the measured tier runs at ~7k rows/s
    result["deployments"] = deployment_rates()
    result["single_question"] = single_question_latency(loaded.predictor)
    port = _free_port()
    server = start_server(model, port)
    try:
        result["server_op"] = server_latency(port, rate, seconds, server.pid)
        result["server_source"] = source_latency(port)
    finally:
        stop_server(server)
    result["llm"] = {"skipped": True} if skip_llm else llm_latency(llm_model)
    result["machine"]["load_average_after"] = list(os.getloadavg())
    return result


def write_result(result: dict[str, Any], path: Path) -> Path:
    from components.common.atomic import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path
