"""``GET /v1/devices``: the catalog's GPUs, as a client lists them to ask about one."""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
from typing import Any

from fastapi import APIRouter, Depends

from components.serving.routes.service import authorised

router = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(authorised)])


@router.get("/devices")
def devices() -> dict[str, Any]:
    from components.devices import load_catalog

    return {
        "devices": [
            {
                "id": s.id,
                "name": s.name,
                "vendor": s.vendor,
                "arch": s.architecture,
                "compute_capability": s.compute_capability,
                "sms": s.sms,
                "memory_gb": s.memory_gb,
                "dram_gbps": s.dram_gbps,
                "l2_mb": s.l2_mb,
                "aliases": list(s.aliases),
                "peak_tflops": s.peak_tflops.model_dump(exclude_none=True),
            }
            for s in load_catalog().all()
        ]
    }
