"""TrainingBudget, WarmupLinearDecay and BestByValidation inside a real `fit`, on every backend."""

import keras
import numpy as np
import pytest

from keras_seq import training


def sum_model():
    """y = x @ w with x = 1 and loss = mean(y): every SGD step subtracts the learning rate from each weight."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=lambda y_true, y_pred: keras.ops.sum(y_pred, axis=-1))
    return model


def ones(batches):
    return np.ones((batches, 1), "float32"), np.zeros((batches, 2), "float32")


def test_a_step_budget_stops_fit_and_sets_each_steps_rate():
    model = sum_model()
    budget = training.TrainingBudget(steps=20)
    schedule = training.WarmupLinearDecay(budget, peak=0.1, warmup=0.25)
    x, y = ones(4)
    history = model.fit(x, y, batch_size=1, epochs=100, callbacks=[budget, schedule], verbose=0)
    assert budget.spent_steps == 20 and len(history.history["loss"]) == 5
    fractions = np.arange(20) / 20  # the share spent before each step
    expected = np.where(
        fractions < 0.25, 0.1 * np.maximum(fractions / 0.25, 1e-3), 0.1 * (1 - (fractions - 0.25) / 0.75)
    )
    # Each step's rate is the formula's (20 steps fall on the 1/1000 grid), applied within the compiled step.
    applied = -keras.ops.convert_to_numpy(model.weights[0])[0, 0]
    np.testing.assert_allclose(applied, expected.sum(), rtol=1e-6)
    assert applied > 0.5 * 0.1 * 20 * 0.9  # warm-up and decay: about half the peak on average


def test_the_rate_follows_the_published_shape():
    schedule = training.WarmupLinearDecay(training.TrainingBudget(seconds=10), peak=2.0, warmup=0.1, final=0.25)
    rates = [schedule.rate(f) for f in (0.0, 0.05, 0.1, 0.55, 1.0, 1.5)]
    np.testing.assert_allclose(rates, [2e-3, 1.0, 2.0, 2.0 * (1 - 0.75 * 0.5), 0.5, 0.5])


def test_a_time_budget_stops_training():
    model = sum_model()
    budget = training.TrainingBudget(seconds=1e-6)
    model.fit(*ones(8), batch_size=1, epochs=10, callbacks=[budget], verbose=0)
    assert budget.spent_steps == 1 and budget.fraction() == 1.0


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="TrainingBudget: `seconds` expected"):
        training.TrainingBudget(seconds=0)
    with pytest.raises(ValueError, match="WarmupLinearDecay: `budget` expected a TrainingBudget with seconds or steps"):
        training.WarmupLinearDecay(training.TrainingBudget(), 1.0)
    with pytest.raises(ValueError, match="WarmupLinearDecay: `warmup` expected"):
        training.WarmupLinearDecay(training.TrainingBudget(steps=3), 1.0, warmup=1.0)
    with pytest.raises(ValueError, match="BestByValidation: `patience` expected"):
        training.BestByValidation(lambda m: {}, "bleu", patience=0)
    with pytest.raises(ValueError, match="BestByValidation: `mode` expected 'max' or 'min', got 'lower'"):
        training.BestByValidation(lambda m: {}, "bleu", mode="lower")


class Scores:
    """A score function that returns the given values in turn and records the weights it saw."""

    def __init__(self, values):
        self.values, self.seen = list(values), []

    def __call__(self, model):
        self.seen.append(keras.ops.convert_to_numpy(model.weights[0]).copy())
        return {"bleu": self.values.pop(0), "chrf": 1.0}


def test_best_weights_are_restored_and_patience_stops(tmp_path):
    model = sum_model()
    score = Scores([1.0, 3.0, 2.0, 2.5, 0.5, 9.0])
    validation = training.BestByValidation(
        score, "bleu", patience=3, path=str(tmp_path / "best.weights.h5"), verbose=False
    )
    history = model.fit(*ones(2), batch_size=1, epochs=10, callbacks=[validation], verbose=0)
    assert history.history["val_bleu"] == [1.0, 3.0, 2.0, 2.5, 0.5]  # stopped after 3 scores without gain
    assert validation.best == 3.0 and validation.chosen == "best"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.weights[0]), score.seen[1])
    saved = sum_model()
    saved.load_weights(tmp_path / "best.weights.h5")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(saved.weights[0]), score.seen[1])


@pytest.mark.parametrize("average_score, chosen", [(5.0, "average of 3"), (2.0, "best")])
def test_the_average_of_the_last_weights_is_kept_when_it_scores_as_well(average_score, chosen):
    model = sum_model()
    score = Scores([1.0, 2.0, 3.0, 4.0, average_score])
    validation = training.BestByValidation(score, "bleu", average_last=3, verbose=False)
    model.fit(*ones(2), batch_size=1, epochs=4, callbacks=[validation], verbose=0)
    average = np.mean(score.seen[1:4], axis=0)
    np.testing.assert_allclose(score.seen[4], average, rtol=1e-6)  # the averaged weights were scored
    assert validation.chosen == chosen
    kept = average if chosen.startswith("average") else score.seen[3]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.weights[0]), kept, rtol=1e-6)


def test_mode_min_keeps_the_lowest_score():
    model = sum_model()
    score = Scores([5.0, 3.0, 4.0, 3.5, 6.0, 4.5])  # e.g. perplexities: lower is better
    validation = training.BestByValidation(score, "bleu", mode="min", patience=3, average_last=2, verbose=False)
    history = model.fit(*ones(2), batch_size=1, epochs=10, callbacks=[validation], verbose=0)
    assert history.history["val_bleu"] == [5.0, 3.0, 4.0, 3.5, 6.0]  # stopped after 3 scores above 3.0
    # the average of the last two scored 4.5, worse than the best 3.0: the best weights stay
    assert validation.best == 3.0 and validation.chosen == "best"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.weights[0]), score.seen[1])
