"""One random draw per weight from an initializer a layer shares among several weights."""

import keras


def own_draw(initializer):
    """A copy of `initializer` for one more weight.

    A Keras 3 random initializer made without a seed fixes one when it is made and
    draws the same values at every call, so one instance shared by weights of the
    same shape (attention's query, key and value kernels) would start them equal.
    The copy of an unseeded initializer gets a seed of its own; a seeded one keeps
    its seed, as in Keras' own layers. Plain functions are returned as they are.
    """
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    return initializer.__class__.from_config(initializer.get_config())
