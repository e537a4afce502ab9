"""The recipes' setting of the C allocator for training: memory a step frees is kept for the next step.

A choice of the program that trains, not of the library, since it changes the whole process: the recipes make
it at their start.

glibc's `malloc` serves a request above its mmap threshold (at most 32 MiB) with a fresh mapping that
`free` unmaps, and gives the free top of its heap back to the system past its trim threshold. A
training step allocates and frees the same large buffers every step (the logits and their gradients,
XLA's buffer of a step's temporaries on JAX); with glibc's defaults each step pays the kernel's page
faults and zeroing for them again, more the longer the batch. See `mallopt(3)`: `M_MMAP_MAX`, `M_TRIM_THRESHOLD`.
A thread other than the main one allocates from an arena of 64 MiB heaps, and glibc maps a larger request
anew whatever the setting; JAX runs its CPU programs on a thread of its own unless told otherwise.
"""

import ctypes

from keras_seq import backend

# mallopt(3)'s parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
TRIM_THRESHOLD = 1 << 30  # free heap memory kept before any is given back: more than a step frees


def keep_freed_memory():
    """Have glibc's `malloc` serve requests from its heaps, never fresh mappings, and keep what is freed.

    Call it once, early (before the first training step); it applies to the whole process, whose
    resident memory then stays near its peak instead of falling back between steps. On the JAX
    backend it also has JAX run its CPU programs on the calling thread (`jax_cpu_enable_async_dispatch`
    off), so that a step's temporaries above 64 MiB come from the main heap too; this takes effect
    only before JAX's first computation, and Python then waits for each step instead of running ahead.
    A request above 64 MiB from another thread (TensorFlow's executor) is still mapped anew.

    Returns True where it applied (glibc, i.e. most Linux), False elsewhere (macOS, musl), where the
    allocator is left as it is.
    """
    try:
        libc = ctypes.CDLL(None)  # the C library this process runs on
        libc.gnu_get_libc_version  # only glibc has it: another C library's mallopt means something else
    except (OSError, TypeError, AttributeError):  # Windows has no process-wide C library handle
        return False
    backend.run_programs_on_calling_thread()  # read when JAX's CPU client starts
    return all(
        libc.mallopt(parameter, value) == 1
        for parameter, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    )
