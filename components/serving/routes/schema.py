"""The HTTP API's request and response bodies (pydantic): what ``/openapi.json`` publishes and the VS Code
extension (``extensions/``) is built against. Field limits here are the first line of the server's input
safety; the rest is in ``components.serving.routes.service``."""

# No ``from __future__ import annotations``: FastAPI and pydantic read these annotations at run time.
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.serving.question_forms import MAX_MODULE_CHARS, MAX_SOURCE_CHARS

Dim = Annotated[int, Field(ge=1, le=2**24)]


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grid: list[Annotated[int, Field(ge=1, le=2**31 - 1)]] = Field(
        min_length=1, max_length=3, description="[gx, gy, gz]"
    )
    block: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        min_length=1, max_length=3, description="[bx, by, bz]"
    )
    kernel: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the __global__ function to analyse (default: the only one)",
    )
    defines: dict[Annotated[str, Field(max_length=64)], str | int | float] | None = Field(
        default=None, max_length=64, description='-D macros, e.g. {"N": "1024"}'
    )
    shared_bytes: int | None = Field(default=None, ge=0, le=1 << 20, description="dynamic shared memory")


class Kernel(BaseModel):
    """One kernel: a dtype and exactly one form (op + shape | source + language + launch | module)."""

    model_config = ConfigDict(extra="forbid")

    dtype: str | None = Field(
        default=None, max_length=32, description="fp32, fp16, bf16, fp8, tf32, fp64, int8"
    )
    op: str | None = Field(
        default=None, max_length=32, description="gemm, linear, bmm, add, gelu, softmax, ..."
    )
    shape: dict[Annotated[str, Field(max_length=16)], Dim] | None = Field(
        default=None, max_length=8, description='sizes, e.g. {"M": 4096, "N": 4096, "K": 4096}'
    )
    source: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS, description="CUDA/HIP kernel text")
    language: Literal["cuda", "hip"] | None = None
    launch: Launch | None = None
    module: str | None = Field(
        default=None,
        max_length=MAX_MODULE_CHARS,
        description="text of a KernelBench-style PyTorch module (when the server allows it)",
    )

    def fields(self) -> dict[str, Any]:
        data = self.model_dump(exclude_none=True)
        if "launch" in data:
            data["launch"] = self.launch.model_dump(exclude_none=True) if self.launch else None
        return data


# Deployment answers come from the composition (components.deployments), not from the served model.
DEPLOYMENT_VERSION = "deployment-composition"


class DeploymentForm(BaseModel):
    """An LLM deployment question (components.deployments): a model and a serving workload."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(max_length=64 * 1024)] | dict[str, Any] = Field(
        description="a bundled model name, an HF config.json object, or its JSON text (no server paths)"
    )
    isl: int = Field(ge=1, le=1 << 20)
    osl: int = Field(ge=1, le=1 << 20)
    concurrency: int = Field(default=1, ge=1, le=1 << 16)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    dtype: str = Field(default="bf16", max_length=16)
    kv_dtype: str | None = Field(default=None, max_length=16)
    mode: Literal["agg", "disagg"] = "agg"
    workload: Literal["steady", "batch"] = "steady"
    tps: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(
        default=None, max_length=16, description="rank: TP options"
    )
    by: Literal["tpot", "ttft", "cost"] = "tpot"

    def params(self) -> dict[str, Any]:
        return self.model_dump(exclude={"model", "tps", "by"})


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernels: list[Kernel] | None = Field(default=None, min_length=1)
    deployment: DeploymentForm | None = None
    devices: list[Annotated[str, Field(max_length=128)] | dict[str, Any]] | Literal["all"] = Field(
        min_length=1,
        description='catalog names/aliases or full device specs, or "all" (the catalog), as in /v1/rank',
    )
    model: str | None = Field(
        default=None,
        max_length=256,
        description="omit for the served model; 'roofline' for the training-free baseline",
    )


class WorkloadItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: Kernel
    count: int = Field(default=1, ge=1, le=10**12)


class RankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernels: list[Kernel] | None = Field(default=None, min_length=1)
    workload: list[WorkloadItem] | None = Field(default=None, min_length=1)
    deployment: DeploymentForm | None = None
    devices: list[Annotated[str, Field(max_length=128)] | dict[str, Any]] | Literal["all"] = "all"
    prices: dict[Annotated[str, Field(max_length=128)], Annotated[float, Field(gt=0, lt=1e6)]] | None = None
    model: str | None = Field(default=None, max_length=256)


class BreakdownItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    op: str
    count: int
    duration_us: float | None = None
    bound: str | None = None


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")

    kernel: int
    device: str
    device_name: str
    kind: str
    duration_us: float | None = None
    duration_us_lo: float | None = None
    duration_us_hi: float | None = None
    achieved_gbps: float | None = None
    gflops: float | None = None
    l1_hit_rate: float | None = None
    l2_hit_rate: float | None = None
    arith_intensity: float | None = None
    roofline_class: str | None = None
    bound_pipe: str | None = None
    roofline_us: float | None = None
    headroom: float | None = None
    ood: bool | None = None
    note: str | None = None
    model_version: str
    breakdown: list[BreakdownItem] | None = Field(
        default=None, description="module/source answers: the top ops (or kernels) by predicted time"
    )


class PredictResponse(BaseModel):
    model_version: str
    predictions: list[Answer] = []
    deployments: list[dict[str, Any]] | None = None  # the deployment form's answers (one per device)


class RankEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    device: str
    device_name: str
    total_us: float | None
    total_us_lo: float | None
    total_us_hi: float | None
    usd_per_hour: float | None = None
    usd_per_run: float | None = None
    rank: int


class RankResponse(BaseModel):
    model_version: str
    ranked_by: Literal["time", "cost", "tpot", "ttft"]
    ranking: list[RankEntry] = []
    deployment_ranking: list[dict[str, Any]] | None = None  # the deployment form: GPU x TP options that fit
    options_not_fitting: int | None = None
    note: str | None = Field(
        default=None, description="e.g. prices given for GPUs not being ranked (ignored)"
    )


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
