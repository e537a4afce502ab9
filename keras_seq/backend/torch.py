"""PyTorch's overrides of `keras_seq.backend.common`: each says what it replaces, why, and when it can go.

Keras runs torch eagerly: every `keras.ops` call pays Keras' dispatch (argument conversion, dtype
resolution) before PyTorch's own. Where a layer or a decoding step makes many small calls, the
overrides here call PyTorch directly; they can go when Keras' torch dispatch costs no more than
PyTorch's own call, or when the recipes run torch compiled (`torch.compile`).
"""

import math
import weakref

import keras
import torch

from keras_seq.backend import common, keras_internals


def concrete_value(x):
    """`x` as a NumPy array if its value is known now, else None (inside `torch.compile`'s tracing)."""
    known = common.concrete_value(x)
    if known is not None or x is None or isinstance(x, keras.KerasTensor):
        return known
    if torch.compiler.is_compiling():
        return None
    return x.detach().cpu().numpy()


def compile_for_inference(model, function):
    """`function(*tensors)` run eagerly without autograd's bookkeeping (`torch.no_grad`)."""

    def no_grad(*args):
        with torch.no_grad():
            return function(*args)

    return no_grad


def target_nll_from_logits(logits, targets):
    """`-log_softmax(logits)[target]`: a gather from the log-softmax, whose gradient torch writes in place.

    Replaces: `logsumexp(z) - z_target` through Keras' ops, whose torch `take_along_axis` moves the class
    axis and copies the logits twice. Remove when Keras' torch gather copies nothing.
    """
    return -common.take_target(torch.log_softmax(logits, dim=-1), targets)


def smoothed_nll_from_logits(logits, targets, epsilon):
    """PyTorch's `cross_entropy` with `label_smoothing`, the same value in one kernel and its gradient in another.

    Replaces: the formula through Keras' ops (several kernels and the logits' copies); removable as above.
    """
    vocabulary_size = logits.shape[-1]
    flat = torch.nn.functional.cross_entropy(
        logits.reshape(-1, vocabulary_size), targets.reshape(-1).long(), reduction="none", label_smoothing=epsilon
    )
    return flat.reshape(targets.shape)


def dropout(layer, inputs, keras_call):
    """An unseeded layer's dropout on a CPU tensor: kept where `torch.rand >= rate`, scaled by `1 / (1 - rate)`.

    The draw is from PyTorch's global generator, as in Keras' unseeded torch dropout
    (`torch.nn.functional.dropout`), whose `bernoulli_` takes about twice as long on a CPU as a
    uniform draw and a comparison. Uniforms in float32 whatever the input's dtype. Keras' layer
    for a seed, a `noise_shape` or a tensor off the CPU. Remove when PyTorch's CPU `bernoulli_`
    is as fast as `rand` and a comparison.
    """
    if layer.seed is not None or layer.noise_shape is not None or inputs.device.type != "cpu":
        return keras_call()
    keep = torch.rand(inputs.shape, dtype=torch.float32, device=inputs.device) >= layer.rate
    return inputs * (keep.to(inputs.dtype) * (1.0 / (1.0 - layer.rate)))


def _torch_value(x):
    """The torch tensor of `x`, a tensor or a Keras variable (read as the autocast scope says)."""
    return x.value if isinstance(x, keras.Variable) else x


def affine(x, kernel, bias=None, contracted_axes=1):
    """`common.affine` as one `addmm` over the rows of `x` (Keras' path: reshapes, product and sum, each
    dispatched); `common.affine` for mixed dtypes, which `keras.ops` promotes."""
    if len({t.dtype for t in map(_torch_value, (x, kernel, bias)) if t is not None}) != 1:
        return common.affine(x, kernel, bias, contracted_axes)
    features, outputs = math.prod(kernel.shape[:contracted_axes]), tuple(kernel.shape[contracted_axes:])
    rows, matrix = x.reshape(-1, features), _torch_value(kernel).reshape(features, -1)
    y = torch.mm(rows, matrix) if bias is None else torch.addmm(_torch_value(bias).reshape(-1), rows, matrix)
    return y.reshape(*x.shape[: x.ndim - contracted_axes], *outputs)


def dense(layer, inputs, keras_call):
    """A Dense layer's `activation(inputs @ kernel + bias)` by `affine`, one product without Keras' dispatch."""
    outputs = affine(inputs, layer.kernel, layer.bias)
    return outputs if layer.activation is None else layer.activation(outputs)


def call_in_step(layer, inputs, **kwargs):
    """`layer.call(inputs, **kwargs)` without `Layer.__call__`'s bookkeeping where none of it is needed: the
    layer computes in the dtype it keeps its variables in (no autocast scope to open) and `inputs` is an
    integer tensor or already in that dtype (no cast). A decoding step pays that bookkeeping for every layer
    and every token on eager torch; masks are not attached (a step's keys come from the cache)."""
    policy = layer.dtype_policy
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    if policy.compute_dtype == policy.variable_dtype and (dtype == policy.compute_dtype or "int" in dtype):
        return keras_internals.call_without_bookkeeping(layer, inputs, **kwargs)
    return layer(inputs, **kwargs)


def single_query_attention(q, k, v, mask, rows_may_be_empty, scale, masked_score, keras_call):
    """The float32 context `(B, 1, H, dv)` of one query per row `(B, 1, H, dk)` over keys and values
    `(B, S, H, d)`: the layer's products, mask and softmax (`masked_score` at masked keys, zero weights
    for a row with none) as torch calls. `mask` is `(B or 1, S, H or 1)`, as the scores `(B, S, H)`."""
    scores = (q.float() * k.float()).sum(-1) * scale
    if mask is not None:
        scores = torch.where(mask, scores, masked_score)
    weights = torch.softmax(scores, dim=1)
    if mask is not None and rows_may_be_empty:
        weights = torch.where(mask, weights, 0.0)
    return (weights.unsqueeze(-1) * v.float()).sum(1, keepdim=True)


def slice_update(x, start_indices, updates):
    """A copy of `x` written through slices at the indices read as Python ints.

    Replaces: Keras' torch `slice_update`, which given a tensor index (a decoding step's position)
    builds index grids and scatters through them on every call, in every block's cache.
    """
    start = [int(index) for index in start_indices]
    written = x.clone()
    written[tuple(slice(s, s + n) for s, n in zip(start, updates.shape))] = updates
    return written


def adam_update(optimizer, gradients, variables, learning_rate, keras_update):
    """Keras' Adam step by PyTorch's fused CPU kernel (`torch.optim.adam.adam(fused=True)`); Keras' own
    multi-tensor update off the CPU, for `amsgrad` and for dtypes other than float32.

    PyTorch's Adam divides by `sqrt(v) / sqrt(1 - beta_2^t) + epsilon` where Keras divides by
    `(sqrt(v) + epsilon) / sqrt(1 - beta_2^t)`: handing it `epsilon / sqrt(1 - beta_2^t)` makes the two
    updates one. Replaces Keras' multi-tensor update, which on a CPU loops over the tensors one small
    operation at a time. Remove when Keras' torch Adam uses PyTorch's fused kernel.
    """
    from torch.optim.adam import adam as functional_adam

    tensors = _fused_adam_tensors(optimizer, variables)
    fused = not optimizer.amsgrad and all(
        p.device.type == "cpu" and p.dtype == torch.float32 and g.dtype == torch.float32
        for p, g in zip(tensors["parameters"], gradients)
    )
    if not fused:  # Keras' multi-tensor update, the one `keras.optimizers.Adam` runs on torch
        with torch.no_grad():
            return keras_internals.torch_adam_multi_tensor_update(optimizer, gradients, variables, learning_rate)
    with torch.no_grad():
        step = int(keras.ops.convert_to_numpy(optimizer.iterations)) + 1  # a tensor when accumulating
        steps = tensors["steps"]
        torch._foreach_zero_(steps)
        torch._foreach_add_(steps, float(step - 1))  # advanced to `step` by the call
        functional_adam(
            tensors["parameters"], list(gradients), tensors["momentums"], tensors["velocities"], [], steps,
            fused=True, amsgrad=False, beta1=optimizer.beta_1, beta2=optimizer.beta_2, lr=float(learning_rate),
            weight_decay=0.0, eps=optimizer.epsilon / math.sqrt(1 - optimizer.beta_2**step), maximize=False,
        )  # fmt: skip
    return None


_FUSED_ADAM_TENSORS = weakref.WeakKeyDictionary()


def _fused_adam_tensors(optimizer, variables):
    """The torch tensors of `variables` and of their Adam slots, and one step counter each, kept per optimizer.

    Reading every variable and slot through Keras on each step costs as much as the fused update itself,
    and the tensors stay the same objects (Keras assigns in place), so they are looked up again only for
    other variables or after the optimizer built new slots. Kept outside the optimizer, whose attributes
    Keras would track and save.
    """
    kept = _FUSED_ADAM_TENSORS.get(optimizer)
    slot_lists = keras_internals.adam_slot_lists(optimizer)
    if (
        kept is None
        or kept["slot_lists"][0] is not slot_lists[0]
        or len(kept["variables"]) != len(variables)
        or any(a is not b for a, b in zip(kept["variables"], variables))
    ):
        slots = [keras_internals.adam_slots(optimizer, variable) for variable in variables]
        kept = {
            "variables": list(variables),
            "slot_lists": slot_lists,
            "parameters": [variable.value for variable in variables],
            "momentums": [momentum.value for momentum, _ in slots],
            "velocities": [velocity.value for _, velocity in slots],
            "steps": [torch.zeros(()) for _ in variables],
        }
        _FUSED_ADAM_TENSORS[optimizer] = kept
    return kept


def decoding_seed(seed):
    """The Python int: torch runs the decoder eagerly, so nothing is traced and a seed needs no tensor."""
    return seed


def flash_attention_flag():
    """Keras' setting, except None becomes False.

    For None, Keras' torch backend first builds PyTorch's `SDPAParams` to ask whether the flash kernel
    takes the inputs, and that C++ object breaks the graph under `torch.compile` (`jit_compile=True`), in
    every attention layer. With False it calls PyTorch's `scaled_dot_product_attention` without that check,
    which picks the flash kernel itself where the inputs allow it, so the kernel used is the same. Remove
    when Keras' check compiles under `torch.compile`.
    """
    flag = keras.config.is_flash_attention_enabled()
    return False if flag is None else flag


def top_k_in_blocks_pays():
    """No: torch's eager `topk` over every candidate is fast, and the blocks would cost a dispatch each."""
    return False
