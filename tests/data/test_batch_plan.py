"""keras_seq.data.prepared and batch_plan: memory-mapped rows, batches by examples or tokens, positions."""

import numpy as np
import pytest

from keras_seq.data import batch_plan, pipeline, prepared


def write_rows(directory, columns, variants=1):
    """A prepared folder of `columns` = {name: [rows of variant 0, ...]} (lists of id lists)."""
    writer = prepared.Writer(str(directory), list(columns), variants, prepared.id_dtype(4000))
    for variant in range(variants):
        encoded = {}
        for name, by_variant in columns.items():
            rows = by_variant[variant]
            encoded[name] = (
                np.concatenate([np.asarray(r, np.int64) for r in rows] + [np.zeros(0, np.int64)]),
                np.asarray([len(r) for r in rows]),
            )
        writer.append(variant, encoded)
    writer.close({})
    return prepared.Prepared(str(directory))


def random_rows(count, seed, longest=40):
    draw = np.random.default_rng(seed)
    return [list(draw.integers(4, 4000, draw.integers(1, longest + 1))) for _ in range(count)]


@pytest.fixture
def data(tmp_path):
    source, target = random_rows(3000, 0), random_rows(3000, 1)
    return write_rows(tmp_path / "prepared", {"source": [source], "target": [target]}), source, target


def test_the_files_give_back_every_row_and_count_what_was_read(data):
    folder, source, target = data
    assert folder.rows == 3000 and folder.longest == max(max(map(len, source)), max(map(len, target)))
    np.testing.assert_array_equal(folder.lengths(), [max(len(s), len(t)) for s, t in zip(source, target)])
    picked = [7, 2, 2999, 100]
    got = folder.gather(0, picked)
    flat, lengths = got["target"]
    assert lengths.tolist() == [len(target[i]) for i in picked]
    assert flat.tolist() == [token for i in picked for token in target[i]]
    batch = prepared.padded(flat, lengths, 6, 45)
    assert batch.shape == (6, 45) and batch[0, : len(target[7])].tolist() == target[7]
    assert not batch[0, len(target[7]) :].any() and not batch[4:].any()
    assert folder.rows_read == 4 and folder.ids_read["source"] == sum(len(source[i]) for i in picked)
    assert folder.bytes_read == 2 * (folder.ids_read["source"] + folder.ids_read["target"])  # uint16 ids
    assert prepared.id_dtype(65536) == np.uint16 and prepared.id_dtype(65537) == np.int32


def rows_of_epoch(plan, epoch):
    return [plan.batch(epoch, index)[0] for index in range(plan.batch_count(epoch))]


def test_batches_by_examples_hold_every_row_once_and_keep_the_old_count(data):
    folder = data[0]
    plan = batch_plan.BatchPlan(folder.lengths, folder.rows, seed=3, max_length=folder.longest, batch_size=32)
    epoch = rows_of_epoch(plan, 0)
    assert len(epoch) == plan.batch_count(0) == -(-3000 // 32)
    assert sorted(np.concatenate(epoch).tolist()) == list(range(3000))
    assert max(len(rows) for rows in epoch) == 32
    assert all((np.diff(rows) > 0).all() for rows in epoch)  # a batch's rows in the data's order
    again = batch_plan.BatchPlan(folder.lengths, folder.rows, seed=3, max_length=folder.longest, batch_size=32)
    assert all((a == b).all() for a, b in zip(rows_of_epoch(again, 0), epoch))  # (seed, epoch) fixes the draw
    assert not all((a == b).all() for a, b in zip(rows_of_epoch(plan, 1), epoch))
    # Within a pool the lengths of a batch vary little: the spread is far below the data's.
    lengths = folder.lengths()
    spread = np.mean([lengths[rows].max() - lengths[rows].min() for rows in epoch if len(rows) == 32])
    assert spread < 0.2 * (lengths.max() - lengths.min())


@pytest.mark.parametrize("edges", [False, True])
def test_token_batches_stay_within_the_budget_and_compile_few_shapes(data, edges):
    folder = data[0]
    plan = batch_plan.BatchPlan(
        folder.lengths, folder.rows, seed=1, max_length=folder.longest, batch_tokens=600, pad_to_edges=edges
    )
    lengths, shapes, seen = folder.lengths(), set(), []
    for index in range(plan.batch_count(0)):
        rows, width, padded_rows = plan.batch(0, index)
        seen.append(rows)
        assert width >= lengths[rows].max()
        assert len(rows) == 1 or padded_rows * width <= 600
        if edges:
            assert width in pipeline.bucket_edges(folder.longest) and padded_rows == max(1, 600 // width)
        else:
            assert width == lengths[rows].max() and padded_rows == len(rows)
        shapes.add((padded_rows, width))
    assert sorted(np.concatenate(seen).tolist()) == list(range(3000))
    if edges:
        assert len(shapes) <= len(pipeline.bucket_edges(folder.longest))
    # Greedy cuts: the next row of the sorted pool would not have fitted (few rows short of the budget).
    filled = np.mean([len(r) * plan.batch(0, i)[1] for i, r in enumerate(seen)]) / 600
    assert filled > (0.7 if edges else 0.85)


def test_a_position_is_reached_without_reading_the_batches_before(data):
    folder = data[0]
    plan = batch_plan.BatchPlan(folder.lengths, folder.rows, seed=5, max_length=folder.longest, batch_tokens=500)
    straight = batch_plan.batches_from(folder, plan, (0, 0))
    first = [next(straight) for _ in range(plan.batch_count(0) + 7)]
    read_before = folder.rows_read
    position = plan.position_after((0, 0), plan.batch_count(0) + 3)
    assert position == (1, 3)
    resumed = batch_plan.batches_from(folder, plan, position)
    for expected in first[-4:]:
        got = next(resumed)
        assert all((got[name] == expected[name]).all() for name in ("source", "target"))
    assert folder.rows_read - read_before == sum(len(plan.batch(1, i)[0]) for i in range(3, 7))


def test_target_tokens_count_the_predicted_ids_of_a_batch_from_the_offsets(data):
    from recipes.training_data import PreparedBatches

    folder, source, target = data
    plan = batch_plan.BatchPlan(folder.lengths, folder.rows, seed=3, max_length=folder.longest, batch_tokens=600)
    batches = PreparedBatches(folder, plan, to_model_inputs=None, digest="d")
    read_before = folder.rows_read
    for position in [(0, 0), (0, 5), (1, 2)]:
        rows = plan.batch(*position)[0]
        assert folder.ids_in_rows("source", 0, rows) == sum(len(source[r]) for r in rows)
        assert batches.target_tokens(position) == sum(len(target[r]) - 1 for r in rows)  # the start mark is fed
    assert folder.rows_read == read_before  # counted from the offsets, no row read


def test_each_process_reads_only_its_own_equal_part(data):
    folder = data[0]
    plan = batch_plan.BatchPlan(folder.lengths, folder.rows, seed=0, max_length=folder.longest, batch_size=33, parts=2)
    whole = next(batch_plan.batches_from(folder, plan, (0, 0)))
    rows, _, padded_rows = plan.batch(0, 0)
    assert padded_rows == 34 and whole["source"].shape[0] == 34  # padded to a multiple of the parts
    parts = []
    for index in range(2):
        own = prepared.Prepared(folder.directory)
        parts.append(next(batch_plan.batches_from(own, plan, (0, 0), index, 2)))
        assert own.rows_read == (17, 16)[index]  # the padding row is read by none
    for name in ("source", "target"):
        np.testing.assert_array_equal(np.concatenate([part[name] for part in parts]), whole[name])  # one width for all


def test_variants_are_read_in_turn_by_epoch(tmp_path):
    rows = [random_rows(50, seed) for seed in (0, 1)]
    folder = write_rows(tmp_path / "p", {"ids": rows}, variants=2)
    plan = batch_plan.BatchPlan(
        folder.lengths, folder.rows, seed=None, max_length=folder.longest, batch_size=50, variants=2
    )
    stream = batch_plan.batches_from(folder, plan, (0, 0))
    for variant in (0, 1, 0):
        batch = next(stream)["ids"]
        order = plan.batch(variant, 0)[0]
        assert batch[0, : len(rows[variant][order[0]])].tolist() == rows[variant][order[0]]


def test_bad_settings_fail_early(data):
    folder = data[0]
    with pytest.raises(ValueError, match="BatchPlan.*exactly one"):
        batch_plan.BatchPlan(folder.lengths, folder.rows, 0, 40, batch_size=32, batch_tokens=100)
    with pytest.raises(ValueError, match="batch_tokens"):
        batch_plan.BatchPlan(folder.lengths, folder.rows, 0, 40, batch_tokens=0)
    with pytest.raises(ValueError, match="complete prepared folder"):
        prepared.Prepared(str(folder.directory) + "-missing")
