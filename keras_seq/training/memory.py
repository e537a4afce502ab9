"""The C allocator's setting for training: memory a step frees is kept for the next step.

glibc's `malloc` serves a request above its mmap threshold (at most 32 MiB) with a fresh mapping that
`free` unmaps, and gives the free top of its heap back to the system past its trim threshold. A
training step allocates and frees the same large buffers every step (the logits and their gradients,
XLA's buffer of a step's temporaries on JAX); with glibc's defaults each step pays the kernel's page
faults and zeroing for them again, more the longer the batch. See `mallopt(3)`: `M_MMAP_MAX`, `M_TRIM_THRESHOLD`.
"""

import ctypes

# mallopt(3)'s parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
TRIM_THRESHOLD = 1 << 30  # free heap memory kept before any is given back: more than a step frees


def keep_freed_memory():
    """Have glibc's `malloc` serve requests from its heaps, never fresh mappings, and keep what is freed.

    Call it once, early (before the first training step); it applies to the whole process, whose
    resident memory then stays near its peak instead of falling back between steps. A thread with an
    arena of its own still maps a request above its 64 MiB heaps anew (a JAX step's temporaries past
    about 700 target tokens).

    Returns True where it applied (glibc, i.e. most Linux), False elsewhere (macOS, musl), where the
    allocator is left as it is.
    """
    try:
        libc = ctypes.CDLL(None)  # the C library this process runs on
        libc.gnu_get_libc_version  # only glibc has it: another C library's mallopt means something else
    except (OSError, TypeError, AttributeError):  # Windows has no process-wide C library handle
        return False
    return all(libc.mallopt(parameter, value) == 1 for parameter, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)))
