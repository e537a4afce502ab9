"""keras_seq.data.pipeline: pooled, length-sorted, padded, per-epoch shuffled batches."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_seq.data import pipeline


@pytest.mark.parametrize(
    "longest, edges",
    [
        (1, [8]),
        (8, [8]),
        (9, [8, 9]),
        (16, [8, 10, 12, 14, 16]),
        (17, [8, 10, 12, 14, 16, 17]),
        (66, [8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 66]),
        (129, [8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 129]),
    ],
)
def test_bucket_edges(longest, edges):
    assert pipeline.bucket_edges(longest) == edges


def test_bucket_edges_pad_by_at_most_a_quarter():
    edges = pipeline.bucket_edges(1000)
    assert all(b - a <= a / 4 for a, b in zip(edges, edges[1:]))
    assert pipeline.bucket_edges(20, smallest=4) == [4, 6, 8, 10, 12, 14, 16, 20]


def examples(count=45, seed=0):
    """Rows whose first source id (1-based) names the example; lengths 1..40 so several widths come up."""
    rng = np.random.default_rng(seed)
    source = [[i + 1] + rng.integers(1, 50, size=rng.integers(0, 30)).tolist() for i in range(count)]
    target = [rng.integers(1, 50, size=rng.integers(1, 41)).tolist() for _ in range(count)]
    return {"source": source, "target": target}


def batches_of(features, batch_size, max_length, seed=None, first_epoch=0, epochs=1, ragged=False, **options):
    if ragged:
        features = {name: tf.ragged.constant(rows, dtype=tf.int32) for name, rows in features.items()}
    data = pipeline.padded_batches(
        features, batch_size, max_length, lambda b: (b["source"], b["target"]), seed, first_epoch, epochs, **options
    )
    return [(source.numpy(), target.numpy()) for source, target in data]


def longest(features):
    return max(len(row) for rows in features.values() for row in rows)


def length_of(features, index):
    return max(len(features["source"][index]), len(features["target"][index]))


def check_epoch(batches, features, batch_size, pad_to):
    """Every example exactly once, its ids intact, its batch padded as `pad_to` says; returns the order."""
    edges = pipeline.bucket_edges(longest(features))
    seen = []
    assert len(batches) == -(-len(features["source"]) // batch_size)
    for source, target in batches:
        assert source.dtype == target.dtype == np.int32
        assert source.shape == target.shape and 1 <= len(source) <= batch_size
        width = source.shape[1]
        indices = [s[0] - 1 for s in source]
        for index, s, t in zip(indices, source, target):
            expected_s, expected_t = features["source"][index], features["target"][index]
            np.testing.assert_array_equal(s, expected_s + [0] * (width - len(expected_s)))
            np.testing.assert_array_equal(t, expected_t + [0] * (width - len(expected_t)))
        most = max(length_of(features, i) for i in indices)
        if pad_to == "longest":
            assert width == most
        elif len(source) < batch_size:
            assert width == edges[-1]  # the short batch: one shape every epoch
        else:
            assert width == min(e for e in edges if e >= most)
        seen.extend(indices)
    assert sorted(seen) == list(range(len(features["source"])))
    return seen


@pytest.mark.parametrize("pad_to", ["longest", "edges"])
@pytest.mark.parametrize("ragged", [False, True], ids=["lists", "ragged"])
def test_every_example_once_per_epoch_padded_to_its_batch(ragged, pad_to):
    features = examples()
    batches = batches_of(features, 8, longest(features), seed=3, epochs=3, ragged=ragged, pad_to=pad_to)
    per_epoch = pipeline.count_batches(pipeline.padded_batches(features, 8, longest(features), lambda b: b))
    assert len(batches) == 3 * per_epoch == 3 * 6
    orders = [check_epoch(batches[e * per_epoch : (e + 1) * per_epoch], features, 8, pad_to) for e in range(3)]
    assert orders[0] != orders[1] != orders[2]  # shuffled anew each epoch


def test_a_pool_is_cut_into_batches_of_neighbouring_lengths():
    # One pool holds the whole epoch: no two batches' length ranges overlap (ties aside), and the
    # padding is far below that of batches drawn at random.
    features = examples(count=200)
    for seed in (None, 11):
        batches = batches_of(features, 8, longest(features), seed=seed, pad_to="longest")
        ranges = sorted(
            (min(length_of(features, s[0] - 1) for s in source), max(length_of(features, s[0] - 1) for s in source))
            for source, _ in batches
        )
        assert all(high <= next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
        padded = sum(source.size for source, _ in batches)
        lengths = np.array([length_of(features, i) for i in range(200)])
        shuffled = np.random.default_rng(0).permutation(lengths)
        assert padded < 0.7 * sum(8 * chunk.max() for chunk in np.array_split(shuffled, 25))


def test_pools_are_sorted_one_after_the_other():
    # Pools of 2 batches: with seed None the examples stay in order pool by pool, each pool sorted by
    # length (ties in their order) and cut into batches whose rows keep the data's order.
    features = examples(count=40)
    order = check_epoch(
        batches_of(features, 4, longest(features), pad_to="longest", pool_batches=2), features, 4, "longest"
    )
    for start in range(0, 40, 8):
        by_length = sorted(range(start, start + 8), key=lambda i: length_of(features, i))
        assert order[start : start + 8] == sorted(by_length[:4]) + sorted(by_length[4:])


@pytest.mark.parametrize("compiled", [True, False])
def test_auto_pads_to_edges_where_the_backend_compiles_each_shape(monkeypatch, compiled):
    from keras_seq import backend

    monkeypatch.setattr(backend, "compiles_each_input_shape", lambda: compiled)
    features = examples()
    auto = batches_of(features, 8, longest(features), seed=2)
    expected = batches_of(features, 8, longest(features), seed=2, pad_to="edges" if compiled else "longest")
    assert [s.shape for s, _ in auto] == [s.shape for s, _ in expected]
    assert [s.shape for s, _ in auto] != [
        s.shape
        for s, _ in batches_of(features, 8, longest(features), seed=2, pad_to="longest" if compiled else "edges")
    ]


def test_compiles_each_input_shape_follows_the_backend():
    from keras_seq import backend

    name = keras.backend.backend()
    accelerator = any(d.device_type != "CPU" for d in tf.config.list_physical_devices())
    assert backend.compiles_each_input_shape() == (name == "jax" or (name == "tensorflow" and accelerator))


def test_a_seed_shuffles_the_batches_of_a_pool():
    # One pool: without a seed its batches come shortest first; a seed draws their order too.
    features = examples(count=200)
    widths = {
        seed: [source.shape[1] for source, _ in batches_of(features, 8, longest(features), seed=seed, pad_to="longest")]
        for seed in (None, 1, 2)
    }
    assert widths[None] == sorted(widths[None])
    assert widths[1] != sorted(widths[1]) and widths[2] != sorted(widths[2]) and widths[1] != widths[2]


def test_several_pools_a_short_batch_and_a_seed():
    features = examples(count=45)
    for epoch in range(3):
        batches = batches_of(
            features, 4, longest(features), seed=9, first_epoch=epoch, epochs=epoch + 1, pad_to="edges", pool_batches=2
        )
        check_epoch(batches, features, 4, "edges")
        assert sorted(len(source) for source, _ in batches) == [1] + [4] * 11


def test_epoch_order_does_not_depend_on_where_the_run_started():
    features = examples()
    straight = batches_of(features, 8, longest(features), seed=5, first_epoch=0, epochs=4)
    per_epoch = len(straight) // 4
    for first in (1, 3):
        resumed = batches_of(features, 8, longest(features), seed=5, first_epoch=first, epochs=4)
        assert len(resumed) == (4 - first) * per_epoch
        for (a_source, a_target), (b_source, b_target) in zip(resumed, straight[first * per_epoch :], strict=True):
            np.testing.assert_array_equal(a_source, b_source)
            np.testing.assert_array_equal(a_target, b_target)


def test_every_pass_over_the_dataset_has_the_same_order():
    # Keras reads one batch of a dataset to build an unbuilt model, then iterates it again
    # to train: a resumed (built) model must see the same order as a fresh one.
    features = examples()
    data = pipeline.padded_batches(
        features, 8, longest(features), lambda b: b["source"], seed=7, first_epoch=0, epochs=2
    )
    first, second = [b.numpy() for b in data], [b.numpy() for b in data]
    assert len(first) == len(second)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_the_same_seed_gives_the_same_epoch_and_others_differ():
    features = examples()
    first = check_epoch(batches_of(features, 8, longest(features), seed=1, pad_to="edges"), features, 8, "edges")
    again = check_epoch(batches_of(features, 8, longest(features), seed=1, pad_to="edges"), features, 8, "edges")
    other = check_epoch(batches_of(features, 8, longest(features), seed=2, pad_to="edges"), features, 8, "edges")
    assert first == again and first != other


def test_short_batches_and_one_edge():
    features = {"ids": [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11, 12], [13, 14]]}
    shapes = {
        pad_to: [b.shape for b in pipeline.padded_batches(features, 3, 8, lambda b: b["ids"], pad_to=pad_to)]
        for pad_to in ("longest", "edges")
    }
    assert shapes == {"longest": [(3, 3), (1, 8)], "edges": [(3, 8), (1, 8)]}
    assert pipeline.count_batches(pipeline.padded_batches(features, 3, 8, lambda b: b["ids"])) == 2
    empty = {"ids": [[], []]}
    assert [b.shape for b in pipeline.padded_batches(empty, 2, 1, lambda b: b["ids"], pad_to="longest")] == [(2, 1)]


def test_data_is_reachable_from_the_package_import():
    import keras_seq as ks
    import keras_seq.data.mlm

    assert ks.data.TokenMasker is keras_seq.data.mlm.TokenMasker
    with pytest.raises(AttributeError, match="no attribute 'datasets'"):
        ks.datasets


def test_batches_have_tf_data_autotuning_off():
    """Deleting an autotuned iterator waits for the tuning thread (`backend.tf_data_without_autotuning`)."""
    data = pipeline.padded_batches(examples(), 8, 40, lambda b: (b["source"], b["target"]))
    assert data.options().autotune.enabled is False
    assert tf.data.Dataset.range(3).options().autotune.enabled is not False  # tf.data's default differs


def test_variants_are_read_in_turn_by_epoch_in_the_same_order():
    # Two encodings of the same 45 examples: the second block's target ids are shifted by 50,
    # so each batch tells which block it came from; both blocks keep the example's lengths.
    features = examples()
    shifted = [[i + 50 for i in row] for row in features["target"]]
    blocks = {"source": features["source"] * 2, "target": features["target"] + shifted}
    one = batches_of(features, 8, longest(features), seed=4, epochs=3)
    two = [
        (s.numpy(), t.numpy())
        for s, t in pipeline.padded_batches(
            blocks, 8, longest(features), lambda b: (b["source"], b["target"]), 4, 0, 3, variants=2
        )
    ]
    assert len(one) == len(two)
    per_epoch = len(one) // 3
    for index, ((a_source, a_target), (b_source, b_target)) in enumerate(zip(one, two)):
        np.testing.assert_array_equal(a_source, b_source)  # same examples in the same order
        block = (index // per_epoch) % 2
        np.testing.assert_array_equal(np.where(a_target > 0, a_target + 50 * block, 0), b_target)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"variants": 2}, "`variants` expected to divide the 45 rows"),
        ({"pad_to": "bucket"}, "`pad_to` expected one of"),
        ({"pool_batches": 0}, "`batch_size` and `pool_batches` expected >= 1"),
    ],
)
def test_bad_arguments_raise(options, message):
    features = examples(count=45)
    with pytest.raises(ValueError, match=message):
        pipeline.padded_batches(features, 8, longest(features), lambda b: b, **options)


@pytest.mark.parametrize(
    "features, max_length, message",
    [
        ({"source": [[1], [2]], "target": [[1]]}, 8, "columns of equal row counts"),
        ({}, 8, "at least one column"),
        ({"source": [[1] * 12]}, 10, "`max_length` expected to hold every sequence, got 10 for a sequence of 12"),
    ],
)
def test_bad_features_raise(features, max_length, message):
    with pytest.raises(ValueError, match=message):
        pipeline.padded_batches(features, 8, max_length, lambda b: b)


def test_columns_of_ragged_and_list_rows_and_no_rows():
    ragged = tf.ragged.constant([[1, 2], [3]], dtype=tf.int32, row_splits_dtype=tf.int32)
    (batch,) = list(pipeline.padded_batches({"a": ragged, "b": [[5], [6, 7, 8]]}, 4, 8, lambda b: b, pad_to="longest"))
    np.testing.assert_array_equal(batch["a"].numpy(), [[1, 2, 0], [3, 0, 0]])  # rows of longest 2 and 3, one width
    np.testing.assert_array_equal(batch["b"].numpy(), [[5, 0, 0], [6, 7, 8]])
    assert pipeline.count_batches(pipeline.padded_batches({"a": []}, 4, 8, lambda b: b)) == 0
