"""JAX's overrides of `keras_seq.backend.common`: each says what it replaces, why, and when it can go.

Most serve XLA on a CPU, where JAX compiles some patterns less well than on an accelerator; the attention
layouts fall back to the plain path on a GPU or TPU, the arg-max test and the dropout masks run on every device.
"""

import contextlib

import jax
import keras
import numpy as np
from keras import ops

from keras_seq.backend import common, threefry


def concrete_value(x):
    """`x` as a NumPy array if its value is known now, else None (a tracer inside `jax.jit`)."""
    known = common.concrete_value(x)
    if known is not None or x is None or isinstance(x, (keras.KerasTensor, jax.core.Tracer)):
        return known
    return np.asarray(x)


def compile_for_inference(model, function):
    """`function(*tensors)` compiled once by `jax.jit`, the model's variables passed in as arguments through
    `keras.StatelessScope` (so they are not baked into the program as constants)."""
    variables = list(model.variables)

    @jax.jit
    def stateless(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*args)

    return lambda *args: stateless([variable.value for variable in variables], *args)


def is_first_argmax(scores, targets):
    """Whether any score beats the target's (larger, or as large at a smaller index), in one fused pass.

    Replaces: `argmax(scores) == targets`, which XLA on a CPU runs as a paired (value, index) reduction.
    Remove when XLA:CPU's argmax reduction is as fast as a plain one.
    """
    target_score = ops.expand_dims(common.take_target(scores, targets), -1)
    earlier = ops.expand_dims(ops.arange(ops.shape(scores)[-1], dtype="int32"), 0) < ops.expand_dims(targets, -1)
    beaten = ops.where(earlier, scores >= target_score, scores > target_score)
    return ops.logical_not(ops.any(beaten, axis=-1))


def dropout(layer, inputs, keras_call):
    """Keras' JAX dropout mask (`jax.random.bernoulli` of the layer's next seed) from `threefry`'s rounds
    written out, which XLA fuses into one kernel; Keras' layer where JAX's generator is not Threefry.

    Replaces: `jax.random.bernoulli`, whose Threefry rounds JAX lowers on a CPU as a loop writing whole
    arrays at every turn. Remove when the installed JAX unrolls Threefry on the CPU itself
    (`tests/layers/test_dropout.py` times both).
    """
    if not threefry.is_jax_default():
        return keras_call()
    seed = layer.seed_generator.next()
    noise_shape = layer.noise_shape
    shape = inputs.shape if noise_shape is None else [i if n is None else n for i, n in zip(inputs.shape, noise_shape)]
    keep = 1.0 - layer.rate
    mask = jax.numpy.broadcast_to(threefry.bernoulli(seed, keep, tuple(shape)), inputs.shape)
    return jax.lax.select(mask, inputs / keep, jax.numpy.zeros_like(inputs))


def _on_the_cpu():
    return jax.default_backend() == "cpu"


def heads_first_attention():
    """On a CPU, yes: einsum projections into the heads-first layout and the scores as batched products,
    softmax in the graph, make a training step of causal self-attention faster than `(B, T, H, d)` projections
    fed to `jax.nn.dot_product_attention`; and XLA:CPU cannot compile that for float16 inputs. Elsewhere the
    fused kernel (cuDNN or XLA's). Remove when XLA:CPU's `dot_product_attention` is as fast and takes float16."""
    return _on_the_cpu()


def single_query_reads_whole_cache():
    """On a CPU, yes: XLA copies the keys and the values out of the just-updated cache at every step (one
    fusion per slice), and reading the cache whole avoids the copies. Remove when XLA:CPU reads slices of an
    updated buffer in place."""
    return _on_the_cpu()


def compiles_each_input_shape():
    """Yes: `jax.jit` compiles the step for each input shape."""
    return True


def run_programs_on_calling_thread():
    """Have JAX run its CPU programs on the calling thread (`jax_cpu_enable_async_dispatch` off), so that their
    temporaries come from the main thread's heap (see `recipes.memory`); takes effect only before
    JAX's first computation, and Python then waits for each step instead of running ahead."""
    jax.config.update("jax_cpu_enable_async_dispatch", False)


def data_parallel_scope():
    """Keras' `DataParallel` distribution over every device, set globally (Keras' JAX distribution has no
    scope); each process feeds its own rows of every batch (`process_batches`), so Keras shards no data."""
    keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
    return contextlib.nullcontext()


def model_parallel_scope(make_distribution):
    """`make_distribution()` set globally, each process feeding its own rows as for `data_parallel_scope`."""
    distribution = make_distribution()
    distribution.auto_shard_dataset = False
    keras.distribution.set_distribution(distribution)
    return contextlib.nullcontext()


def batch_split_ways():
    """The size of the current `keras.distribution`'s batch axis on its device mesh (1 without one): JAX places
    a batch on the devices only in equal parts."""
    distribution = keras.distribution.distribution()
    if distribution is None or distribution.batch_dim_name is None:
        return 1
    mesh = distribution.device_mesh
    return int(mesh.shape[list(mesh.axis_names).index(distribution.batch_dim_name)])


def batch_parts(processes):
    """Every device of every process takes an equal part."""
    return 1 if processes == 1 else jax.device_count()


def join_processes(coordinator, count, index):
    """`keras.distribution.initialize`: JAX's distributed service, `coordinator` being process 0's address."""
    keras.distribution.initialize(coordinator, count, index)
    return None


def leave_processes():
    """Stop JAX's distributed service, so no process waits at exit for process 0's export, and forget the
    distribution, so the saved model loads back on this process's own devices."""
    jax.distributed.shutdown()
    keras.distribution.set_distribution(None)


def process_batches(batches, pad_rows, take_rows):
    """Each batch padded into equal parts for the devices, then this process's rows of it."""
    return take_rows(pad_rows(batches, batch_split_ways()), jax.process_count(), jax.process_index())
