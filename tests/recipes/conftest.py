import pytest
from recipe_runs import (  # noqa: F401  (session fixtures shared by this folder's tests)
    classify_run,
    data_dir,
    lm_run,
    tag_run,
    tfds_classify_stopped,
    tfds_translate,
    translate_rnn_attention,
    translate_subword,
    translate_transformer,
)

# The session fixtures that run a recipe: under pytest-xdist each worker that needs one runs it again.
RECIPE_RUNS = {
    "classify_run",
    "lm_run",
    "tag_run",
    "tfds_classify_stopped",
    "tfds_translate",
    "translate_rnn_attention",
    "translate_subword",
    "translate_transformer",
}


def pytest_collection_modifyitems(config, items):
    """Puts the tests that use a recipe run on one xdist worker (`--dist loadgroup`), first, so each run is made
    once."""
    uses_a_run = [item for item in items if RECIPE_RUNS & set(getattr(item, "fixturenames", ()))]
    for item in uses_a_run:
        item.add_marker(pytest.mark.xdist_group("recipe_runs"))
    chosen = set(map(id, uses_a_run))
    items[:] = uses_a_run + [item for item in items if id(item) not in chosen]
