"""A model whose constructor arguments are its whole config: written once, in its `__init__` signature."""

import numpy as np


def constructor_arguments(arguments):
    """A model's config from its `__init__`'s `locals()` taken on entry: every argument but `self` and `**kwargs`.

    NumPy scalars become Python ones, so the config stays JSON (the `.keras` format).
    """
    return {
        name: value.item() if isinstance(value, np.generic) else value
        for name, value in arguments.items()
        if name not in ("self", "kwargs", "__class__")
    }


def keep_parts(model, config, **layers):
    """Attach a built functional model's layers under the given names and keep its constructor arguments as its config.

    The layers stay reachable by name for decoding and inspection; the config is what
    `get_config` returns (`ConfigFromArguments`).
    """
    for name, layer in layers.items():
        setattr(model, name, layer)
    model._config = config


class ConfigFromArguments:
    """`get_config` and `from_config` for a model that sets `self._config = constructor_arguments(...)`."""

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self._config}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)
