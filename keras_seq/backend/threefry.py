"""JAX's Threefry-2x32 random bits, written as straight-line code so that XLA on a CPU fuses them.

`jax.random` draws its default bits with Threefry-2x32 (Salmon et al., 2011, "Parallel
random numbers: as easy as 1, 2, 3", sec. 3: 20 rounds, key injection every 4). On a CPU,
JAX lowers its rounds as an XLA loop that writes every intermediate array out to memory;
the same rounds written out one after another compile into one elementwise kernel and give
the same bits. `keras_seq.layers.Dropout` draws its masks here.
"""

import numpy as np

# Rotation distances of Threefry-2x32's rounds, alternating every 4 rounds (Salmon et al., 2011, table 4).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KEY_PARITY = 0x1BD11BDA  # Threefish's key-schedule constant


def is_jax_default():
    """Whether `jax.random.bernoulli` with a Python float draws what `bernoulli` does: Threefry-2x32 bits in JAX's
    partitionable layout, compared as float32 (64-bit floats off)."""
    import jax

    return (
        jax.config.jax_default_prng_impl == "threefry2x32"
        and bool(jax.config.jax_threefry_partitionable)
        and not jax.config.jax_enable_x64
    )


def _rotate_left(x, distance):
    import jax.numpy as jnp

    return (x << jnp.uint32(distance)) | (x >> jnp.uint32(32 - distance))


def threefry_2x32(key, high, low):
    """Threefry-2x32 of the counter words `(high, low)` under the 2-word `key`: two uint32 arrays."""
    import jax.numpy as jnp

    schedule = (key[0], key[1], key[0] ^ key[1] ^ jnp.uint32(_KEY_PARITY))
    x0, x1 = high + schedule[0], low + schedule[1]
    for injection in range(1, 6):
        for distance in _ROTATIONS[(injection - 1) % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, distance) ^ x0
        x0 = x0 + schedule[injection % 3]
        x1 = x1 + schedule[(injection + 1) % 3] + jnp.uint32(injection)
    return x0, x1


def bits(key, shape):
    """`jax.random.bits(key, shape)` for a raw uint32 `(2,)` key and fewer than 2**32 elements.

    Each element's counter is its row-major position as a 64-bit number; its bits are the
    exclusive or of Threefry's two output words (JAX's partitionable layout).
    """
    import jax.numpy as jnp

    size = int(np.prod(shape))
    if size >= 1 << 32:
        raise ValueError(f"threefry bits: fewer than 2**32 elements expected, got shape {tuple(shape)}")
    key = jnp.asarray(key).astype(jnp.uint32)
    low = jnp.arange(size, dtype=jnp.uint32).reshape(shape)
    x0, x1 = threefry_2x32(key, jnp.zeros_like(low), low)
    return x0 ^ x1


def bernoulli(key, p, shape):
    """`jax.random.bernoulli(key, p, shape)`: True where the float32 uniform of `bits` lies below `p`."""
    import jax
    import jax.numpy as jnp

    mantissa = (bits(key, shape) >> jnp.uint32(9)) | jnp.uint32(0x3F800000)  # a float32 in [1, 2)
    uniform = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0
    return uniform < jnp.float32(p)
