"""The operations keras_seq computes differently on each Keras backend, chosen once at import.

Everything else in the package is written with `keras.ops`. Each operation here has its plain
path in `common` (`keras.ops`, or Keras' own layer or optimizer); `tensorflow`, `jax` and `torch`
override only what pays on that backend, each override saying what it replaces, why, and when it
can go. At import the running backend's module is chosen (as Keras chooses its own), and each name
below is its override or else the plain path; no other module of keras_seq asks which backend runs.
Keras' private API, which some operations reach, is listed in `keras_internals`.
"""

import keras

from keras_seq.backend import common, keras_internals

NAME = keras.backend.backend()


def _running_backend_module():
    if NAME == "tensorflow":
        from keras_seq.backend import tensorflow as module
    elif NAME == "jax":
        from keras_seq.backend import jax as module
    elif NAME == "torch":
        from keras_seq.backend import torch as module
    else:
        module = common
    return module


OVERRIDES = _running_backend_module()


def _chosen(name):
    return getattr(OVERRIDES, name, getattr(common, name))


# Keras' masks on tensors: its private API (see keras_internals).
get_keras_mask = keras_internals.get_keras_mask
set_keras_mask = keras_internals.set_keras_mask

# Values, compilation and seeds.
concrete_value = _chosen("concrete_value")
compile_for_inference = _chosen("compile_for_inference")
decoding_seed = _chosen("decoding_seed")
compiles_each_input_shape = _chosen("compiles_each_input_shape")
traces_saved_models = _chosen("traces_saved_models")
run_programs_on_calling_thread = _chosen("run_programs_on_calling_thread")
tf_data_without_autotuning = common.tf_data_without_autotuning

# Losses and metrics.
take_target = common.take_target
target_nll_from_logits = _chosen("target_nll_from_logits")
smoothed_nll_from_logits = _chosen("smoothed_nll_from_logits")
is_first_argmax = _chosen("is_first_argmax")

# Layers.
layer_normalization = _chosen("layer_normalization")
dropout = _chosen("dropout")
dense = _chosen("dense")
call_in_step = _chosen("call_in_step")
affine = _chosen("affine")

# Attention.
transpose = _chosen("transpose")
matmul_transposed = _chosen("matmul_transposed")
flash_attention_flag = _chosen("flash_attention_flag")
heads_first_attention = _chosen("heads_first_attention")
single_query_reads_whole_cache = _chosen("single_query_reads_whole_cache")
single_query_attention = _chosen("single_query_attention")

# Decoding.
slice_update = _chosen("slice_update")
top_k_in_blocks_pays = _chosen("top_k_in_blocks_pays")

# Training.
model_method_with_arrays_fed = _chosen("model_method_with_arrays_fed")
adam_update = _chosen("adam_update")

# Several devices and processes.
data_parallel_scope = _chosen("data_parallel_scope")
model_parallel_scope = _chosen("model_parallel_scope")
batch_split_ways = _chosen("batch_split_ways")
batch_parts = _chosen("batch_parts")
configured_processes = _chosen("configured_processes")
join_processes = _chosen("join_processes")
leave_processes = _chosen("leave_processes")
process_batches = _chosen("process_batches")

OPERATIONS = tuple(
    name
    for name in dir(common)
    if callable(getattr(common, name))
    and not name.startswith("_")
    and getattr(getattr(common, name), "__module__", None) == common.__name__
)
