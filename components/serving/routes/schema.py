"""The HTTP API's request and response bodies (pydantic): what ``/openapi.json`` publishes and the VS Code
extension (``extensions/``) is built against. Field limits here are the first line of the server's input
safety; the rest is in ``components.serving.routes.service``."""

# No ``from __future__ import annotations``: FastAPI and pydantic read these annotations at run time.
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from components.serving.query import DTYPES
from components.serving.question_forms import MAX_MODULE_CHARS, MAX_SOURCE_CHARS


def Whole(low: int, high: int, what: str = "value") -> Any:
    """An int in [low, high] whose error names the limit in the words of the CLI and batch files
    (``query.whole_number``): pydantic's own for 1e30 is "Unable to parse input string as an integer"."""
    from components.serving.query import QueryError, whole_number

    def check(value: Any) -> int:
        try:
            return whole_number(value, "@", low, high, what)
        except QueryError as exc:
            raise ValueError(str(exc).removeprefix("@: ")) from None

    return Annotated[int, BeforeValidator(check), Field(ge=low, le=high)]


# A shape's sizes are checked by the question parser (query.MAX_DIM, the CLI's limit): any number here.
Dim = Annotated[int | float, Field(description="a size (a whole number from 1 to 2**36)")]


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grid: list[Whole(1, 2**31 - 1)] = Field(min_length=1, max_length=3, description="[gx, gy, gz]")
    block: list[Whole(1, 1024)] = Field(min_length=1, max_length=3, description="[bx, by, bz]")
    kernel: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the __global__ function to analyse (default: the only one)",
    )
    defines: dict[Annotated[str, Field(max_length=64)], str | int | float] | None = Field(
        default=None, max_length=64, description='-D macros, e.g. {"N": "1024"}'
    )
    shared_bytes: Whole(0, 1 << 20) | None = Field(default=None, description="dynamic shared memory")


class Kernel(BaseModel):
    """One kernel: a dtype and exactly one form (op + shape | source + language + launch | module)."""

    model_config = ConfigDict(extra="forbid")

    dtype: str | None = Field(default=None, max_length=32, description=" | ".join(DTYPES))
    op: str | None = Field(
        default=None, max_length=32, description="gemm, linear, bmm, add, gelu, softmax, ..."
    )
    shape: (
        Annotated[dict[Annotated[str, Field(max_length=16)], Dim], Field(max_length=8)]
        | Annotated[str, Field(max_length=256)]
        | None
    ) = Field(
        default=None, description='sizes, e.g. {"M": 4096, "N": 4096, "K": 4096} or "M=4096,N=4096,K=4096"'
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


Device = str | dict[str, Any]
# Deployment answers come from the composition (components.deployments), not from the served model.
DEPLOYMENT_VERSION = "deployment-composition"


class DeploymentForm(BaseModel):
    """An LLM deployment question (components.deployments): a model and a serving workload."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(max_length=64 * 1024)] | dict[str, Any] = Field(
        description="a bundled model name, an HF config.json object, or its JSON text (no server paths)"
    )
    isl: Whole(1, 1 << 20)
    osl: Whole(1, 1 << 20)
    concurrency: Whole(1, 1 << 16) = 1
    tp: Whole(1, 1024) = 1
    pp: Whole(1, 1024) = 1
    ep: Whole(1, 1024) = 1
    dp: Whole(1, 1024) = Field(default=1, description="attention data-parallel ranks (MoE)")
    dtype: str = Field(default="bf16", max_length=16)
    kv_dtype: str | None = Field(default=None, max_length=16)
    mode: Literal["agg", "disagg"] = "agg"
    framework: Literal["vllm", "sglang", "trtllm"] = Field(default="vllm", description="the serving engine")
    prefill_gpus: Whole(1, 1 << 16) | None = Field(
        default=None, description="disagg: GPUs of the prefill workers (default: one worker, tp x pp GPUs)"
    )
    decode_gpus: Whole(1, 1 << 16) | None = Field(
        default=None, description="disagg: GPUs of the decode workers (default: one worker, tp x pp GPUs)"
    )
    workload: Literal["steady", "batch"] = "steady"
    tps: list[Whole(1, 1024)] | None = Field(default=None, max_length=16, description="rank: TP options")
    by: Literal["tpot", "ttft", "cost"] = "tpot"

    def params(self) -> dict[str, Any]:
        return self.model_dump(exclude={"model", "tps", "by"}, exclude_none=True)


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
    count: Whole(1, 10**12) = 1


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
