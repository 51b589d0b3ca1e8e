"""Framework-cost coefficients for production answers: fitted on every PipeWeave GPU (batch steps) and both
AIConfigurator silicon GPUs (steady serving), with the default roofline op times.

Regenerate with ``python -m components.deployments.bench --fit-production`` (prints this block). Bench folds
never use these: each fold refits on its own train side.
"""

from components.deployments.compose import FrameworkCost

PRODUCTION_FRAMEWORK = FrameworkCost(
    prefill=(0.0, 0.0, 5.431199, -0.138996, 0.0, 0.0, 0.0),
    decode=(3019.855546, 0.0, 0.0, -0.04057, 0.0, 0.0, 0.0),
    steady_ttft=(926.431877, 1.550658, 0.043804, 4.15493, 56.156718, 0.0, 28.988052),
    steady_tpot=(0.0, 0.545774, 0.56728, 8.380809, 0.0, 0.145112),
    steady_source="AIConfigurator silicon runs on h100-sxm, h200 (1733 runs)",
    source="PipeWeave runs on A100, A40, H100, H20, H200, H800, L20, L40, RTX_6000_Ada, RTX_A6000, RTX_PRO_6000_S",
    train_mape={"prefill": 0.1031, "decode": 0.0749, "steady_ttft": 0.4557, "steady_tpot": 0.2657},
)
