"""protected_tokens on real-looking interface strings, and copy_rate counted by hand."""

import pytest

from keras_seq.metrics import copy_rate, protected_tokens

EXPECTED = {
    "Delete %(name)s?": ["%(name)s"],
    "Use --force to overwrite {count} files.": ["--force", "{count}"],
    "Cannot open config.ini: permission denied.": ["config.ini"],
    "Version 2.0 released at 10:30": ["2.0", "10:30"],
    "See https://example.com/docs, or write to admin@example.org.": ["https://example.com/docs", "admin@example.org"],
    "Edit /etc/hosts and C:\\Temp\\x.txt": ["/etc/hosts", "C:\\Temp\\x.txt"],
    "%d of %s selected (%.1f%%)": ["%d", "%s", "%.1f"],
    "%1$s wrote %2$d lines": ["%1$s", "%2$d"],
    "Run setup.py -v now": ["setup.py", "-v"],
    "Rows 1,000 to 2,000": ["1,000", "2,000"],
    "{} and {0} and {{name}}": ["{}", "{0}", "{{name}}"],
    "The end.": [],
    "Use e.g. this, etc.": [],
    "A well-known issue": [],
    "Click « OK ».": [],
    "Press Ctrl-C to stop": [],
}


@pytest.mark.parametrize("source", sorted(EXPECTED))
def test_protected_tokens(source):
    assert protected_tokens(source) == EXPECTED[source]


def test_copy_rate_counts_sources_with_tokens_and_their_multiplicity():
    sources = ["Delete %s?", "Copy %s to %s", "Hello", "Open config.ini", "Version 2.0"]
    predictions = ["Supprimer %s ?", "Copier %s vers le dossier", "Bonjour", "Ouvrir config.ini", "Version 2,0"]
    # 4 sources hold tokens; "%s" twice is not copied twice, "2.0" became "2,0": 2 of 4 copied.
    assert copy_rate(sources, predictions) == (0.5, 4)
    assert copy_rate(["Hello"], ["Bonjour"]) == (None, 0)
    with pytest.raises(ValueError, match="copy_rate: `predictions` expected one per source"):
        copy_rate(["a", "b"], ["a"])
