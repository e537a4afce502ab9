"""Causal models run unmasked and carry the id-0 padding mask on their logits.

Trailing padding cannot reach a real position of a causal or recurrent LM, so the
logits of real tokens must equal those of the unpadded rows, and the loss (Keras
reads the mask from the logits) must be the mean over real positions only.
"""

import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks

LENGTHS = (7, 4, 1)


def make_lm(kind):
    if kind == "transformer":
        return ks.models.transformer_lm(30, 16, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32)
    return ks.models.rnn_lm(30, embedding_dim=8, units=16, cell="gru")


def right_padded(rng):
    ids = np.zeros((len(LENGTHS), max(LENGTHS)), "int32")
    for row, length in enumerate(LENGTHS):
        ids[row, :length] = rng.integers(1, 30, size=length)
    return ids


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_real_positions_ignore_trailing_padding(rng, kind):
    model, ids = make_lm(kind), right_padded(rng)
    embedding = model.token_embedding if kind == "transformer" else model.embedding
    assert embedding.compute_mask(ids) is None  # the network itself runs unmasked
    padded = to_numpy(model(ids))
    for row, length in enumerate(LENGTHS):
        alone = to_numpy(model(ids[row : row + 1, :length]))[0]
        np.testing.assert_allclose(padded[row, :length], alone, atol=1e-5)


def assert_loss_skips_padding(model, inputs, ids, rng):
    """`model.evaluate`'s loss is the mean over the positions where `ids` is not 0."""
    targets = np.where(ids > 0, rng.integers(1, 30, size=ids.shape), 0).astype("int32")
    # Id 0 (every padded position's target) becomes near-certain: counting padding would lower the loss a lot.
    model.head.bias.assign(np.eye(30, dtype="float32")[0] * 10.0)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = model.evaluate(inputs, targets, batch_size=len(ids), verbose=0)

    log_probs = log_softmax(to_numpy(model(inputs)).astype("float64"))
    token_losses = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    real = ids > 0
    np.testing.assert_allclose(loss, token_losses[real].sum() / real.sum(), rtol=1e-5)
    assert loss > 1.5 * token_losses.mean()


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_loss_averages_over_real_positions_only(rng, kind):
    ids = right_padded(rng)
    assert_loss_skips_padding(make_lm(kind), ids, ids, rng)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_seq2seq_decoder_ignores_trailing_target_padding(rng, cell):
    """rnn_seq2seq's decoder runs unmasked too; its loss still skips padded targets."""
    model = ks.models.rnn_seq2seq(20, 30, embedding_dim=8, units=16, cell=cell)
    decoder_ids = right_padded(rng)
    source = np.array([[3, 4, 5, 0], [6, 7, 0, 0], [8, 0, 0, 0]], "int32")
    assert model.target_embedding.compute_mask(decoder_ids) is None
    padded = to_numpy(model({"encoder_inputs": source, "decoder_inputs": decoder_ids}))
    for row, length in enumerate(LENGTHS):
        alone = model({"encoder_inputs": source[row : row + 1], "decoder_inputs": decoder_ids[row : row + 1, :length]})
        np.testing.assert_allclose(padded[row, :length], to_numpy(alone)[0], atol=1e-5)

    inputs = {"encoder_inputs": source, "decoder_inputs": decoder_ids}
    assert_loss_skips_padding(model, inputs, decoder_ids, rng)


def assert_fit_metrics_skip_padding(model, inputs, ids, rng):
    """`fit`'s logged metrics, ours and Keras' own, count the positions where `ids` is not 0 only.

    Keras' JAX trainer hands metrics logits without their mask; the models put it back.
    """
    targets = np.where(ids > 0, rng.integers(1, 30, size=ids.shape), 0).astype("int32")
    model.head.bias.assign(np.eye(30, dtype="float32")[0] * 10.0)  # padding's target 0 near-certain
    model.compile(
        optimizer=keras.optimizers.SGD(0.0),  # the weights stay: logged figures are the model's below
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[ks.metrics.Perplexity(), keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    history = model.fit(inputs, targets, batch_size=len(ids), epochs=1, verbose=0).history
    logits = to_numpy(model(inputs)).astype("float64")
    token_losses = -np.take_along_axis(log_softmax(logits), targets[..., None], axis=-1)[..., 0]
    real = ids > 0
    assert history["perplexity"][0] == pytest.approx(np.exp(token_losses[real].mean()), rel=1e-4)
    assert history["perplexity"][0] > 1.5 * np.exp(token_losses.mean())
    assert history["accuracy"][0] == pytest.approx((logits.argmax(-1) == targets)[real].mean())


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_fit_metrics_count_real_positions_only(rng, kind):
    ids = right_padded(rng)
    assert_fit_metrics_skip_padding(make_lm(kind), ids, ids, rng)


def test_seq2seq_fit_metrics_count_real_target_positions_only(rng):
    model = ks.models.rnn_seq2seq(20, 30, embedding_dim=8, units=16)
    decoder_ids = right_padded(rng)
    source = np.array([[3, 4, 5, 0], [6, 7, 0, 0], [8, 0, 0, 0]], "int32")
    inputs = {"encoder_inputs": source, "decoder_inputs": decoder_ids}
    assert_fit_metrics_skip_padding(model, inputs, decoder_ids, rng)
