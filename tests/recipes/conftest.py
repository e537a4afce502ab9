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
