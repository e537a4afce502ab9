"""The one place where keras_seq reaches past `keras.ops` into backend specifics.

Everything else in the package is written with `keras.ops`; what lives here has no
backend-agnostic public equivalent in Keras 3:

* the Keras mask carried on a tensor (`_keras_mask`), which Keras' own layers and
  losses read and write through `keras.src.backend`;
* telling a concrete (eager) value from a traced one, so that range checks on ids
  and positions can raise a clear `ValueError` eagerly and stay out of compiled
  graphs, where no Python exception can be raised;
* which attention layout is fastest on the device at hand (`heads_first_attention`,
  `single_query_reads_whole_cache`), and which flash-attention flag to hand Keras
  (`flash_attention_flag`);
* the `tf.data` options of pipelines too small to autotune (`tf_data_without_autotuning`), and
  whether a train step is compiled anew for each input shape (`compiles_each_input_shape`);
* the fastest exact cross-entropy of each backend (`target_nll_from_logits`, with label
  smoothing `smoothed_nll_from_logits`), the fastest test of a target against the arg-max
  (`is_first_argmax`), and the form of the seed a compiled decoder takes (`decoding_seed`);
* JAX's dropout masks from a generator XLA fuses (`fused_threefry_available`, `threefry_dropout`), torch's
  from uniform draws on a CPU (`torch_cpu_dropout`), eager torch's projections, cache writes and one-query
  attention without Keras' dispatch (`affine`, `slice_update`, `torch_single_query_attention`), PyTorch's
  fused Adam kernel on a CPU (`torch_adam_update`) and TensorFlow's (`tf_adam_update`), and TensorFlow's
  transposes without oneDNN's reorder (`transpose`, `matmul_transposed`) and layer normalisation's gradient
  (`tf_layer_normalization`).
"""

import math
import weakref

import numpy as np
import keras
from keras import ops
from keras.src.backend.common import masking as _masking


def get_keras_mask(x):
    """The mask Keras attached to `x`, or None."""
    return _masking.get_keras_mask(x)


def set_keras_mask(x, mask):
    """Attach `mask` to `x` the way Keras layers and losses expect it."""
    _masking.set_keras_mask(x, mask)


def concrete_value(x):
    """`x` as a NumPy array if its value is known now, else None (traced/symbolic)."""
    if x is None:
        return None
    if isinstance(x, (int, float, np.integer, np.floating, np.ndarray)):
        return np.asarray(x)
    if isinstance(x, keras.KerasTensor):
        return None
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly() or not hasattr(x, "numpy"):
            return None
        return x.numpy()
    if backend == "jax":
        import jax

        if isinstance(x, jax.core.Tracer):
            return None
        return np.asarray(x)
    if backend == "torch":
        import torch

        if torch.compiler.is_compiling():
            return None
        return x.detach().cpu().numpy()
    return None


def compile_for_inference(model, function):
    """`function(*tensors)` compiled for repeated inference calls on the model's backend.

    XLA via `tf.function(jit_compile=True)` on TensorFlow; `jax.jit` on JAX, with the
    model's variables passed in as arguments through `keras.StatelessScope` (so they
    are not baked into the program as constants); torch runs eagerly without autograd.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True, reduce_retracing=True, autograph=False)  # keras.ops loops: nothing to convert
    if backend == "jax":
        import jax

        variables = list(model.variables)

        @jax.jit
        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return function(*args)

        return lambda *args: stateless([variable.value for variable in variables], *args)
    import torch

    def no_grad(*args):
        with torch.no_grad():
            return function(*args)

    return no_grad


def take_target(values, targets):
    """`values[..., targets]`: `(..., V), (...) -> (...)`."""
    return ops.squeeze(ops.take_along_axis(values, ops.expand_dims(targets, -1), axis=-1), -1)


def target_nll_from_logits(logits, targets):
    """`-log softmax(logits)[target]` per position, from float32 logits, by each backend's fastest exact form.

    On TensorFlow `logsumexp(z) - z_target` with its gradient written out (`_tf_cross_entropy`),
    which on a CPU outruns TensorFlow's fused sparse softmax cross-entropy kernel; on JAX the
    same formula, which leaves no log-softmax tensor for XLA to write and read back; on torch a
    gather from the log-softmax, whose gradient torch writes in place (Keras' own torch op
    moves the class axis and copies the logits twice). Measured: benchmarks/RESULTS.md.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tf_cross_entropy(logits, targets, 0.0)
    if backend == "jax":
        return ops.logsumexp(logits, axis=-1) - take_target(logits, targets)
    return -take_target(ops.log_softmax(logits, axis=-1), targets)


def smoothed_nll_from_logits(logits, targets, epsilon):
    """`(1 - epsilon) * -log p(target) + epsilon * mean_k(-log p(k))` per position, from float32 logits.

    Written as `logsumexp(z) - (1 - epsilon) * z_target - epsilon * mean(z)`: one pass for the
    normaliser, none for a log-softmax tensor. On torch PyTorch's `cross_entropy` with
    `label_smoothing`, which computes the same in one kernel and its gradient in another. On
    TensorFlow the same formula with its gradient `softmax(z) - q'` written out
    (`_tf_cross_entropy`), since TensorFlow's own gradient of the target's gather scatters it
    into a zeroed copy of the logits.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tf_cross_entropy(logits, targets, epsilon)
    if backend == "torch":
        import torch

        vocabulary_size = logits.shape[-1]
        flat = torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocabulary_size), targets.reshape(-1).long(), reduction="none", label_smoothing=epsilon
        )
        return flat.reshape(targets.shape)
    return ops.logsumexp(logits, axis=-1) - (1.0 - epsilon) * take_target(logits, targets) - epsilon * ops.mean(logits, axis=-1)


def _tf_cross_entropy(logits, targets, epsilon):
    """`logsumexp(z) - (1 - epsilon) z_target - epsilon mean(z)` on TensorFlow, its gradient `softmax(z) - q'`
    (Szegedy et al., 2016, sec. 7) from the normaliser's exponentials, `q'` being `(1 - epsilon) [k = target] + epsilon / V`.

    One pass for the exponentials serves the value and the gradient, which builds `q'` once rather
    than scattering the gather's gradient into zeros; `epsilon` is a Python float.
    """
    import tensorflow as tf

    vocabulary_size = tf.shape(logits)[-1]
    targets = tf.cast(targets, tf.int32)  # the integer types `tf.gather` and `tf.one_hot` take

    @tf.custom_gradient
    def cross_entropy(logits):
        largest = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
        exponentials = tf.exp(logits - largest)
        total = tf.reduce_sum(exponentials, axis=-1)
        target_logit = tf.gather(logits, targets[..., None], batch_dims=len(targets.shape))[..., 0]
        losses = largest[..., 0] + tf.math.log(total) - (1.0 - epsilon) * target_logit
        if epsilon:
            losses -= epsilon * tf.reduce_mean(logits, axis=-1)

        def gradient(upstream):
            off_target = epsilon / tf.cast(vocabulary_size, tf.float32)
            targets_smoothed = tf.one_hot(targets, vocabulary_size, on_value=1.0 - epsilon + off_target, off_value=off_target)
            return (exponentials * (1.0 / total)[..., None] - targets_smoothed) * upstream[..., None]

        return losses, gradient

    return cross_entropy(logits)


def tf_layer_normalization(x, gamma, beta, epsilon):
    """Keras' layer normalisation over the last axis on TensorFlow (float32), its gradient written out.

    The output is Keras' `x * inv + (beta - mean * inv)`, `inv = gamma / sqrt(var + epsilon)`. The
    gradient, with `x_hat = (x - mean) / sqrt(var + epsilon)` and `g = dy * gamma`:
    `dx = (g - mean(g) - x_hat mean(g x_hat)) / sqrt(var + epsilon)`, `dgamma = sum(dy x_hat)`,
    `dbeta = sum(dy)` over the leading axes: a handful of whole-tensor operations, where TensorFlow
    differentiates Keras' moments and broadcasts operation by operation (each broadcast tiled back).
    """
    import tensorflow as tf

    @tf.custom_gradient
    def normalized(x, gamma, beta):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centred = x - mean
        reciprocal_deviation = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)
        inv = reciprocal_deviation * gamma

        def gradient(upstream):
            x_hat = centred * reciprocal_deviation
            scaled = upstream * gamma
            dx = reciprocal_deviation * (scaled - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                                         - x_hat * tf.reduce_mean(scaled * x_hat, axis=-1, keepdims=True))
            leading = list(range(len(x.shape) - 1))
            return dx, tf.reduce_sum(upstream * x_hat, axis=leading), tf.reduce_sum(upstream, axis=leading)

        return x * inv + (beta - mean * inv), gradient

    # Tensors, not variables, go in: the gradient then reaches the variables through their reads.
    return normalized(x, tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta))


def is_first_argmax(scores, targets):
    """Whether each target (in `[0, V)`) is `argmax(scores, -1)`, the first index of the largest score:
    `(..., V), (...) -> (...)` bool.

    On JAX, one fused pass that asks whether any score beats the target's (larger, or as
    large at a smaller index), since XLA on the CPU runs `argmax` as a paired (value, index)
    reduction. On TensorFlow `tf.argmax` itself, without the passes in which Keras' op first
    rewrites every -0.0; elsewhere `argmax(scores) == targets`.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.equal(tf.argmax(scores, axis=-1, output_type=tf.int32), tf.cast(targets, tf.int32))
    if backend != "jax":
        return ops.equal(ops.cast(ops.argmax(scores, axis=-1), "int32"), targets)
    target_score = ops.expand_dims(take_target(scores, targets), -1)
    earlier = ops.expand_dims(ops.arange(ops.shape(scores)[-1], dtype="int32"), 0) < ops.expand_dims(targets, -1)
    beaten = ops.where(earlier, scores >= target_score, scores > target_score)
    return ops.logical_not(ops.any(beaten, axis=-1))


def fused_threefry_available():
    """Whether `threefry_dropout` gives Keras' own dropout masks: on JAX, with Threefry as its default generator."""
    if keras.backend.backend() != "jax":
        return False
    from keras_seq import _threefry

    return _threefry.is_jax_default()


def threefry_dropout(inputs, rate, noise_shape, seed):
    """Keras' JAX dropout (`keras.src.backend.jax.random.dropout`) of `inputs` for the uint32 `(2,)` `seed`.

    The mask is `jax.random.bernoulli(seed, 1 - rate, noise_shape)` drawn by `_threefry.bernoulli`;
    a None in `noise_shape` takes the input's size, and the mask broadcasts over the input.
    """
    import jax

    from keras_seq import _threefry

    shape = inputs.shape if noise_shape is None else [i if n is None else n for i, n in zip(inputs.shape, noise_shape)]
    keep = 1.0 - rate
    mask = jax.numpy.broadcast_to(_threefry.bernoulli(seed, keep, tuple(shape)), inputs.shape)
    return jax.lax.select(mask, inputs / keep, jax.numpy.zeros_like(inputs))


def is_torch_on_the_cpu(x):
    """Whether `x` is a torch tensor on a CPU (the Keras backend is torch and the tensor lives there)."""
    return keras.backend.backend() == "torch" and getattr(getattr(x, "device", None), "type", None) == "cpu"


def torch_cpu_dropout(inputs, rate):
    """Dropout of the torch CPU tensor `inputs`: kept where `torch.rand >= rate`, scaled by `1 / (1 - rate)`.

    The draw is from PyTorch's global generator, as in Keras' unseeded torch dropout
    (`torch.nn.functional.dropout`), whose `bernoulli_` takes about twice as long on a CPU
    as a uniform draw and a comparison. The uniforms are float32 whatever the input's dtype.
    """
    import torch

    keep = torch.rand(inputs.shape, dtype=torch.float32, device=inputs.device) >= rate
    return inputs * (keep.to(inputs.dtype) * (1.0 / (1.0 - rate)))


def affine(x, kernel, bias=None, contracted_axes=1):
    """`x`'s last `contracted_axes` axes contracted with `kernel`'s first as many, plus `bias`.

    `(..., *C), (*C, *O), (*O) -> (..., *O)`: a projection's `x @ W + b` with the kernel kept
    in its layer's shape (e.g. `(D, H, d)` for attention heads). On torch one `addmm` over the
    rows of `x`, called directly: the same through `keras.ops` (reshapes, product, sum) pays
    Keras' dispatch on every eager call. Elsewhere, and for mixed dtypes (which `keras.ops`
    promotes), `keras.ops`.
    """
    contracted = kernel.shape[:contracted_axes]
    features, outputs = math.prod(contracted), tuple(kernel.shape[contracted_axes:])
    if eager_ops() and len({t.dtype for t in map(_torch_value, (x, kernel, bias)) if t is not None}) == 1:
        import torch

        rows, matrix = x.reshape(-1, features), _torch_value(kernel).reshape(features, -1)
        y = torch.mm(rows, matrix) if bias is None else torch.addmm(_torch_value(bias).reshape(-1), rows, matrix)
        return y.reshape(*x.shape[: x.ndim - contracted_axes], *outputs)
    leading = ops.shape(x)[: len(x.shape) - contracted_axes]
    if contracted_axes > 1:
        x = ops.reshape(x, (*leading, features))
    y = ops.matmul(x, ops.reshape(kernel, (features, -1)) if len(kernel.shape) > 2 or contracted_axes > 1 else kernel)
    if bias is not None:
        y = y + (ops.reshape(bias, (-1,)) if len(outputs) > 1 else bias)
    return ops.reshape(y, (*leading, *outputs)) if len(outputs) > 1 else y


def transpose(x, axes):
    """`keras.ops.transpose(x, axes)`; on TensorFlow a one-operand `tf.einsum` that permutes the axes.

    With oneDNN on (TensorFlow's default on x86), `tf.transpose` runs as oneDNN's reorder, a
    general layout conversion set up anew at each call, where the einsum kernel permutes with
    Eigen's own transpose; the einsum's gradient is again an einsum.
    """
    if keras.backend.backend() != "tensorflow":
        return ops.transpose(x, axes)
    import tensorflow as tf

    letters = "abcdefghijklmnopqrstuvwxyz"[: len(x.shape)]
    return tf.einsum(f"{letters}->{''.join(letters[axis] for axis in axes)}", x)


def matmul_transposed(a, b):
    """`a @ swapaxes(b, -1, -2)`; on TensorFlow one `tf.linalg.matmul(..., transpose_b=True)` where both
    are of one dtype and rank 2 or more.

    TensorFlow's graph optimiser folds a transpose into the forward product but not into its
    gradient, which then transposes `b`'s gradient as an operation of its own (oneDNN's reorder,
    see `transpose`); the product's own gradient with `transpose_b` needs none.
    """
    if keras.backend.backend() != "tensorflow" or a.dtype != b.dtype or min(len(a.shape), len(b.shape)) < 2:
        return ops.matmul(a, ops.swapaxes(b, -1, -2))
    import tensorflow as tf

    return tf.linalg.matmul(a, b, transpose_b=True)


def slice_update(x, start_indices, updates):
    """`keras.ops.slice_update(x, start_indices, updates)`: a copy of `x` with `updates` written from `start_indices`.

    On torch the copy is written through slices at the indices read as Python ints: Keras'
    torch op, given a tensor index (a decoding step's position), builds index grids and
    scatters through them on every call, in every block's cache.
    """
    if eager_ops():
        start = [int(index) for index in start_indices]
        written = x.clone()
        written[tuple(slice(s, s + n) for s, n in zip(start, updates.shape))] = updates
        return written
    return ops.slice_update(x, start_indices, updates)


def torch_single_query_attention(q, k, v, mask, rows_may_be_empty, scale, masked_score):
    """The float32 context `(B, 1, H, dv)` of one query per row `(B, 1, H, dk)` over keys and values `(B, S, H, d)`,
    as torch calls: `MultiHeadAttention._single_query_attention`'s products, mask and softmax
    (`masking.masked_softmax`: `masked_score` at masked keys, zero weights for a row with none), without
    Keras' dispatch for each on eager torch. `mask` is `(B or 1, S, H or 1)`, as the scores `(B, S, H)`.
    """
    import torch

    scores = (q.float() * k.float()).sum(-1) * scale
    if mask is not None:
        scores = torch.where(mask, scores, masked_score)
    weights = torch.softmax(scores, dim=1)
    if mask is not None and rows_may_be_empty:
        weights = torch.where(mask, weights, 0.0)
    return (weights.unsqueeze(-1) * v.float()).sum(1, keepdim=True)


def eager_ops():
    """Whether `keras.ops` run one call at a time, each paying Keras' dispatch (torch: no graph is traced)."""
    return keras.backend.backend() == "torch"


def _torch_value(x):
    """The torch tensor of `x`, a tensor or a Keras variable (read as the autocast scope says)."""
    return x.value if isinstance(x, keras.Variable) else x


def torch_adam_update(optimizer, gradients, variables, learning_rate):
    """Keras' Adam step of `optimizer` over torch `variables`: PyTorch's fused kernel on a CPU, else Keras' own.

    PyTorch's Adam divides by `sqrt(v) / sqrt(1 - beta_2^t) + epsilon` where Keras divides by
    `(sqrt(v) + epsilon) / sqrt(1 - beta_2^t)`: handing it `epsilon / sqrt(1 - beta_2^t)` makes
    the two updates one. Elsewhere (a GPU, `amsgrad`, other dtypes) Keras' multi-tensor update
    runs, the one `keras.optimizers.Adam` runs on torch.
    """
    import torch
    from keras.src.backend.torch.optimizers.torch_adam import Adam as KerasTorchAdam
    from torch.optim.adam import adam as functional_adam

    tensors = _fused_adam_tensors(optimizer, variables)
    fused = not optimizer.amsgrad and all(
        p.device.type == "cpu" and p.dtype == torch.float32 and g.dtype == torch.float32
        for p, g in zip(tensors["parameters"], gradients)
    )
    with torch.no_grad():
        if not fused:
            return KerasTorchAdam._parallel_update_step(optimizer, gradients, variables, learning_rate)
        step = int(keras.ops.convert_to_numpy(optimizer.iterations)) + 1  # a tensor, not a variable, when accumulating
        steps = tensors["steps"]
        torch._foreach_zero_(steps)
        torch._foreach_add_(steps, float(step - 1))  # advanced to `step` by the call
        functional_adam(
            tensors["parameters"], list(gradients), tensors["momentums"], tensors["velocities"], [], steps,
            fused=True, amsgrad=False, beta1=optimizer.beta_1, beta2=optimizer.beta_2, lr=float(learning_rate),
            weight_decay=0.0, eps=optimizer.epsilon / math.sqrt(1 - optimizer.beta_2**step), maximize=False,
        )


def tf_adam_update(optimizer, gradients, variables, learning_rate):
    """Keras' Adam step of `optimizer` by TensorFlow's `ResourceApplyAdam` kernel, one per variable; False if not taken.

    The kernel computes Keras' update (`alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)`,
    `var -= alpha m / (sqrt(v) + epsilon)`, algorithm 1 of Kingma and Ba, 2015) in one
    operation where Keras' own runs a chain of small ones per variable, the powers of the betas
    among them. A sparse (`tf.IndexedSlices`) gradient gets Keras' own update; none is fused
    for `amsgrad`, a variable other than float32, or with a `tf.distribute` strategy (in scope,
    or holding the variables), whose replicas Keras' own update reduces and merges.
    """
    import tensorflow as tf

    distributed = tf.distribute.has_strategy() or any(
        isinstance(variable.value, tf.distribute.DistributedValues) for variable in variables
    )
    if optimizer.amsgrad or distributed or any(variable.dtype != "float32" for variable in variables):
        return False
    step = tf.cast(optimizer.iterations + 1, tf.float32)
    beta_1, beta_2 = tf.cast(optimizer.beta_1, tf.float32), tf.cast(optimizer.beta_2, tf.float32)
    hyperparameters = {
        "beta1_power": tf.pow(beta_1, step), "beta2_power": tf.pow(beta_2, step), "lr": tf.cast(learning_rate, tf.float32),
        "beta1": beta_1, "beta2": beta_2, "epsilon": tf.cast(optimizer.epsilon, tf.float32),
    }
    for gradient, variable in zip(gradients, variables):
        if isinstance(gradient, tf.IndexedSlices):  # Keras squares each slice before summing repeated rows: keep its update
            optimizer.update_step(gradient, variable, learning_rate)
            continue
        index = optimizer._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=optimizer._momentums[index].handle, v=optimizer._velocities[index].handle,
            grad=tf.cast(gradient, tf.float32), **hyperparameters,
        )
    return True


_FUSED_ADAM_TENSORS = weakref.WeakKeyDictionary()


def _fused_adam_tensors(optimizer, variables):
    """The torch tensors of `variables` and of their Adam slots, and one step counter each, kept per optimizer.

    Reading every variable and slot through Keras on each step costs as much as the fused
    update itself, and the tensors stay the same objects (Keras assigns in place), so they are
    looked up again only for other variables or after the optimizer built new slots. Kept outside the optimizer, whose
    attributes Keras would track and save.
    """
    import torch

    kept = _FUSED_ADAM_TENSORS.get(optimizer)
    if (
        kept is None
        or kept["momentum_list"] is not optimizer._momentums
        or len(kept["variables"]) != len(variables)
        or any(a is not b for a, b in zip(kept["variables"], variables))
    ):
        slots = [optimizer._get_variable_index(variable) for variable in variables]
        kept = {
            "variables": list(variables),
            "momentum_list": optimizer._momentums,
            "parameters": [variable.value for variable in variables],
            "momentums": [optimizer._momentums[i].value for i in slots],
            "velocities": [optimizer._velocities[i].value for i in slots],
            "steps": [torch.zeros(()) for _ in variables],
        }
        _FUSED_ADAM_TENSORS[optimizer] = kept
    return kept


def decoding_seed(seed):
    """The seed as `compile_for_inference`'s decoder takes it: an int32 tensor (a traced argument,
    so a new seed does not retrace), or on torch, which runs the decoder eagerly, the Python int."""
    return seed if keras.backend.backend() == "torch" else ops.convert_to_tensor(seed, "int32")


def flash_attention_flag():
    """The `flash_attention` argument for `keras.ops.dot_product_attention`.

    Keras' setting (`keras.config.is_flash_attention_enabled()`: None once enabled,
    its default, or False), except on torch, where None becomes False. For None,
    Keras' torch backend first builds PyTorch's `SDPAParams` to ask whether the flash
    kernel takes the inputs, and that C++ object breaks the graph under
    `torch.compile` (`jit_compile=True`), in every attention layer. With False it
    calls PyTorch's `scaled_dot_product_attention` without that check, which picks
    the flash kernel itself where the inputs allow it (and its CPU flash kernel on
    the CPU), so the kernel used is the same.
    """
    flag = keras.config.is_flash_attention_enabled()
    return False if flag is None and keras.backend.backend() == "torch" else flag


def heads_first_attention():
    """Whether attention should project straight to `(B, H, T, d)` and write out its softmax.

    True on JAX on the CPU: there, einsum projections into the heads-first layout and
    the scores as batched products, softmax in the graph, make a training step of a
    causal self-attention layer faster than `(B, T, H, d)` projections fed to
    `jax.nn.dot_product_attention` (benchmarks/RESULTS.md); over a cache (`(B, S, H, d)` keys and values) the layer
    writes its softmax out too, since XLA:CPU cannot compile `jax.nn.dot_product_attention`
    for float16 inputs (its `float16 x float16 -> float32` product). Elsewhere the
    fused kernel (flash/cuDNN on GPUs, PyTorch's SDPA, XLA on TensorFlow) is as fast
    or faster, and is kept.
    """
    return _jax_on_the_cpu()


def single_query_reads_whole_cache():
    """Whether a decoding step's query should read its block's `(B, 2, S, H, d)` cache whole.

    True on JAX on the CPU: there XLA copies the keys and the values out of the
    just-updated cache at every step (one fusion per slice), and reading the cache
    whole, keys and values together, made cached greedy generation of the issue #4
    LM take 0.27 s a call instead of 0.35 (benchmarks/RESULTS.md). TensorFlow's XLA
    reads the slices in place (the whole read took 0.29 s instead of 0.22 there),
    torch's slices are views, and beam search reads the cache through `cache_rows`.
    """
    return _jax_on_the_cpu()


def _jax_on_the_cpu():
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"


def compiles_each_input_shape():
    """Whether `model.fit`'s step is compiled once per input shape by default.

    JAX always compiles (`jax.jit`); Keras' `jit_compile="auto"` turns XLA on for TensorFlow only
    where an accelerator is visible (and no `tf.distribute` strategy is in scope, which this does not
    see: there it only costs padding); torch runs eagerly. Pipelines pad to few shapes where it is.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return any(device.device_type != "CPU" for device in tf.config.list_physical_devices())
    return backend == "jax"


def tf_data_without_autotuning():
    """`tf.data.Options` with autotuning off, for pipelines whose work is too small to tune.

    While training keeps the CPU busy, deleting a `tf.data` iterator with autotuning on
    waits for the autotuning thread's next scheduled wake-up (a period that doubles
    after every wake-up, so seconds into training), and Keras deletes one at
    the end of every epoch of array inputs, of every validation pass and of `fit`. With
    autotuning off, `num_parallel_calls=AUTOTUNE` means one call per CPU core.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options
