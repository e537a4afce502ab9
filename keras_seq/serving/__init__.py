"""Serving a keras_seq export over HTTP: `python -m recipes.serve EXPORT_DIR` (see `server`).

`batching.RequestBatcher` gathers concurrent requests into few engine calls,
`engines` runs an export (a TensorFlow SavedModel) on them, and `server` is the
aiohttp application around both.
"""

from keras_seq.serving.batching import BatchFailed, RequestBatcher
from keras_seq.serving.engines import RequestError, SavedModelEngine, SavedModelTranslator, TranslateOptions
from keras_seq.serving.server import main, make_app

__all__ = [
    "BatchFailed",
    "RequestBatcher",
    "RequestError",
    "SavedModelEngine",
    "SavedModelTranslator",
    "TranslateOptions",
    "main",
    "make_app",
]
