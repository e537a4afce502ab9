"""Small real-language data shipped inside the package, so nothing is downloaded at run time."""

from importlib import resources


def alice_text():
    """The opening of chapter 1 of Lewis Carroll's "Alice's Adventures in Wonderland" (1865, public domain)."""
    return resources.files(__package__).joinpath("alice_chapter1.txt").read_text(encoding="utf-8")
