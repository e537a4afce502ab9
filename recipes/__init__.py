"""Command-line programs that train keras_seq models with `model.fit` (`python -m recipes.NAME`)."""
