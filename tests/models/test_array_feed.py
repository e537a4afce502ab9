"""`ArrayFeedModel` trains, evaluates and predicts on arrays exactly as `keras.Model` does.

On TensorFlow it feeds arrays through Keras' own array adapter with tf.data's
autotuning off (whose thread makes the iterator's deletion wait); the batches, weights,
validation split and results must not change, on any backend.
"""

import keras
import numpy as np
import pytest

import keras_seq as ks

NUM_CLASSES = 3


def twin_models():
    """An `ArrayFeedModel` and a `keras.Model` of the same graph and weights, both compiled."""
    models = []
    for cls in (ks.models.ArrayFeedModel, keras.Model):
        features = keras.Input((4,), name="features")
        hidden = keras.layers.Dense(5, activation="tanh")(features)
        models.append(cls({"features": features}, keras.layers.Dense(NUM_CLASSES)(hidden)))
    models[1].set_weights(models[0].get_weights())
    for model in models:
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
        )
    return models


@pytest.fixture
def data(rng):
    x = {"features": rng.normal(size=(11, 4)).astype("float32")}
    y = rng.integers(0, NUM_CLASSES, size=(11,)).astype("int32")
    return x, y, rng.uniform(0.5, 2.0, size=(11,)).astype("float32")


def assert_same_training(fed, plain, fit_args, fit_kwargs):
    fed_history = fed.fit(*fit_args, **fit_kwargs, verbose=0).history
    plain_history = plain.fit(*fit_args, **fit_kwargs, verbose=0).history
    assert sorted(fed_history) == sorted(plain_history)
    for name, values in plain_history.items():
        np.testing.assert_allclose(fed_history[name], values, rtol=1e-5, atol=1e-6, err_msg=name)
    for fed_weight, plain_weight in zip(fed.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(fed_weight, plain_weight, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "case",
    ["sample_weight", "class_weight", "validation_split", "validation_data", "steps_per_epoch", "positional"],
)
def test_fit_on_arrays_equals_keras_model(data, case):
    x, y, weights = data
    held_out = ({"features": x["features"][:5] * 2.0}, y[:5], weights[:5])
    args, kwargs = (x, y), {"batch_size": 4, "epochs": 2, "shuffle": False}
    if case == "sample_weight":
        kwargs["sample_weight"] = weights
    elif case == "class_weight":
        kwargs["class_weight"] = {0: 0.5, 1: 2.0, 2: 1.0}
    elif case == "validation_split":
        kwargs.update(validation_split=0.3, sample_weight=weights)
    elif case == "validation_data":
        kwargs.update(validation_data=held_out, validation_batch_size=2)
    elif case == "steps_per_epoch":
        kwargs.update(steps_per_epoch=2, batch_size=None)
    else:  # x, y, batch_size and epochs given by position
        args, kwargs = (x, y, 4, 2), {"shuffle": False}
    assert_same_training(*twin_models(), args, kwargs)


class _Batches(keras.utils.PyDataset):
    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


def test_fit_on_a_py_dataset_equals_keras_model(data):
    x, y, _ = data
    batches = _Batches([({"features": x["features"][i : i + 4]}, y[i : i + 4]) for i in range(0, 11, 4)])
    assert_same_training(*twin_models(), (batches,), {"epochs": 2, "shuffle": False})


def test_evaluate_and_predict_on_arrays_equal_keras_model(data):
    x, y, weights = data
    fed, plain = twin_models()
    for kwargs in ({"batch_size": 4}, {"batch_size": 4, "sample_weight": weights}, {"steps": 2}):
        fed_result = fed.evaluate(x, y, verbose=0, return_dict=True, **kwargs)
        plain_result = plain.evaluate(x, y, verbose=0, return_dict=True, **kwargs)
        for name, value in plain_result.items():
            np.testing.assert_allclose(fed_result[name], value, rtol=1e-6, err_msg=f"{kwargs} {name}")
    np.testing.assert_allclose(
        fed.predict(x, batch_size=3, verbose=0), plain.predict(x, batch_size=3, verbose=0), rtol=1e-6
    )
    np.testing.assert_allclose(fed.predict(x, 5, 0), plain.predict(x, 5, 0), rtol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.data feeds arrays on TensorFlow only")
def test_tensorflow_array_inputs_go_through_tf_data_without_autotuning(data, monkeypatch):
    x, y, _ = data
    datasets = []
    from keras_seq.backend import tensorflow as tensorflow_backend

    make_dataset = tensorflow_backend._ArraysWithoutAutotune.get_tf_dataset

    def recording(adapter):
        datasets.append(make_dataset(adapter))
        return datasets[-1]

    monkeypatch.setattr(tensorflow_backend._ArraysWithoutAutotune, "get_tf_dataset", recording)
    model = twin_models()[0]
    model.fit(x, y, batch_size=4, epochs=1, validation_split=0.25, verbose=0)
    model.evaluate(x, y, verbose=0)
    model.predict(x, verbose=0)
    assert len(datasets) == 4  # training, validation, evaluate, predict
    assert all(dataset.options().autotune.enabled is False for dataset in datasets)
    keras_default = keras.src.trainers.data_adapters.ArrayDataAdapter(x, y, batch_size=4).get_tf_dataset()
    assert keras_default.options().autotune.enabled is not False


def test_every_keras_seq_model_feeds_arrays_this_way(tmp_path):
    models = [
        ks.models.transformer_lm(20, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8),
        ks.models.transformer_classifier(20, 2, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8),
        ks.models.transformer_mlm(20, 8, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8),
        ks.models.rnn_classifier(20, 2, embedding_dim=4, units=4),
        ks.models.rnn_tagger(20, 2, embedding_dim=4, units=4),
        ks.models.rnn_lm(20, embedding_dim=4, units=4),
    ]
    assert all(isinstance(model, ks.models.ArrayFeedModel) for model in models)
    models[1].save(tmp_path / "classifier.keras")  # a plain functional graph: reloads as the same class
    assert type(keras.saving.load_model(tmp_path / "classifier.keras")) is ks.models.ArrayFeedModel
