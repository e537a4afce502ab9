"""LSTM variants as Keras RNN cells: peephole (Gers and Schmidhuber, 2000) and coupled (Greff et al., 2017).

Keras ships `SimpleRNN` (Elman, 1990), `GRU` (Cho et al., 2014, eq. 5-8; `reset_after=True` applies
the reset gate after the recurrent product) and `LSTM` (Hochreiter and Schmidhuber, 1997, with the
forget gate of Gers et al., 2000), with cuDNN paths; the two variants below are
missing from Keras 3, so they are written as cells for `keras.layers.RNN` (masking,
`Bidirectional`, `return_state`, `stateful` all come from Keras).

Gate weights follow the concatenated form `W . [h_{t-1}, x_t] + b`, stored as
an input kernel `(D, k*units)` and a recurrent kernel `(units, k*units)`, the gates
side by side in the order the docstrings give.
"""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq.layers._initializers import own_draw


class _GatedCell(keras.layers.Layer):
    """Shared configuration, weights and Keras cell protocol of the LSTM variants."""

    gates = ()  # names of the gate blocks, in kernel order

    def __init__(
        self,
        units,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        remember_bias=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = v.check_positive_int(v.owner_name(self), "units", units)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.remember_bias = float(remember_bias)
        self.state_size = [self.units, self.units]  # [h, C]
        self.output_size = self.units

    def _bias_initializer(self, shape, dtype=None):
        """Zeros (or `bias_initializer`), with `remember_bias` on the gate that keeps C_{t-1}.

        As the forget-gate bias of 1 (Jozefowicz et al., 2015): the cell starts out
        remembering, so gradients flow through C from the first step.
        """
        bias = self.bias_initializer((len(self.gates), self.units), dtype=dtype)
        remember = ops.one_hot(self.gates.index(self.remember_gate), len(self.gates), dtype=bias.dtype)
        return ops.reshape(bias + self.remember_bias * remember[:, None], shape)

    def build(self, input_shape):
        width = len(self.gates) * self.units
        if input_shape[-1] is None:
            v.fail(v.owner_name(self), "inputs", "a known feature size", f"shape {tuple(input_shape)}")
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], width), initializer=own_draw(self.kernel_initializer)
        )
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(self.units, width), initializer=own_draw(self.recurrent_initializer)
        )
        self.bias = self.add_weight(name="bias", shape=(width,), initializer=self._bias_initializer)

    def _gate_inputs(self, inputs, h):
        """`W . [h_{t-1}, x_t] + b` for every gate, split per gate."""
        z = ops.matmul(inputs, self.kernel) + ops.matmul(h, self.recurrent_kernel) + self.bias
        return dict(zip(self.gates, ops.split(z, len(self.gates), axis=-1)))

    def get_initial_state(self, batch_size=None):
        return [ops.zeros((batch_size, self.units), dtype=self.compute_dtype) for _ in range(2)]

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "remember_bias": self.remember_bias,
        }


@keras.saving.register_keras_serializable(package="keras_seq")
class PeepholeLSTMCell(_GatedCell):
    """LSTM whose gates also look at the cell state (peephole connections, Gers and Schmidhuber, 2000).

        f_t = sigmoid(W_f . [C_{t-1}, h_{t-1}, x_t] + b_f)
        i_t = sigmoid(W_i . [C_{t-1}, h_{t-1}, x_t] + b_i)
        C~_t = tanh(W_c . [h_{t-1}, x_t] + b_c)
        C_t = f_t * C_{t-1} + i_t * C~_t
        o_t = sigmoid(W_o . [C_t, h_{t-1}, x_t] + b_o)
        h_t = o_t * tanh(C_t)

    The peephole weights are full `(units, units)` matrices, as the concatenation
    `[C, h, x]` above writes them (Gers and Schmidhuber, 2000, use diagonal
    ones: a special case). Kernel order of the gates: i, f, c, o; the peephole
    kernel holds the C-parts of W_i, W_f, W_o.

    Args:
        units: size of h and C.
        remember_bias: added to b_f at initialisation.

    Example:
        >>> layer = keras.layers.RNN(PeepholeLSTMCell(32), return_sequences=True)

    References:
        Gers and Schmidhuber, 2000, "Recurrent nets that time and count".
    """

    gates = ("i", "f", "c", "o")
    remember_gate = "f"

    def build(self, input_shape):
        super().build(input_shape)
        self.peephole_kernel = self.add_weight(
            name="peephole_kernel", shape=(self.units, 3 * self.units), initializer=own_draw(self.recurrent_initializer)
        )

    def call(self, inputs, states, training=None):
        h, c = states
        z = self._gate_inputs(inputs, h)
        peek_i, peek_f, peek_o = ops.split(self.peephole_kernel, 3, axis=-1)
        f = ops.sigmoid(z["f"] + ops.matmul(c, peek_f))
        i = ops.sigmoid(z["i"] + ops.matmul(c, peek_i))
        c = f * c + i * ops.tanh(z["c"])
        o = ops.sigmoid(z["o"] + ops.matmul(c, peek_o))
        h = o * ops.tanh(c)
        return h, [h, c]


@keras.saving.register_keras_serializable(package="keras_seq")
class CoupledLSTMCell(_GatedCell):
    """LSTM with a single update gate in place of input and forget gates (Greff et al., 2017, CIFG).

        u_t = sigmoid(W_u . [h_{t-1}, x_t] + b_u)
        C~_t = tanh(W_c . [h_{t-1}, x_t] + b_c)
        C_t = u_t * C_{t-1} + (1 - u_t) * C~_t
        o_t = sigmoid(W_o . [h_{t-1}, x_t] + b_o)
        h_t = o_t * tanh(C_t)

    "We only forget when we are going to input something in its place": one gate
    fewer than the LSTM (Greff et al., 2017, the "coupled input and forget gate"
    variant). Kernel order of the gates: u, c, o.

    Args:
        units: size of h and C.
        remember_bias: added to b_u at initialisation.

    References:
        Greff et al., 2017, "LSTM: A search space odyssey".
    """

    gates = ("u", "c", "o")
    remember_gate = "u"

    def call(self, inputs, states, training=None):
        h, c = states
        z = self._gate_inputs(inputs, h)
        u = ops.sigmoid(z["u"])
        c = u * c + (1.0 - u) * ops.tanh(z["c"])
        h = ops.sigmoid(z["o"]) * ops.tanh(c)
        return h, [h, c]


class _Cell:
    """How a `cell` name is built: its one-step cell, the Keras layer that runs it over a sequence, its states."""

    def __init__(self, step, sequence=None, states=1, **options):
        self.step, self.sequence, self.states, self.options = step, sequence, states, options


# One entry per cell name. Keras' own layers keep their fused (cuDNN) kernels; the
# two LSTM variants above run in `keras.layers.RNN`.
#   rnn: the Elman RNN (Elman, 1990);
#   gru: Cho et al. (2014, eq. 5-8) with the reset gate after the recurrent product
#        (it multiplies `W_hn h + b_hn`: `reset_after=True`, the cuDNN-compatible form);
#   lstm: Hochreiter and Schmidhuber (1997) with the forget gate of Gers et al. (2000).
_CELLS = {
    "rnn": _Cell(keras.layers.SimpleRNNCell, keras.layers.SimpleRNN),
    "gru": _Cell(keras.layers.GRUCell, keras.layers.GRU, reset_after=True),
    "lstm": _Cell(keras.layers.LSTMCell, keras.layers.LSTM, states=2),
    "peephole_lstm": _Cell(PeepholeLSTMCell, states=2),
    "coupled_lstm": _Cell(CoupledLSTMCell, states=2),
}
CELLS = tuple(_CELLS)


def make_cell(cell, units, **kwargs):
    """The one-step cell for a `cell` name (one of `CELLS`), for step-by-step loops; `kwargs` go to the cell."""
    entry = _CELLS[v.check_choice("make_cell", "cell", cell, CELLS)]
    return entry.step(units, **entry.options, **kwargs)


def recurrent_layer(cell, units, return_sequences=False, return_state=False, stateful=False, name=None):
    """The Keras recurrent layer for a `cell` name: the fused Keras layer where there is one, else `RNN(make_cell)`."""
    entry = _CELLS[v.check_choice("recurrent_layer", "cell", cell, CELLS)]
    options = dict(return_sequences=return_sequences, return_state=return_state, stateful=stateful, name=name)
    if entry.sequence is None:
        return keras.layers.RNN(make_cell(cell, units), **options)
    return entry.sequence(units, **entry.options, **options)


def state_count(cell):
    """How many state tensors a cell carries: h for `rnn`/`gru`, h and C for the LSTMs."""
    return _CELLS[v.check_choice("state_count", "cell", cell, CELLS)].states
