"""keras_seq.data.pipeline: bucketed, padded, per-epoch shuffled batches."""

import numpy as np
import pytest
import tensorflow as tf

from keras_seq.data import pipeline


@pytest.mark.parametrize(
    "longest, edges",
    [(1, [8]), (8, [8]), (9, [8, 9]), (16, [8, 16]), (17, [8, 16, 17]), (64, [8, 16, 32, 64]), (65, [8, 16, 32, 64, 65])],
)
def test_bucket_edges(longest, edges):
    assert pipeline.bucket_edges(longest) == edges


def test_bucket_edges_smallest():
    assert pipeline.bucket_edges(20, smallest=4) == [4, 8, 16, 20]


def examples(count=45, seed=0):
    """Rows whose first source id (1-based) names the example; lengths 1..40 so several buckets fill."""
    rng = np.random.default_rng(seed)
    source = [[i + 1] + rng.integers(1, 50, size=rng.integers(0, 30)).tolist() for i in range(count)]
    target = [rng.integers(1, 50, size=rng.integers(1, 41)).tolist() for _ in range(count)]
    return {"source": source, "target": target}


def batches_of(features, batch_size, max_length, seed=None, first_epoch=0, epochs=1, ragged=False):
    if ragged:
        features = {name: tf.ragged.constant(rows, dtype=tf.int32) for name, rows in features.items()}
    data = pipeline.padded_batches(features, batch_size, max_length, lambda b: (b["source"], b["target"]), seed, first_epoch, epochs)
    return [(source.numpy(), target.numpy()) for source, target in data]


def longest(features):
    return max(len(row) for rows in features.values() for row in rows)


def check_epoch(batches, features, batch_size):
    """Every example exactly once, padded to its bucket's edge, with its ids intact."""
    edges = pipeline.bucket_edges(longest(features))
    seen = []
    for source, target in batches:
        assert source.dtype == target.dtype == np.int32
        assert source.shape == target.shape and source.shape[1] in edges
        assert 1 <= len(source) <= batch_size
        width = source.shape[1]
        for s, t in zip(source, target):
            index = s[0] - 1
            seen.append(index)
            expected_s, expected_t = features["source"][index], features["target"][index]
            np.testing.assert_array_equal(s, expected_s + [0] * (width - len(expected_s)))
            np.testing.assert_array_equal(t, expected_t + [0] * (width - len(expected_t)))
            # The bucket of an example: the smallest edge that holds it.
            length = max(len(expected_s), len(expected_t))
            assert width == min(e for e in edges if e >= length)
    assert sorted(seen) == list(range(len(features["source"])))
    return seen


@pytest.mark.parametrize("ragged", [False, True], ids=["lists", "ragged"])
def test_every_example_once_per_epoch_padded_to_its_bucket(ragged):
    features = examples()
    batches = batches_of(features, 8, longest(features), seed=3, epochs=3, ragged=ragged)
    per_epoch = pipeline.count_batches(pipeline.padded_batches(features, 8, longest(features), lambda b: b))
    assert len(batches) == 3 * per_epoch
    # Each bucket of n examples gives ceil(n / 8) batches, whatever the order.
    edges = pipeline.bucket_edges(longest(features))
    lengths = [max(len(s), len(t)) for s, t in zip(features["source"], features["target"])]
    buckets = [min(e for e in edges if e >= n) for n in lengths]
    assert per_epoch == sum(-(-buckets.count(e) // 8) for e in edges)
    orders = [check_epoch(batches[e * per_epoch : (e + 1) * per_epoch], features, 8) for e in range(3)]
    assert orders[0] != orders[1] != orders[2]  # shuffled anew each epoch


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
    data = pipeline.padded_batches(features, 8, longest(features), lambda b: b["source"], seed=7, first_epoch=0, epochs=2)
    first, second = [b.numpy() for b in data], [b.numpy() for b in data]
    assert len(first) == len(second)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_seed_none_keeps_the_order_within_buckets_and_other_seeds_differ():
    features = examples()
    order = check_epoch(batches_of(features, 8, longest(features)), features, 8)
    edges = pipeline.bucket_edges(longest(features))
    bucket = {i: min(e for e in edges if e >= max(len(features["source"][i]), len(features["target"][i]))) for i in order}
    for edge in edges:
        within = [i for i in order if bucket[i] == edge]
        assert within == sorted(within)
    first = check_epoch(batches_of(features, 8, longest(features), seed=1), features, 8)
    again = check_epoch(batches_of(features, 8, longest(features), seed=1), features, 8)
    other = check_epoch(batches_of(features, 8, longest(features), seed=2), features, 8)
    assert first == again and first != other


def test_one_bucket_when_everything_is_short():
    features = {"ids": [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11, 12], [13, 14]]}
    batches = list(pipeline.padded_batches(features, 3, 8, lambda b: b["ids"]))
    assert [b.shape for b in batches] == [(3, 8), (1, 8)]
    assert pipeline.count_batches(pipeline.padded_batches(features, 3, 8, lambda b: b["ids"])) == 2


def test_data_is_reachable_from_the_package_import():
    import keras_seq as ks
    import keras_seq.data.mlm

    assert ks.data.TokenMasker is keras_seq.data.mlm.TokenMasker
    with pytest.raises(AttributeError, match="no attribute 'datasets'"):
        ks.datasets


def test_batches_have_tf_data_autotuning_off():
    """Deleting an autotuned iterator waits for the tuning thread (`_backend.tf_data_without_autotuning`)."""
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
    two = [(s.numpy(), t.numpy()) for s, t in pipeline.padded_batches(
        blocks, 8, longest(features), lambda b: (b["source"], b["target"]), 4, 0, 3, variants=2)]
    assert len(one) == len(two)
    per_epoch = len(one) // 3
    for index, ((a_source, a_target), (b_source, b_target)) in enumerate(zip(one, two)):
        np.testing.assert_array_equal(a_source, b_source)  # same examples in the same order
        block = (index // per_epoch) % 2
        np.testing.assert_array_equal(np.where(a_target > 0, a_target + 50 * block, 0), b_target)


def test_variants_must_split_the_rows_into_equal_blocks():
    features = examples(count=45)
    with pytest.raises(ValueError, match="variants"):
        pipeline.padded_batches(features, 8, longest(features), lambda b: b, variants=2)
