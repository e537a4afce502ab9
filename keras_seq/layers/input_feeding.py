"""The attentional decoder of Bahdanau et al. (2015, sec. 3.1, eq. 5-6, appendix A.1.2), step by step."""

import keras
from keras import ops

from keras_seq import _validation as v
from keras_seq import backend
from keras_seq.layers.alignment_attention import ATTENTIONS, make_attention
from keras_seq.layers.recurrent import CELLS, make_cell


@keras.saving.register_keras_serializable(package="keras_seq")
class InputFeedingDecoder(keras.layers.Layer):
    """Attend with the previous state, then step: Bahdanau et al. (2015, sec. 3.1) exactly.

    For each target position i, from the previous decoder state `s_{i-1}` (h of an
    LSTM) and the previous target embedding `y_{i-1}`:

    * `e_ij = a(s_{i-1}, h_j)`, for Bahdanau `v_a^T tanh(W_a s_{i-1} + U_a h_j)` (appendix A.1.2);
    * `alpha_ij = softmax_j(e_ij)` over the real source positions (eq. 6);
    * `c_i = sum_j alpha_ij h_j` (eq. 5);
    * `s_i = f(s_{i-1}, y_{i-1}, c_i)` (sec. 3.1): the recurrent cell `f` reads `[y_{i-1}; c_i]`.

    A loop over steps (`keras.ops.scan`): the context of step i needs the state of
    step i-1, so no fused whole-sequence kernel applies. ("Input feeding" here is
    Bahdanau's context fed into the recurrence, not Luong et al.'s feeding back of the
    previous attentional vector.)

    Call arguments:
        inputs: `(B, T, E)` target embeddings `y_0 .. y_{T-1}`.
        annotations: `(B, S, Dh)` encoder outputs `h_j`.
        initial_state: list of `(B, units)` states `s_0` (one, or h and C for an LSTM).
        source_mask: `(B, S)`, True at real source positions; defaults to the
            annotations' Keras mask.

    Returns:
        states `(B, T, units)`, contexts `(B, T, Dh)` and weights `(B, T, S)`.
    """

    def __init__(self, cell="gru", units=256, attention="bahdanau", **kwargs):
        super().__init__(**kwargs)
        owner = v.owner_name(self)
        self.cell_name = v.check_choice(owner, "cell", cell, CELLS)
        self.units = v.check_positive_int(owner, "units", units)
        self.attention_name = v.check_choice(owner, "attention", attention, ATTENTIONS)
        self.cell = make_cell(cell, units, dtype=self.dtype_policy, name="cell")
        self.attention = make_attention(attention, units, dtype=self.dtype_policy)

    def build(self, inputs_shape, annotations_shape, initial_state_shape=None, source_mask_shape=None):
        batch, embedding_dim, annotation_dim = inputs_shape[0], inputs_shape[-1], annotations_shape[-1]
        self.attention.build((batch, self.units), annotations_shape)
        self.cell.build((batch, embedding_dim + annotation_dim))

    def step(self, y_previous, states, annotations, source_mask, projected_keys=None):
        """One position: `(s_i, [states], c_i, alpha_i)` from `y_{i-1} (B, E)` and `states` (`s_{i-1}`);
        `projected_keys`: the attention's `project_keys(annotations)`, made once for every step (or None)."""
        context, weights = self.attention(
            states[0], annotations, mask=source_mask, return_attention_scores=True, projected_keys=projected_keys
        )
        output, states = self.cell(ops.concatenate([y_previous, context], axis=-1), states)
        return output, list(states), context, weights

    def call(self, inputs, annotations, initial_state, source_mask=None):
        if source_mask is None:
            source_mask = backend.get_keras_mask(annotations)

        count = len(initial_state)
        projected_keys = self.attention.project_keys(annotations)  # once, not at every step

        def body(carry, y_previous):
            output, states, context, weights = self.step(
                y_previous, list(carry[:count]), annotations, source_mask, projected_keys
            )
            packed = ops.concatenate(
                [output, ops.cast(context, output.dtype), ops.cast(weights, output.dtype)], axis=-1
            )
            # Keras' TensorFlow `scan` needs the per-step outputs shaped like the carry: emit the carry.
            carry = (*states, packed)
            return carry, carry

        batch, source_length = ops.shape(annotations)[0], ops.shape(annotations)[1]
        packed = ops.zeros((batch, self.units + annotations.shape[-1] + source_length), initial_state[0].dtype)
        _, outputs = ops.scan(body, (*initial_state, packed), ops.transpose(inputs, (1, 0, 2)))
        outputs = ops.transpose(outputs[-1], (1, 0, 2))
        context_end = self.units + annotations.shape[-1]
        return outputs[..., : self.units], outputs[..., self.units : context_end], outputs[..., context_end:]

    def compute_output_shape(self, inputs_shape, annotations_shape, initial_state_shape=None, source_mask_shape=None):
        batch, length = inputs_shape[0], inputs_shape[1]
        return (
            (batch, length, self.units),
            (batch, length, annotations_shape[-1]),
            (batch, length, annotations_shape[1]),
        )

    def get_config(self):
        return {**super().get_config(), "cell": self.cell_name, "units": self.units, "attention": self.attention_name}
