"""Keras layers for sequence models (all registered serializable)."""

from keras_seq.layers.alignment_attention import BahdanauAttention, LuongAttention
from keras_seq.layers.dropout import Dropout
from keras_seq.layers.embedding import (
    PositionEmbedding,
    ScaledEmbedding,
    SinusoidalPositionalEncoding,
    TiedLogits,
    TokenAndPositionEmbedding,
    sinusoidal_position_encoding,
)
from keras_seq.layers.input_feeding import InputFeedingDecoder
from keras_seq.layers.masking import PaddingMaskFromIds
from keras_seq.layers.multi_head_attention import MultiHeadAttention
from keras_seq.layers.normalization import LayerNormalization
from keras_seq.layers.pooling import SequencePooling
from keras_seq.layers.positionwise import ConcatenateCondition, PositionwiseDense
from keras_seq.layers.recurrent import CoupledLSTMCell, PeepholeLSTMCell
from keras_seq.layers.sampled_softmax import SampledSoftmax
from keras_seq.layers.transformer import TransformerDecoderBlock, TransformerEncoderBlock

__all__ = [
    "BahdanauAttention",
    "ConcatenateCondition",
    "CoupledLSTMCell",
    "Dropout",
    "InputFeedingDecoder",
    "LayerNormalization",
    "LuongAttention",
    "MultiHeadAttention",
    "PaddingMaskFromIds",
    "PeepholeLSTMCell",
    "PositionEmbedding",
    "PositionwiseDense",
    "SampledSoftmax",
    "ScaledEmbedding",
    "SequencePooling",
    "SinusoidalPositionalEncoding",
    "TiedLogits",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "sinusoidal_position_encoding",
]
