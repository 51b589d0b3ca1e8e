"""Step models kept on disk between processes (``components.deployments.step_cache``): a model read back
answers exactly as the one built, a change of the state it comes from is a new name, a broken file is
rebuilt. The op times are the real roofline's (a production op engine carries the same ``step_cache``)."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace

import numpy as np
import pytest

from components.deployments import step_cache
from components.deployments.answer import answer_deployments
from components.deployments.config import Deployment, model_shape
from components.deployments.ops import roofline_op_time
from components.deployments.stepmodel import StepModel, build_step_models
from components.devices import load_catalog
from tests.unit.test_deployments import LLAMA8B


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _cached_roofline(folder, tag: str = "t1"):
    """A fresh op-time function (nothing kept in memory for it) carrying a disk cache."""

    @functools.wraps(roofline_op_time)
    def op_time(*args, **kw):
        return roofline_op_time(*args, **kw)

    op_time.step_cache = (folder, tag)
    return op_time


def _deployments(catalog) -> list[Deployment]:
    shape = model_shape(json.dumps(LLAMA8B))
    return [
        Deployment(model=shape, gpu=catalog.resolve(gpu), isl=1024, osl=128, tp=tp, framework=fw)
        for gpu in ("H100", "A100")
        for tp in (1, 2)
        for fw in ("vllm", "sglang")
    ]


def _same(a: StepModel, b: StepModel) -> None:
    for name in ("tokens", "linear_dec", "linear_pre", "head", "seqs", "ctx", "attn_dec", "attn_pre"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert (a.pp_hop_us, a.layers, a.allreduces, a.dp) == (b.pp_hop_us, b.layers, b.allreduces, b.dp)
    assert isinstance(b.layers, int) and isinstance(b.dp, int)


def test_models_read_back_from_disk_are_the_models_built(catalog, tmp_path):
    ds = _deployments(catalog)
    built = build_step_models(ds, roofline_op_time)
    first = build_step_models(ds, _cached_roofline(tmp_path))
    files = sorted(tmp_path.glob("*.npy"))
    assert files, "the first build stores its models"
    stamps = {p: p.stat().st_mtime_ns for p in files}
    again = build_step_models(ds, _cached_roofline(tmp_path))  # a new function: only the disk holds them
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.npy")} == stamps  # read, not rewritten
    for a, b, c in zip(built, first, again, strict=True):
        _same(a, b)
        _same(a, c)
        assert a.step_us(7, 900.0, [(512.0, 1500.0)], 1) == c.step_us(7, 900.0, [(512.0, 1500.0)], 1)


def test_answers_through_the_cache_are_unchanged(catalog, tmp_path):
    ds = _deployments(catalog)
    plain = answer_deployments(ds, roofline_op_time, detail=False)
    answer_deployments(ds, _cached_roofline(tmp_path), detail=False)
    cached = answer_deployments(ds, _cached_roofline(tmp_path), detail=False)
    for a, b in zip(plain, cached, strict=True):
        assert (a.ttft_ms, a.tpot_ms, a.e2e_ms) == (b.ttft_ms, b.tpot_ms, b.e2e_ms)


def test_another_state_or_deployment_is_another_file(catalog, tmp_path):
    d = _deployments(catalog)[0]
    names = {
        step_cache.model_name("t1", "vllm", d),
        step_cache.model_name("t2", "vllm", d),
        step_cache.model_name("t1", "sglang", d),
        step_cache.model_name("t1", "vllm", replace(d, tp=2)),
    }
    assert len(names) == 4
    engine = tmp_path / "opmodel"
    engine.mkdir()
    (engine / "engine.json").write_text("{}")
    before = step_cache.state_tag([engine])
    assert step_cache.state_tag([engine]) == before
    (engine / "engine.json").write_text('{"champion": 2}')  # a new champion's engine
    os.utime(engine / "engine.json", ns=(1, 1))
    assert step_cache.state_tag([engine]) != before


def test_a_broken_file_is_rebuilt(catalog, tmp_path):
    d = _deployments(catalog)[0]
    (built,) = build_step_models([d], _cached_roofline(tmp_path))
    (path,) = tmp_path.glob("*.npy")
    path.write_bytes(b"not an array")
    assert step_cache.load(tmp_path, path.name, StepModel) is None
    (again,) = build_step_models([d], _cached_roofline(tmp_path))
    _same(built, again)
    assert step_cache.load(tmp_path, path.name, StepModel) is not None  # stored anew


def test_the_prefill_grid_times_every_point_a_chunk_reads(catalog):
    """Only the readable prefill-attention points are timed (``stepmodel.READ_PRE``): every chunk of p
    tokens ending at a context kv >= p answers exactly as from the dense grid."""
    from components.deployments.compose import _layer_ops, time_ops
    from components.deployments.stepmodel import CTX, READ_PRE, TOKENS, _attention, _sum

    assert 0 < READ_PRE.sum() < READ_PRE.size
    d = _deployments(catalog)[0]
    (thin,) = build_step_models([d], roofline_op_time)
    p2, k2 = (a.ravel() for a in np.meshgrid(np.asarray(TOKENS), np.asarray(CTX), indexing="ij"))
    lines = _attention(_layer_ops(d, "prefill", p2, 1.0, np.minimum(p2, k2), k2, d.model.layers))
    time_ops(lines, d.gpu, roofline_op_time)
    dense = replace(thin, attn_pre=_sum(lines, p2.size).reshape(len(TOKENS), len(CTX)))
    assert not np.array_equal(dense.attn_pre, thin.attn_pre)  # the unread points differ
    rng = np.random.default_rng(0)
    for _ in range(2000):
        kv = float(np.exp(rng.uniform(0.0, np.log(2**20))))
        p = float(min(np.exp(rng.uniform(0.0, np.log(kv))), 70000.0))
        n = int(rng.integers(0, 64))
        chunks = [(p, kv)]
        assert thin._mixed_us(n, 1000.0, chunks, 1) == dense._mixed_us(n, 1000.0, chunks, 1), (p, kv)
