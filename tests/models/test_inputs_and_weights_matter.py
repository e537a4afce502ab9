"""Every model builder, in every option setting: each input moves the outputs, each weight learns.

A model can run, train and even lower its loss while part of it is dead: a layer whose
output nothing reads, or whose gradient vanishes. For each builder and a
setting of each of its options, this checks on a small random batch that

* changing any one token of any input changes the logits, and, for the causal inputs
  (language models, decoder inputs), only at that position and after it;
* the gradient of a random projection of the logits reaches every trainable weight.
"""

import keras
import numpy as np
import pytest
from layer_checks import to_numpy

import keras_seq as ks

V, L, B = 11, 6, 3

# name -> (builder, option settings, {input name: is it causal?})
MODELS = {
    "rnn_classifier": (
        lambda **o: ks.models.rnn_classifier(V, 4, embedding_dim=8, units=8, **o),
        [{}, {"cell": "gru", "bidirectional": False, "pooling": "last"}, {"pooling": "last", "num_layers": 2}],
        {"ids": False},
    ),
    "rnn_tagger": (
        lambda **o: ks.models.rnn_tagger(V, 5, embedding_dim=8, units=8, **o),
        [{}, {"cell": "gru", "bidirectional": False, "num_layers": 2}],
        {"ids": False},
    ),
    "rnn_lm": (
        lambda **o: ks.models.rnn_lm(V, embedding_dim=8, units=8, **o),
        [{}, {"cell": "gru", "num_layers": 2}, {"condition_dim": 3}],
        {"token_ids": True},
    ),
    "rnn_seq2seq": (
        lambda **o: ks.models.rnn_seq2seq(V, V + 2, embedding_dim=8, units=8, **o),
        [
            {},
            {"attention": "luong", "cell": "lstm"},
            {"attention": "luong_dot", "bidirectional_encoder": False},
            {"attention": "luong_concat"},
            {"attention": None},
            {"input_feeding": True, "dropout": 0.2},
        ],
        {"encoder_inputs": False, "decoder_inputs": True},
    ),
    "transformer_seq2seq": (
        lambda **o: ks.models.transformer_seq2seq(
            V, V, L, L, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, **o
        ),
        [{}, {"norm_first": False, "positional": "learned"}, {"tie_embeddings": True, "share_embeddings": True}],
        {"encoder_inputs": False, "decoder_inputs": True},
    ),
    "transformer_lm": (
        lambda **o: ks.models.transformer_lm(V, L, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, **o),
        [{}, {"norm_first": False, "positional": "sinusoidal"}, {"tie_embeddings": True}],
        {"token_ids": True},
    ),
    "transformer_classifier": (
        lambda **o: ks.models.transformer_classifier(
            V, 4, L, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, **o
        ),
        [{}, {"pooling": "first", "norm_first": False, "positional": "sinusoidal"}],
        {"ids": False},
    ),
    "transformer_mlm": (
        lambda **o: ks.models.transformer_mlm(V, L, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, **o),
        [{}, {"norm_first": False, "tie_embeddings": True}],
        {"ids": False},
    ),
}
CASES = [(name, options) for name, (_, settings, _) in MODELS.items() for options in settings]


def batch(rng, causal_inputs, options):
    """Random ids in 3..V-1 (no padding, start or end), plus a condition vector when the model takes one."""
    inputs = {name: rng.integers(3, V, size=(B, L)).astype("int32") for name in causal_inputs}
    if options.get("condition_dim"):
        inputs["condition"] = rng.normal(size=(B, options["condition_dim"])).astype("float32")
    return inputs


def model_feed(inputs):
    """The inputs as the model takes them: the dict, or its one array."""
    return inputs if len(inputs) > 1 else next(iter(inputs.values()))


def call(model, inputs):
    return to_numpy(model(model_feed(inputs), training=False))


def weight_gradients(model, inputs, projection):
    """The gradient of `sum(logits * projection)` for each trainable weight, as NumPy."""
    feed = model_feed(inputs)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            objective = tf.reduce_sum(model(feed, training=False) * projection)
        return [to_numpy(g) for g in tape.gradient(objective, model.trainable_variables)]
    if backend == "jax":
        import jax

        fixed = [v.value for v in model.non_trainable_variables]

        def objective(trainable):
            logits, _ = model.stateless_call(trainable, fixed, feed, training=False)
            return (logits * projection).sum()

        return [np.asarray(g) for g in jax.grad(objective)([v.value for v in model.trainable_variables])]
    (model(feed, training=False) * keras.ops.convert_to_tensor(projection)).sum().backward()
    return [v.value.grad.detach().cpu().numpy() for v in model.trainable_variables]


@pytest.mark.parametrize(
    "name, options", CASES, ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'defaults'}" for n, o in CASES]
)
def test_every_input_moves_the_outputs_and_every_weight_gets_gradient(rng, name, options):
    build, _, causal_inputs = MODELS[name]
    model = build(**options)
    inputs = batch(rng, causal_inputs, options)
    logits = call(model, inputs)
    assert np.all(np.isfinite(logits))
    position = L // 2
    for input_name, causal in causal_inputs.items():
        changed = {k: x.copy() for k, x in inputs.items()}
        changed[input_name][:, position] = 3 + (changed[input_name][:, position] - 2) % (V - 3)
        moved = (
            np.abs(call(model, changed) - logits)
            .reshape(B, L if logits.ndim == 3 and logits.shape[1] == L else 1, -1)
            .max(-1)
        )
        assert np.all(moved.max(-1) > 1e-6), (input_name, moved)
        if causal:
            assert np.all(moved[:, :position] == 0), (input_name, "a causal input moved earlier positions", moved)
    if "condition" in inputs:
        changed = dict(inputs, condition=inputs["condition"] + 1.0)
        assert np.abs(call(model, changed) - logits).max() > 1e-6
    gradients = weight_gradients(model, inputs, rng.normal(size=logits.shape).astype("float32"))
    dead = [v.path for v, g in zip(model.trainable_variables, gradients) if not np.any(np.abs(g) > 0)]
    assert not dead, f"no gradient reaches {dead}"
    assert len(gradients) == len(model.trainable_variables) > 0
