"""A request's time limit stops the work behind it (components/serving/deadline.py), deterministically:
the tests cancel a deadline explicitly or give one that has already passed -- no sleeps, no races."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from components.serving import questions as q
from components.serving.app import ServerLimits, create_app
from components.serving.deadline import Deadline, DeadlineExceeded, bound, check
from components.serving.question_forms import parse_questions

SAXPY = (
    "__global__ void saxpy(int n, float a, const float* x, float* y) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n"
)


def test_check_is_a_no_op_without_a_deadline_and_raises_once_cancelled() -> None:
    check("anything")  # the CLI and the pyfunc have no deadline: never stopped
    deadline = Deadline.after(3600.0)
    with bound(deadline):
        check("step 1")
        deadline.cancel()
        with pytest.raises(DeadlineExceeded, match="stopped before step 2"):
            check("step 2")
    check("after the block")  # the deadline does not leak out of its block


def test_a_deadline_reaches_a_worker_thread_started_with_the_context() -> None:
    import contextvars

    seen: list[str] = []
    deadline = Deadline.after(3600.0)
    deadline.cancel()
    with bound(deadline):
        context = contextvars.copy_context()

    def work() -> None:
        try:
            check("the worker's step")
        except DeadlineExceeded as exc:
            seen.append(str(exc))

    thread = threading.Thread(target=context.run, args=(work,))
    thread.start()
    thread.join()
    assert seen == ["request time limit reached; stopped before the worker's step"]


def test_answering_stops_before_the_next_program_group_once_the_deadline_passed() -> None:
    from components.serving.query import load_any_predictor

    predictor = load_any_predictor("roofline")
    rows = [{"source": SAXPY, "language": "cuda", "launch": {"grid": [64], "block": [256]}, "device": "H100"}]
    deadline = Deadline.after(3600.0)
    deadline.cancel()
    with bound(deadline), pytest.raises(DeadlineExceeded, match="question 0 \\(source\\)"):
        q.answer_questions(predictor, parse_questions(rows), model_version="roofline")


def test_a_timed_out_request_is_a_504_and_its_source_is_never_compiled(monkeypatch) -> None:
    calls: list[int] = []
    original = q._program_answers

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(q, "_program_answers", counting)
    app = create_app("roofline", limits=ServerLimits(request_timeout_s=1e-9), poll=False)
    with TestClient(app) as client:
        body = {
            "kernels": [{"source": SAXPY, "language": "cuda", "launch": {"grid": [64], "block": [256]}}],
            "devices": ["H100"],
        }
        response = client.post("/v1/predict", json=body)
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "timeout"
    assert calls == []  # the worker stopped at its first step instead of compiling for nobody
