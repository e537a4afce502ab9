"""Data helpers and small real-language data shipped inside the package (nothing is downloaded)."""

from importlib import resources

import numpy as np

from keras_seq import _validation as v
from keras_seq.data.mlm import TokenMasker as TokenMasker


def alice_text():
    """The opening of chapter 1 of Lewis Carroll's "Alice's Adventures in Wonderland" (1865, public domain)."""
    return resources.files(__package__).joinpath("alice_chapter1.txt").read_text(encoding="utf-8")


def tbptt_windows(stream, batch_size, window):
    """Cut one long id stream into windows for truncated backpropagation through time (Williams and Peng, 1990).

    The stream is split into `batch_size` parallel sub-streams; each is cut into
    consecutive windows of `window` ids. Rows come window by window, so with
    `model.fit(x, y, batch_size=batch_size, shuffle=False)` on a stateful model,
    row b of batch j+1 continues row b of batch j: the hidden state carries over
    the window edge while the gradient stops there (h_{t-k} has no influence on the
    gradient at h_t beyond k steps).

    Args:
        stream: 1-D sequence of ids.
        batch_size: number of parallel sub-streams.
        window: truncation length k.

    Returns:
        `(x, y)` int32 arrays of shape `(num_windows * batch_size, window)`, `y` the
        next ids of `x`. The tail that does not fill a whole window is dropped.
    """
    stream = np.asarray(stream)
    if stream.ndim != 1:
        raise ValueError(f"tbptt_windows: `stream` expected a 1-D sequence of ids, got shape {stream.shape}.")
    batch_size = v.check_positive_int("tbptt_windows", "batch_size", batch_size)
    window = v.check_positive_int("tbptt_windows", "window", window)
    per_stream = (len(stream) - 1) // batch_size // window * window
    if per_stream == 0:
        raise ValueError(
            f"tbptt_windows: `stream` expected more than batch_size * window = {batch_size * window} ids, "
            f"got {len(stream)}."
        )
    starts = np.arange(batch_size) * per_stream
    x = np.stack([stream[s : s + per_stream] for s in starts])
    y = np.stack([stream[s + 1 : s + per_stream + 1] for s in starts])

    def window_major(a):
        return a.reshape(batch_size, -1, window).transpose(1, 0, 2).reshape(-1, window).astype("int32")

    return window_major(x), window_major(y)
