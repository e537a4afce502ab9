"""NonFiniteGuard inside a real `fit`, on every backend: a poisoned step is rolled back, the N-th ends training."""

import keras
import numpy as np
import pytest

from keras_seq import training


class PoisonAt(keras.callbacks.Callback):
    """Makes the first kernel NaN before the given batches (a bad batch or an overflow would do the same)."""

    def __init__(self, batches):
        super().__init__()
        self.batches, self.seen = set(batches), 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.seen in self.batches:
            kernel = self.model.layers[0].kernel
            kernel.assign(np.full(kernel.shape, np.nan, "float32"))
        self.seen += 1


def regression(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 4)).astype("float32")
    return model, x, x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")


def test_a_non_finite_loss_rolls_back_and_training_goes_on(capsys):
    model, x, y = regression()
    guard = training.NonFiniteGuard(max_events=3, name="test")
    history = model.fit(x, y, batch_size=8, epochs=20, verbose=0, shuffle=False, callbacks=[PoisonAt({10}), guard])
    assert guard.events == 1
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(w))) for w in model.weights)
    assert all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < 0.01 * history.history["loss"][0]  # it went on learning
    assert (
        "test: the loss was nan at batch 2; rolled back to the last finite weights (1; the run ends at 3)"
        in capsys.readouterr().out
    )
    # The kernel came back from the copy taken after epoch 1, then trained on: finite, and near the truth.
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.layers[0].kernel)[:, 0], [1.0, -2.0, 0.5, 3.0], atol=0.25
    )


def test_the_n_th_non_finite_loss_ends_training():
    model, x, y = regression()
    guard = training.NonFiniteGuard(max_events=2)
    with pytest.raises(
        ValueError,
        match=r"training: expected fewer than 2 non-finite losses "
        r"\(NonFiniteGuard max_events, the recipes' --max-nan\), got 2",
    ):
        model.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False, callbacks=[PoisonAt({3, 12}), guard])
