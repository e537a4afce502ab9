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
    "classify_run", "lm_run", "tag_run", "tfds_classify_stopped", "tfds_translate",
    "translate_rnn_attention", "translate_subword", "translate_transformer",
}


# test_recipe_training's module fixtures: runs that are interrupted, resumed or compared with one never stopped.
RESUME_RUNS = {"interrupted", "resumed", "uninterrupted", "signalled", "killed"}


def pytest_collection_modifyitems(config, items):
    """Puts the tests that use a recipe run on one xdist worker (`--dist loadgroup`), first, so each run is made once;
    the same for the resume runs, on a worker of their own."""
    grouped = []
    for group, fixtures in (("recipe_runs", RECIPE_RUNS), ("resume_runs", RESUME_RUNS)):
        for item in items:
            if fixtures & set(getattr(item, "fixturenames", ())) and id(item) not in set(map(id, grouped)):
                item.add_marker(pytest.mark.xdist_group(group))
                grouped.append(item)
    chosen = set(map(id, grouped))
    items[:] = grouped + [item for item in items if id(item) not in chosen]
