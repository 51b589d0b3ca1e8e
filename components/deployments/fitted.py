"""Framework-cost coefficients for production answers: fitted on every PipeWeave GPU (batch steps) and both
AIConfigurator silicon GPUs (steady serving). ``PRODUCTION_FRAMEWORK``: each part on the op source chosen by
inner cross-validation (leave one PipeWeave GPU out, leave one silicon model out) between the op engine
(``models/opmodel``) and the fixed-efficiency roofline; ``PRODUCTION_FRAMEWORK_ROOFLINE``: every part on the
roofline, for a state folder without an engine.

Regenerate with ``python -m components.deployments.bench --fit-production`` (prints this block). Bench folds
never use these: each fold refits on its own train side.
"""

from components.deployments.compose import FrameworkCost

PRODUCTION_FRAMEWORK = FrameworkCost(
    prefill=(0.0, 0.0, 1.368776, -0.055543, 0.0, 0.0, 0.0),
    decode=(2078.233536, 0.0, 0.0, -0.005336, 0.0, 0.0, 0.0),
    steady_ttft=(1259.397918, 1.122982, 0.075184, 4.392271, 57.016585, 0.0, 36.551749),
    steady_tpot=(47.800328, 0.752826, 0.910346, 6.316711, 0.0, 0.55553),
    steady_source="AIConfigurator silicon runs on h100-sxm, h200 (1485 runs)",
    source=(
        "PipeWeave runs on A100, A40, H100, H20, H200, H800, L20, L40, RTX_6000_Ada, RTX_A6000, "
        "RTX_PRO_6000_S"
    ),
    train_mape={"prefill": 0.0864, "decode": 0.0713, "steady_ttft": 0.3802, "steady_tpot": 0.2026},
    sources={
        "prefill": "engine",
        "decode": "roofline",
        "steady_ttft": "roofline",
        "steady_tpot": "roofline",
    },
)


PRODUCTION_FRAMEWORK_ROOFLINE = FrameworkCost(
    prefill=(0.0, 0.0, 4.998215, -0.155165, 0.0, 0.0, 0.0),
    decode=(2078.233536, 0.0, 0.0, -0.005336, 0.0, 0.0, 0.0),
    steady_ttft=(1259.397918, 1.122982, 0.075184, 4.392271, 57.016585, 0.0, 36.551749),
    steady_tpot=(47.800328, 0.752826, 0.910346, 6.316711, 0.0, 0.55553),
    steady_source="AIConfigurator silicon runs on h100-sxm, h200 (1485 runs)",
    source=(
        "PipeWeave runs on A100, A40, H100, H20, H200, H800, L20, L40, RTX_6000_Ada, RTX_A6000, "
        "RTX_PRO_6000_S"
    ),
    train_mape={"prefill": 0.0991, "decode": 0.0713, "steady_ttft": 0.3802, "steady_tpot": 0.2026},
    sources={
        "prefill": "roofline",
        "decode": "roofline",
        "steady_ttft": "roofline",
        "steady_tpot": "roofline",
    },
)
