import keras
import numpy as np
import pytest
from layer_checks import (
    assert_close,
    assert_random_weights_drawn_apart,
    check_functional_model,
    fit_reduces_loss,
    to_numpy,
)

import keras_seq as ks


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def split_gates(z, count):
    return np.split(z, count, axis=-1)


def numpy_peephole_lstm(x, kernel, recurrent, bias, peephole):
    """Peephole LSTM (Gers and Schmidhuber, 2000), one step at a time."""
    units = recurrent.shape[0]
    h, c = np.zeros((x.shape[0], units)), np.zeros((x.shape[0], units))
    P_i, P_f, P_o = split_gates(peephole, 3)
    outputs = []
    for t in range(x.shape[1]):
        z_i, z_f, z_c, z_o = split_gates(x[:, t] @ kernel + h @ recurrent + bias, 4)
        f = sigmoid(z_f + c @ P_f)  # W_f . [C_{t-1}, h_{t-1}, x_t] + b_f
        i = sigmoid(z_i + c @ P_i)
        c = f * c + i * np.tanh(z_c)  # C_t = f * C_{t-1} + i * C~_t
        o = sigmoid(z_o + c @ P_o)  # W_o . [C_t, h_{t-1}, x_t] + b_o
        h = o * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1), h, c


def numpy_coupled_lstm(x, kernel, recurrent, bias):
    """Coupled input and forget gate (Greff et al., 2017, CIFG): C_t = u * C_{t-1} + (1 - u) * C~_t."""
    units = recurrent.shape[0]
    h, c = np.zeros((x.shape[0], units)), np.zeros((x.shape[0], units))
    outputs = []
    for t in range(x.shape[1]):
        z_u, z_c, z_o = split_gates(x[:, t] @ kernel + h @ recurrent + bias, 3)
        u = sigmoid(z_u)
        c = u * c + (1 - u) * np.tanh(z_c)
        h = sigmoid(z_o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1), h, c


def numpy_reference(cell, x):
    weights = [to_numpy(w).astype("float64") for w in (cell.kernel, cell.recurrent_kernel, cell.bias)]
    if isinstance(cell, ks.layers.PeepholeLSTMCell):
        return numpy_peephole_lstm(x, *weights, to_numpy(cell.peephole_kernel))
    return numpy_coupled_lstm(x, *weights)


CELLS = [ks.layers.PeepholeLSTMCell, ks.layers.CoupledLSTMCell]


def randomize(layer, rng):
    for variable in layer.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype("float32"))


@pytest.mark.parametrize("cell_class", CELLS)
def test_cell_matches_published_equations_step_by_step(rng, cell_class):
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    cell = cell_class(6)
    rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    rnn(x)
    randomize(rnn, rng)
    outputs, h, c = rnn(x)
    expected_outputs, expected_h, expected_c = numpy_reference(cell, x)
    assert_close(outputs, expected_outputs, atol=1e-5)
    assert_close(h, expected_h, atol=1e-5)
    assert_close(c, expected_c, atol=1e-5)


@pytest.mark.parametrize("cell_class", CELLS)
def test_remember_bias_initialisation(cell_class):
    cell = cell_class(3)
    cell.build((None, 2))
    bias = to_numpy(cell.bias).reshape(len(cell.gates), 3)
    for gate, row in zip(cell.gates, bias):
        np.testing.assert_array_equal(row, 1.0 if gate == cell.remember_gate else 0.0)
    assert_random_weights_drawn_apart(cell)  # the peephole kernel is not a copy of the recurrent one


@pytest.mark.parametrize("cell_class", CELLS)
def test_padded_batch_gives_the_states_of_unpadded_runs(rng, cell_class):
    lengths = [5, 3, 1]
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    x[1, 3:] = 0.0
    x[2, 1:] = 0.0
    mask = np.arange(5)[None] < np.array(lengths)[:, None]
    rnn = keras.layers.RNN(cell_class(6), return_sequences=True, return_state=True)
    outputs, h, c = rnn(x, mask=mask)
    for row, length in enumerate(lengths):
        _, single_h, single_c = rnn(x[row : row + 1, :length])
        assert_close(to_numpy(h)[row : row + 1], single_h, atol=1e-5)
        assert_close(to_numpy(c)[row : row + 1], single_c, atol=1e-5)


@pytest.mark.parametrize("cell_class", CELLS)
def test_bidirectional_and_model_contract(tmp_path, rng, cell_class):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    check_functional_model(
        lambda dtype=None: keras.layers.Bidirectional(
            keras.layers.RNN(cell_class(6, dtype=dtype), return_sequences=True), dtype=dtype
        ),
        [((5, 4), "float32")],
        [x],
        tmp_path,
    )


@pytest.mark.parametrize("cell_class", CELLS)
def test_cell_learns_to_remember_the_first_input(rng, cell_class):
    """The sign of step 0 must survive 12 noisy steps: needs the cell's memory."""
    x = rng.normal(size=(256, 12, 2)).astype("float32")
    y = (x[:, 0, 0] > 0).astype("float32")[:, None]
    inputs = keras.Input((12, 2))
    outputs = keras.layers.Dense(1)(keras.layers.RNN(cell_class(16))(inputs))
    fit_reduces_loss(
        keras.Model(inputs, outputs),
        x,
        y,
        keras.losses.BinaryCrossentropy(from_logits=True),
        epochs=40,
        factor=0.5,
        learning_rate=3e-2,
    )


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match=r"PeepholeLSTMCell.*units.*positive integer"):
        ks.layers.PeepholeLSTMCell(0)
    with pytest.raises(ValueError, match=r"CoupledLSTMCell.*units.*positive integer"):
        ks.layers.CoupledLSTMCell(2.5)


def numpy_elman(x, kernel, recurrent, bias):
    """Elman (1990): h_t = tanh(W_h x_t + U_h h_{t-1} + b_h)."""
    h = np.zeros((x.shape[0], recurrent.shape[0]))
    outputs = []
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ kernel + h @ recurrent + bias)
        outputs.append(h)
    return np.stack(outputs, 1)


def numpy_gru(x, kernel, recurrent, bias):
    """Cho et al. (2014, eq. 5-8), reset_after form (Keras stores the gates z, r, n side by side, biases b_i*, b_h*)."""
    h = np.zeros((x.shape[0], recurrent.shape[0]))
    b_input, b_hidden = bias
    outputs = []
    for t in range(x.shape[1]):
        xz, xr, xn = split_gates(x[:, t] @ kernel + b_input, 3)
        hz, hr, hn = split_gates(h @ recurrent + b_hidden, 3)
        z = sigmoid(xz + hz)  # update gate, Cho et al. eq. 6
        r = sigmoid(xr + hr)  # reset gate, eq. 5
        n = np.tanh(xn + r * hn)  # eq. 8, but r multiplies (W_hn h + b_hn)
        h = (1 - z) * n + z * h  # eq. 7
        outputs.append(h)
    return np.stack(outputs, 1)


def numpy_lstm(x, kernel, recurrent, bias):
    """LSTM (Gers et al., 2000): gates i, f, C~, o from [h_{t-1}, x_t]; C_t = f C_{t-1} + i C~; h = o tanh(C)."""
    units = recurrent.shape[0]
    h, c = np.zeros((x.shape[0], units)), np.zeros((x.shape[0], units))
    outputs = []
    for t in range(x.shape[1]):
        z_i, z_f, z_c, z_o = split_gates(x[:, t] @ kernel + h @ recurrent + bias, 4)
        c = sigmoid(z_f) * c + sigmoid(z_i) * np.tanh(z_c)
        h = sigmoid(z_o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1)


@pytest.mark.parametrize(
    "name, reference",
    [("rnn", numpy_elman), ("gru", numpy_gru), ("lstm", numpy_lstm)],
)
def test_keras_built_in_cells_compute_the_published_equations(rng, name, reference):
    """`recurrent_layer` maps `rnn`, `gru`, `lstm` onto Keras layers: check they are the published equations above."""
    from keras_seq.layers.recurrent import recurrent_layer

    x = rng.normal(size=(3, 6, 4)).astype("float32")
    layer = recurrent_layer(name, 5, return_sequences=True)
    layer(x)
    randomize(layer, rng)
    kernel, recurrent, bias = (to_numpy(w).astype("float64") for w in layer.weights)
    assert_close(layer(x), reference(x.astype("float64"), kernel, recurrent, bias), atol=1e-5)


@pytest.mark.parametrize("name", ["rnn", "gru", "lstm", "peephole_lstm", "coupled_lstm"])
def test_step_cell_matches_the_whole_sequence_layer(rng, name):
    """`make_cell` (step-by-step decoding) and `recurrent_layer` (training) compute the same recurrence."""
    from keras_seq.layers.recurrent import make_cell, recurrent_layer

    x = rng.normal(size=(3, 6, 4)).astype("float32")
    layer = recurrent_layer(name, 5, return_sequences=True)
    layer(x)
    randomize(layer, rng)
    cell = make_cell(name, 5)
    cell.build((3, 4))
    cell.set_weights(layer.get_weights())
    states = [keras.ops.zeros((3, 5))] * (1 if name in ("rnn", "gru") else 2)
    outputs = []
    for t in range(x.shape[1]):
        output, states = cell(x[:, t], states)
        outputs.append(to_numpy(output))
    assert_close(np.stack(outputs, 1), layer(x), atol=1e-5)


def test_make_cell_rejects_an_unknown_name():
    from keras_seq.layers.recurrent import make_cell

    with pytest.raises(ValueError, match=r"make_cell.*cell.*'lstm2'"):
        make_cell("lstm2", 4)
