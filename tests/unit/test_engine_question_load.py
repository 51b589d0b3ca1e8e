"""What a CLI question loads, made cheap without changing an answer, on an engine trained on one real
AIConfigurator table: the monotone envelope's lattices saved across processes
(``components/opmodel/lattice_cache.py``) answer the same, to the last bit, through lattices the engine built,
lattices another engine saved, and no saved lattice at all, and a changed calibration or serving framework
names other files; the measured tier's site search (``components/opmodel/site_search.py``) answers the same by
distance matrix and by k-d tree; the GEMM lattices and site tables promotion makes for the first question
(``components/deployments/lattice_warm.py``) are the ones that question builds on demand, and are read."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

_SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
DATASETS = Path(os.environ.get("KERNELCAST_DATASETS_DIR", _SHARED))
AIC_TABLE = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
# (GPU, dtype, shape): the measured GPU and an unmeasured one, a dtype it did not measure, a batched product
QUESTIONS = [
    (
        "h100-sxm",
        "bf16",
        {"M": np.array([64.0, 100.0, 3000.0]), "N": 4096.0, "K": np.array([4096.0, 512.0, 9000.0])},
    ),
    ("h200", "bf16", {"M": np.array([64.0, 7.0]), "N": np.array([4096.0, 12288.0]), "K": 4096.0}),
    ("h100-sxm", "fp8", {"M": 256.0, "N": 1024.0, "K": 2048.0}),
    ("b200", "bf16", {"B": 4.0, "M": 512.0, "N": 512.0, "K": 128.0}),
]

pytestmark = pytest.mark.skipif(
    not (DATASETS / "aiconfigurator" / AIC_TABLE).is_file(), reason="AIConfigurator's table not present"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from types import SimpleNamespace

    from components.opmodel.train import train_engine

    root = tmp_path_factory.mktemp("lattices")
    table = root / "datasets" / "aiconfigurator" / AIC_TABLE
    table.parent.mkdir(parents=True)
    table.symlink_to(DATASETS / "aiconfigurator" / AIC_TABLE)
    settings = SimpleNamespace(
        datasets_dir=root / "datasets", data_dir=root / "data", models_dir=root / "models"
    )
    return train_engine(settings, root / "predictor" / "opmodel")


def _answers(engine) -> list[np.ndarray]:
    from components.devices.catalog import load_catalog

    catalog = load_catalog()
    return [
        engine.predict("gemm", dtype, shape, catalog.get(gpu)).duration_us for gpu, dtype, shape in QUESTIONS
    ]


def test_saved_lattices_answer_exactly_as_lattices_built_afresh(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.opmodel import envelope
    from components.opmodel.engine import OpEngine
    from components.opmodel.lattice_cache import LATTICES_DIR

    afresh = _answers(OpEngine.load(trained))  # no cache folder: every lattice built in memory
    first = OpEngine.load(trained, tmp_path)
    assert first.envelope.files is not None
    built = _answers(first)
    saved = sorted((tmp_path / LATTICES_DIR).glob("*.npy"))
    assert len(saved) == len(QUESTIONS)  # one lattice per (GPU, dtype, batch count)

    def no_build(values: np.ndarray) -> np.ndarray:
        raise AssertionError("a saved lattice was built again")

    monkeypatch.setattr(envelope, "running_max", no_build)  # a second process reads every lattice from disk
    read = _answers(OpEngine.load(trained, tmp_path))
    for fresh, one, two in zip(afresh, built, read, strict=True):
        assert np.array_equal(fresh, one) and np.array_equal(fresh, two)
    assert sorted((tmp_path / LATTICES_DIR).glob("*.npy")) == saved


def test_a_copy_of_the_engine_folder_elsewhere_reads_the_lattices_the_original_saved(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lattices are named by what the engine folder and its store hold, not where they are: the
    champion's local copy (register) reads those the candidate's folder saved (evaluate), and a copy whose
    engine differs in one byte names other files."""
    import shutil

    from components.opmodel import envelope
    from components.opmodel.engine import ENGINE_FILE, OpEngine

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "state"))
    cache = tmp_path / "cache"
    original = _answers(OpEngine.load(trained, cache))
    copy = tmp_path / "serving" / "models" / "1" / "opmodel"
    shutil.copytree(trained, copy, copy_function=shutil.copy)  # another path, new mtimes

    def no_build(values: np.ndarray) -> np.ndarray:
        raise AssertionError("a saved lattice was built again")

    with monkeypatch.context() as patched:
        patched.setattr(envelope, "running_max", no_build)
        copied = OpEngine.load(copy, cache)
        read = _answers(copied)
    assert copied.envelope.files.digest == OpEngine.load(trained, cache).envelope.files.digest
    for one, two in zip(original, read, strict=True):
        assert np.array_equal(one, two)
    engine_file = copy / ENGINE_FILE
    engine_file.write_bytes(engine_file.read_bytes() + b" ")  # other bytes: other lattices
    assert OpEngine.load(copy, cache).envelope.files.digest != copied.envelope.files.digest


def test_a_questions_lattices_answered_at_once_are_those_answered_one_by_one(trained: Path) -> None:
    """Several batch counts' GEMM lattices of one question are asked of the real engine in one call
    (``Envelope._lattices``); each is, to the bit, the lattice of its batch count asked alone. (The question's
    own rows may differ from rows asked one at a time in the last bit: that is not the envelope's doing.)"""
    from components.devices.catalog import load_catalog
    from components.opmodel import envelope
    from components.opmodel.engine import OpEngine

    shape = {"B": np.array([1.0, 2.0, 4.0, 8.0]), "M": np.array([512.0, 64.0, 3000.0, 96.0])}
    shape |= {"N": 1024.0, "K": 4096.0}
    for gpu in ("h100-sxm", "h200"):  # measured here, transferred there
        spec = load_catalog().get(gpu)
        engine = OpEngine.load(trained)
        asked: list[int] = []
        raw = engine.raw_predict

        def counted(*args, raw=raw, asked=asked, **kwargs):
            asked.append(1)
            return raw(*args, **kwargs)

        engine.raw_predict = counted
        engine.predict("gemm", "bf16", shape, spec)
        assert len(asked) == 2  # the question, then its four lattices at once
        assert len(engine.envelope.cache) == 4
        for key, (upper, lower) in engine.envelope.cache.items():
            _, family, axes, ranges, held, group = key
            points = envelope.lattice_points(family, list(axes), dict(ranges), list(held), np.array(group))
            alone = OpEngine.load(trained).raw_predict(family, "bf16", points, spec).duration_us
            alone = alone.reshape(upper.shape)
            assert np.array_equal(envelope.running_max(alone), upper), (gpu, group)
            assert np.array_equal(envelope.running_min(alone), lower), (gpu, group)


def test_a_calibration_or_a_framework_names_other_lattices(trained: Path, tmp_path: Path) -> None:
    from components.opmodel.engine import OpEngine

    engine = OpEngine.load(trained, tmp_path)
    assert engine.with_calibrations({}).envelope.files.digest == engine.envelope.files.digest
    calibrated = engine.with_calibrations({"h200": {"gemm|bf16": {"log_shift": 0.1, "rows": 5}}})
    served = engine.with_calibrations({})
    served.framework = "sglang"  # what for_framework sets on the engine it builds from that framework's rows
    assert len({e.envelope.files.digest for e in (engine, calibrated, served)}) == 3


def test_the_site_search_answers_alike_by_distance_matrix_and_by_tree(
    trained: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every size of the envelope's GEMM lattice on the measured GPU (exact hits, its own sweeps, bracketed
    and blended sites, and sizes past the gate) and on an unmeasured one (answered from it as a relative)."""
    from components.devices.catalog import load_catalog
    from components.opmodel import site_search
    from components.opmodel.engine import OpEngine
    from components.opmodel.envelope import RANGE

    catalog = load_catalog()
    grids = np.meshgrid(*[2.0 ** np.arange(RANGE[a][0], RANGE[a][1] + 1) for a in "MNK"], indexing="ij")
    shape = {a: g.ravel() * 1.5 ** (g.ravel() > 8) for a, g in zip("MNK", grids, strict=True)}  # off-grid too

    def answers() -> list[tuple]:
        engine = OpEngine.load(trained)  # tables built afresh: no saved search inside
        out = []
        for gpu in ("h100-sxm", "h200"):
            times = engine.raw_predict("gemm", "bf16", shape, catalog.get(gpu))
            out.append((times.duration_us, times.tier.tolist(), times.support.tolist()))
        return out

    matrix = answers()
    assert "measured" in matrix[0][1] and "transfer" in matrix[1][1]  # both tiers that search were asked
    monkeypatch.setattr(site_search, "BRUTE_PAIRS", 0)  # every search by the tree
    tree = answers()
    for (d1, t1, s1), (d2, t2, s2) in zip(matrix, tree, strict=True):
        assert np.array_equal(d1, d2) and t1 == t2 and s1 == s2


@pytest.mark.parametrize(
    "labels",
    [
        ["gelu", "add", "gelu", "silu", "add"],
        ["gemm"],
        [],
        ["b", "a", None, "b", float("nan")],  # missing labels: pandas' own coding
        [f"op{i % 7}" for i in range(100)],  # past the few a question has: pandas
    ],
)
def test_a_question_codes_its_labels_as_pandas_factorize_does(labels: list) -> None:
    import pandas as pd

    from components.features.arrays import is_categorical, label_codes

    codes, uniques = label_codes(np.array(labels, dtype=object))
    want_codes, want_uniques = pd.factorize(np.array(labels, dtype=object), use_na_sentinel=False)
    assert codes.dtype == want_codes.dtype and np.array_equal(codes, want_codes)
    assert uniques.dtype == object and list(map(str, uniques)) == list(map(str, want_uniques))
    assert is_categorical(pd.Categorical(labels)) and not is_categorical(np.array(labels, dtype=object))


# the GEMM lattices and site tables promotion makes (``deployments/lattice_warm.py``): a 70B step model's
# linear lines at TP 4 (QKV, O, up-gate, down) and the LM head over a few token counts, on the measured GPU
# (one lattice per serving engine) and a transferred one
WARM_GPUS = ("h100-sxm", "h200")
TOKENS = np.array([1.0, 7.0, 64.0, 512.0, 2048.0, 8192.0])
LINES = [(2560.0, 8192.0), (8192.0, 2048.0), (14336.0, 8192.0), (8192.0, 7168.0), (32064.0, 8192.0)]


def _question() -> dict[str, np.ndarray]:
    m = np.repeat(TOKENS, len(LINES))
    n, k = (np.tile([line[i] for line in LINES], len(TOKENS)) for i in (0, 1))
    return {"M": m, "N": n, "K": k}


def _ask(engine, dtype: str) -> list[tuple[np.ndarray, dict]]:
    """The question on every GPU through each op-time function a step model would use there: the
    answers, and the lattices each function's engine holds afterwards."""
    from components.deployments.lattice_warm import gemm_lattice_fns
    from components.deployments.ops import engine_op_time
    from components.devices.catalog import load_catalog

    op_time, out = engine_op_time(engine), []
    for gpu in WARM_GPUS:
        spec = load_catalog().get(gpu)
        for fn in gemm_lattice_fns(op_time, spec):
            out.append(np.asarray(fn("gemm", dtype, _question(), spec).duration_us))
    return out


def test_a_warmed_state_answers_from_the_lattices_a_question_builds(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What promotion saves is, to the bit, what the question builds on demand, and a later engine on the
    same cache reads every lattice and site table instead of building one."""
    from components.deployments.lattice_warm import gemm_lattice_fns, warm_gemm_lattices, warm_site_tables
    from components.deployments.ops import engine_op_time
    from components.devices.catalog import load_catalog
    from components.opmodel import envelope, measured
    from components.opmodel.engine import OpEngine
    from components.opmodel.lattice_cache import LATTICES_DIR

    specs = [load_catalog().get(gpu) for gpu in WARM_GPUS]
    on_demand = OpEngine.load(trained, tmp_path / "on-demand")  # no warming: the question builds them
    afresh = _ask(on_demand, "bf16")

    warmed = OpEngine.load(trained, tmp_path / "warmed")
    assert warm_site_tables([warmed], ("gemm",)) >= 1  # the measured H100's GEMM tables (its only family)
    asked = warm_gemm_lattices(engine_op_time(warmed), specs, ("bf16",))
    fns = sum(len(gemm_lattice_fns(engine_op_time(warmed), spec)) for spec in specs)
    assert fns >= len(WARM_GPUS) + 2  # the measured H100: one per serving engine
    assert asked == fns
    files = sorted((tmp_path / "warmed" / LATTICES_DIR).glob("*.npy"))
    # every lattice the warming saved is, to the bit, the one the question built on demand
    built = sorted((tmp_path / "on-demand" / LATTICES_DIR).glob("*.npy"))
    assert [f.name for f in files] == [f.name for f in built]
    for one, two in zip(files, built, strict=True):
        assert np.array_equal(np.load(one), np.load(two), equal_nan=True), one.name

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("built again: the warmed state should have been read")

    monkeypatch.setattr(envelope, "running_max", no_build)  # every lattice read from disk
    monkeypatch.setattr(measured.SiteTable, "__init__", no_build)  # every site table read from disk
    later = OpEngine.load(trained, tmp_path / "warmed")  # the first question's process
    for fresh, read in zip(afresh, _ask(later, "bf16"), strict=True):
        assert np.array_equal(fresh, read)
    assert sorted((tmp_path / "warmed" / LATTICES_DIR).glob("*.npy")) == files


def test_a_gpu_without_its_own_kernels_reads_the_pooled_lattice_only(trained: Path) -> None:
    from components.deployments.engines.registry import ENGINES
    from components.deployments.lattice_warm import gemm_lattice_fns
    from components.deployments.ops import engine_op_time
    from components.devices.catalog import load_catalog
    from components.opmodel.engine import OpEngine

    op_time = engine_op_time(OpEngine.load(trained))
    assert gemm_lattice_fns(op_time, load_catalog().get("h200")) == [op_time]
    assert len(gemm_lattice_fns(op_time, load_catalog().get("h100-sxm"))) == len(ENGINES)


# the attention lattices promotion makes for the catalog's LLMs (``lattice_warm.warm_attention_lattices``):
# two dense models whose heads per GPU differ, on the measured GPU (one function per serving engine) and a
# transferred one
ATTENTION_MODELS = ("Llama-3.1-70B", "Qwen3-8B")


def _step_models(engine) -> list:
    """Every option a rank of each model forms on ``WARM_GPUS``, its step models built as a rank builds
    them (one model per call: its lines decide the envelope's held dimensions)."""
    from components.deployments.config import model_shape
    from components.deployments.engines.registry import ENGINES
    from components.deployments.lattice_warm import fitting_deployments
    from components.deployments.ops import engine_op_time
    from components.deployments.stepmodel import _build_models
    from components.devices.catalog import load_catalog

    op_time, out = engine_op_time(engine), []
    for name in ATTENTION_MODELS:
        model = model_shape(name, DATASETS)
        options = [
            d
            for gpu in WARM_GPUS
            for d in fitting_deployments(model, load_catalog().get(gpu), sorted(ENGINES))
        ]
        out.extend(_build_models(options, op_time))
    return out


def test_warmed_attention_lattices_are_those_a_rank_builds(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attention lattices promotion saves for the catalog's models are, file for file and to the bit,
    the ones a rank builds on demand; a later engine builds the same step models reading them, building
    no lattice."""
    from components.deployments.config import model_shape
    from components.deployments.lattice_warm import warm_attention_lattices, warm_gemm_lattices
    from components.deployments.ops import engine_op_time
    from components.devices.catalog import load_catalog
    from components.opmodel import envelope
    from components.opmodel.engine import OpEngine
    from components.opmodel.lattice_cache import LATTICES_DIR

    specs = [load_catalog().get(gpu) for gpu in WARM_GPUS]
    afresh = _step_models(OpEngine.load(trained, tmp_path / "on-demand"))
    built = {f.name: f for f in (tmp_path / "on-demand" / LATTICES_DIR).glob("*.npy")}

    warmed = OpEngine.load(trained, tmp_path / "warmed")
    op_time = engine_op_time(warmed)
    gemm = warm_gemm_lattices(op_time, specs, ("bf16",))
    models = [model_shape(name, DATASETS) for name in ATTENTION_MODELS]
    # both models' lines (the same columns) in one call per GPU and function, as many as the GEMMs'
    assert warm_attention_lattices(op_time, specs, models) == gemm
    saved = {f.name: f for f in (tmp_path / "warmed" / LATTICES_DIR).glob("*.npy")}
    assert set(built) <= set(saved)
    for name, path in built.items():
        assert np.array_equal(np.load(path), np.load(saved[name]), equal_nan=True), name

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("built again: the warmed state should have been read")

    monkeypatch.setattr(envelope, "running_max", no_build)  # every lattice read from disk
    later = _step_models(OpEngine.load(trained, tmp_path / "warmed"))
    assert len(later) == len(afresh) > 0
    for fresh, read in zip(afresh, later, strict=True):
        for part in ("linear_dec", "linear_pre", "head", "attn_dec", "attn_pre"):
            assert np.array_equal(getattr(fresh, part), getattr(read, part)), part
