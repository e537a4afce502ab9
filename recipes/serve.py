"""Serve a keras_seq export over HTTP with request batching: `python -m recipes.serve EXPORT_DIR` (see
`keras_seq.serving.server`)."""

import sys

from keras_seq.serving.server import main

if __name__ == "__main__":
    sys.exit(main())
