"""Keras layers for sequence models (all registered serializable)."""

from keras_seq.layers.alignment_attention import BahdanauAttention, LuongAttention
from keras_seq.layers.embedding import (
    PositionEmbedding,
    SinusoidalPositionalEncoding,
    TokenAndPositionEmbedding,
    sinusoidal_position_encoding,
)
from keras_seq.layers.multi_head_attention import MultiHeadAttention
from keras_seq.layers.pooling import SequencePooling
from keras_seq.layers.recurrent import CoupledLSTMCell, PeepholeLSTMCell
from keras_seq.layers.sampled_softmax import SampledSoftmax
from keras_seq.layers.transformer import TransformerDecoderBlock, TransformerEncoderBlock

__all__ = [
    "BahdanauAttention",
    "CoupledLSTMCell",
    "LuongAttention",
    "MultiHeadAttention",
    "PeepholeLSTMCell",
    "PositionEmbedding",
    "SampledSoftmax",
    "SequencePooling",
    "SinusoidalPositionalEncoding",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "sinusoidal_position_encoding",
]
