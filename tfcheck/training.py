"""The public path ``tfcheck.training``: the modules live in ``tfcheck.probe.training`` and
``tfcheck.probe.schedules``; their public names are re-exported here so code written against this path
keeps working."""
from tfcheck.probe.schedules import (  # noqa: F401
    DECLARE_SCHEDULE,
    DEFAULT_BASE_LR,
    DEFAULT_PLANNED_STEPS,
    MAX_PLANNED_STEPS,
    SPARK_BLOCKS,
    Curve,
    Schedule,
    curve_svg,
    find_schedule,
    lr_curve,
    noam_rates,
    planned_steps,
    schedule_rates,
    sparkline,
    sparkline_text,
)
from tfcheck.probe.training import (  # noqa: F401
    CHECK_LR,
    DEFAULT_TRAIN_STEPS,
    LABEL_ARGS,
    Descent,
    LabelArgument,
    batch_size,
    budget,
    call_copy,
    descend,
    fixed_target,
    label_argument,
    labelled_inputs,
    lm_logits,
    output_loss,
    own_loss,
    random_projection_loss,
    takes_target,
    train_mode,
)
from tfcheck.probe.training_copy import CannotCopy, copy_model  # noqa: F401

__all__ = [
    'batch_size', 'budget', 'call_copy', 'CannotCopy', 'CHECK_LR', 'copy_model', 'Curve', 'curve_svg',
    'DECLARE_SCHEDULE', 'DEFAULT_BASE_LR', 'DEFAULT_PLANNED_STEPS', 'DEFAULT_TRAIN_STEPS', 'descend', 'Descent',
    'find_schedule', 'fixed_target', 'LABEL_ARGS', 'label_argument', 'LabelArgument', 'labelled_inputs', 'lm_logits',
    'lr_curve', 'MAX_PLANNED_STEPS', 'noam_rates', 'output_loss', 'own_loss', 'planned_steps',
    'random_projection_loss', 'Schedule', 'schedule_rates', 'SPARK_BLOCKS', 'sparkline', 'sparkline_text',
    'takes_target', 'train_mode',
]
