"""Framework-cost coefficients for production answers: fitted on every PipeWeave GPU (batch steps) and both
AIConfigurator silicon GPUs (steady serving), with the default roofline op times.

Regenerate with ``python -m components.deployments.bench --fit-production`` (prints this block). Bench folds
never use these: each fold refits on its own train side.
"""

from components.deployments.compose import FrameworkCost

PRODUCTION_FRAMEWORK = FrameworkCost(
    prefill=(0.0, 0.0, 5.401524, -0.139046),
    decode=(1745.674088, 0.0, 0.0, -0.043991),
    steady_ttft=(34040.689479, 1.270354, 0.044729, 5.470495),
    steady_tpot=(2786.474599, 0.726931, 0.509967),
    steady_source="AIConfigurator silicon runs on h100-sxm, h200 (1284 runs)",
    source="PipeWeave runs on A100, A40, H100, H20, H200, H800, L20, L40, RTX_6000_Ada, RTX_A6000, "
    "RTX_PRO_6000_S",
    train_mape={"prefill": 0.1031, "decode": 0.0782, "steady_ttft": 0.4051, "steady_tpot": 0.2603},
)
