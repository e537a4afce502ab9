import keras
import numpy as np
import pytest
from layer_checks import assert_close, to_numpy

import keras_seq as ks
from keras_seq.layers.recurrent import CELLS, recurrent_layer


def bracket_data(rng, n, length=10):
    """'(' = 1, ')' = 2, right-padded with 0; label 1 when more '(' than ')'."""
    lengths = rng.integers(1, length + 1, n)
    ids = np.zeros((n, length), "int32")
    for row, size in enumerate(lengths):
        ids[row, :size] = rng.integers(1, 3, size)
    labels = ((ids == 1).sum(1) > (ids == 2).sum(1)).astype("int32")
    return ids, labels


def tagging_data(rng, n, length=10, vocab=6):
    """Tag 1 where a token repeats the one before it, else 2; 0 on padding."""
    lengths = rng.integers(2, length + 1, n)
    ids = np.zeros((n, length), "int32")
    for row, size in enumerate(lengths):
        ids[row, :size] = rng.integers(1, vocab, size)
    repeats = np.concatenate([np.zeros((n, 1), bool), ids[:, 1:] == ids[:, :-1]], axis=1)
    tags = np.where(ids == 0, 0, np.where(repeats, 1, 2)).astype("int32")
    return ids, tags


def held_out_accuracy(model, ids, targets, ignore_padding=False):
    predicted = to_numpy(model.predict(ids, verbose=0)).argmax(-1)
    if ignore_padding:
        return float((predicted == targets)[ids != 0].mean())
    return float((predicted == targets).mean())


@pytest.mark.nightly  # trains four models to convergence
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_classifier_learns_bracket_counting(rng, cell, pooling):
    ids, labels = bracket_data(rng, 1200)
    model = ks.models.rnn_classifier(3, 2, embedding_dim=8, units=16, cell=cell, pooling=pooling)
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids[:1000], labels[:1000], epochs=12, batch_size=50, verbose=0)
    # A constant guess scores at most ~0.6 here.
    assert held_out_accuracy(model, ids[1000:], labels[1000:]) > 0.9


@pytest.mark.nightly  # trains two models to convergence
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_tagger_learns_the_repeat_rule(rng, cell):
    ids, tags = tagging_data(rng, 1200)
    model = ks.models.rnn_tagger(6, 3, embedding_dim=16, units=32, cell=cell)
    model.compile(keras.optimizers.Adam(1e-2), ks.losses.LabelSmoothingCrossEntropy(epsilon=0.0, ignore_index=0))
    model.fit(ids[:1000], tags[:1000], epochs=20, batch_size=50, verbose=0)
    # Always guessing "no repeat" scores about 0.82.
    assert held_out_accuracy(model, ids[1000:], tags[1000:], ignore_padding=True) > 0.95


@pytest.mark.parametrize("cell", CELLS)
def test_every_cell_builds_trains_saves_and_survives_all_padding(tmp_path, rng, cell):
    ids, labels = bracket_data(rng, 64)
    ids[0] = 0  # an all-padding sequence
    for model, targets in (
        (ks.models.rnn_classifier(3, 2, embedding_dim=4, units=6, cell=cell, num_layers=2), labels),
        (
            ks.models.rnn_tagger(3, 2, embedding_dim=4, units=6, cell=cell, bidirectional=False),
            (ids == 1).astype("int32"),
        ),
    ):
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(ids, targets, epochs=2, verbose=0)
        assert np.all(np.isfinite(history.history["loss"]))
        outputs = to_numpy(model(ids))
        assert np.all(np.isfinite(outputs))
        path = tmp_path / f"{model.name}.keras"
        model.save(path)
        assert_close(keras.saving.load_model(path)(ids), outputs, atol=1e-5)


def test_padded_batch_equals_unpadded_runs(rng):
    model = ks.models.rnn_classifier(5, 3, embedding_dim=4, units=6, cell="gru", pooling="last")
    ids = np.array([[1, 2, 3, 4], [2, 3, 0, 0]], dtype="int32")
    batched = to_numpy(model(ids))
    assert_close(batched[1:], model(ids[1:, :2]), atol=1e-5)


def test_gradient_clipping_rescues_an_exploding_elman_rnn(rng):
    """A linear Elman RNN (Elman, 1990) with recurrent gain 1.2 over 30 steps explodes."""
    x = rng.normal(size=(64, 30, 4)).astype("float32")
    y = x[:, :, 0].sum(1, keepdims=True) / 5
    losses = {}
    for clipnorm in (None, 1.0):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((30, 4))
        recurrent = keras.initializers.Orthogonal(gain=1.2)
        h = keras.layers.SimpleRNN(16, activation="linear", recurrent_initializer=recurrent)(inputs)
        model = keras.Model(inputs, keras.layers.Dense(1)(h))
        model.compile(keras.optimizers.SGD(1e-2, clipnorm=clipnorm), "mse")
        losses[clipnorm] = model.fit(x, y, epochs=20, batch_size=16, verbose=0).history["loss"]
    assert not np.isfinite(losses[None][-1]) or losses[None][-1] > losses[None][0]
    assert np.isfinite(losses[1.0][-1]) and losses[1.0][-1] < 0.01 * losses[1.0][0]


def test_bad_arguments_raise_value_errors():
    cases = [
        (
            lambda: ks.models.rnn_classifier(10, 2, cell="transformer"),
            r"rnn_classifier.*cell.*'rnn', 'gru', 'lstm'.*got 'transformer'",
        ),
        (
            lambda: ks.models.rnn_tagger(10, 3, cell="LSTM"),
            r"rnn_tagger.*cell.*'peephole_lstm', 'coupled_lstm'.*got 'LSTM'",
        ),
        (lambda: ks.models.rnn_lm(10, cell=None), r"rnn_lm.*cell.*got None"),
        (lambda: ks.models.rnn_classifier(10, 2, pooling="max"), r"rnn_classifier.*pooling.*'mean', 'last'.*got 'max'"),
        (lambda: ks.models.rnn_classifier(0, 2), r"rnn_classifier.*vocabulary_size.*positive integer"),
        (lambda: ks.models.rnn_tagger(10, 0), r"rnn_tagger.*num_tags.*positive integer"),
        (lambda: ks.models.rnn_tagger(10, 3, num_layers=0), r"rnn_tagger.*num_layers"),
        (lambda: recurrent_layer("lstm2", 4), r"recurrent_layer.*cell"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
