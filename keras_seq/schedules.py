"""Learning-rate schedules."""

import keras
from keras import ops

from keras_seq import _validation as v


@keras.saving.register_keras_serializable(package="keras_seq")
class InverseSquareRootWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """The warm-up schedule of Vaswani et al. (2017), section 5.3.

    `lr(step) = scale * hidden_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)`
    with `step` counted from 1: a linear rise for `warmup_steps` steps, then decay as
    `1/sqrt(step)`. Post-norm Transformers need it to train at all; the pre-norm
    blocks of this package (the default) also train with a constant Adam rate such
    as 1e-3 (Xiong et al., 2020), which the tests and recipes use.

    Args:
        hidden_dim: model width d_model.
        warmup_steps: steps of linear warm-up (4000 in the paper).
        scale: overall multiplier (1.0 in the paper).
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        owner = "InverseSquareRootWarmup"
        self.hidden_dim = v.check_positive_int(owner, "hidden_dim", hidden_dim)
        self.warmup_steps = v.check_positive_int(owner, "warmup_steps", warmup_steps)
        self.scale = v.check_positive_number(owner, "scale", scale)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        return self.scale * self.hidden_dim**-0.5 * decay

    def get_config(self):
        return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}
