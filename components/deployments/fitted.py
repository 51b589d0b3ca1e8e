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
    prefill=(8e-06, 3e-06, 1.448501, -0.071777, 0.0, 0.0, 0.0),
    decode=(3019.855546, 0.0, 0.0, -0.04057, 0.0, 0.0, 0.0),
    steady_ttft=(8803.039757, 1.303832, 0.047281, 5.173308, 40.132963, 0.0, 28.279754),
    steady_tpot=(0.0, 0.536237, 0.56638, 8.582273, 0.0, 0.065631),
    steady_source='AIConfigurator silicon runs on h100-sxm, h200 (1485 runs)',
    source=(
        'PipeWeave runs on A100, A40, H100, H20, H200, H800, L20, L40, RTX_6000_Ada, RTX_A6000, '
        'RTX_PRO_6000_S'
    ),
    train_mape={'prefill': 0.0883, 'decode': 0.0749, 'steady_ttft': 0.397, 'steady_tpot': 0.2318},
    sources={
        'prefill': 'engine',
        'decode': 'roofline',
        'steady_ttft': 'roofline',
        'steady_tpot': 'roofline',
    },
)


PRODUCTION_FRAMEWORK_ROOFLINE = FrameworkCost(
    prefill=(0.0, 0.0, 5.431199, -0.138996, 0.0, 0.0, 0.0),
    decode=(3019.855546, 0.0, 0.0, -0.04057, 0.0, 0.0, 0.0),
    steady_ttft=(8803.039757, 1.303832, 0.047281, 5.173308, 40.132963, 0.0, 28.279754),
    steady_tpot=(0.0, 0.536237, 0.56638, 8.582273, 0.0, 0.065631),
    steady_source='AIConfigurator silicon runs on h100-sxm, h200 (1485 runs)',
    source=(
        'PipeWeave runs on A100, A40, H100, H20, H200, H800, L20, L40, RTX_6000_Ada, RTX_A6000, '
        'RTX_PRO_6000_S'
    ),
    train_mape={'prefill': 0.1031, 'decode': 0.0749, 'steady_ttft': 0.397, 'steady_tpot': 0.2318},
    sources={
        'prefill': 'roofline',
        'decode': 'roofline',
        'steady_ttft': 'roofline',
        'steady_tpot': 'roofline',
    },
)
