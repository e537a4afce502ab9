"""The error every recipe module raises for bad input, in a module of its own that imports none of them
(so `recipes.devices` and `recipes.common` share it without importing each other)."""


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit status 2 (`recipes.common.main`)."""
