"""keras_seq.data.preparation: the streamed passes (clean, sample, encode) into a prepared folder."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_seq.data import loaders, preparation, prepared, text


def pairs_file(tmp_path):
    lines = [f"the cat number {i}\tle chat numéro {i}" for i in range(500)]
    lines[10] = "\tempty source"
    lines[11] = "a\tthis target is far too long for its one-letter source"  # ratio past 9
    lines[12] = lines[3]  # a duplicate
    lines[13] = "x" * 5000 + "\ty"  # past the too-long limit (and the ratio)
    lines[14] = "z" * 3000 + "\t" + "w" * 3000  # too long
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def word_build(sample):
    vocab = text.Vocabulary.build([s for s, _ in sample] + [t for _, t in sample], level="word")
    return {"joint": vocab.get_config()}, vocab


def word_encode(chunk, vocab, variant):
    source = vocab.encode([s for s, _ in chunk])
    target = vocab.encode([t for _, t in chunk], add_start=True, add_end=True)
    keep = (source.row_lengths() <= 4).numpy()  # a --max-length of 4: "the cat number N" fits
    return {
        "source": (source.flat_values.numpy(), source.row_lengths().numpy()),
        "target": (target.flat_values.numpy(), target.row_lengths().numpy()),
    }, keep


def test_preparation_cleans_samples_and_encodes_what_it_keeps(tmp_path, capsys):
    path, lines = pairs_file(tmp_path)
    records = lambda: loaders.streamed_parallel_tsv(str(path))
    built = {}

    def build(sample):
        built["sample"] = sample
        return word_build(sample)

    data = preparation.prepare(
        str(tmp_path / "prepared"),
        records,
        "test",
        build,
        word_encode,
        ("source", "target"),
        len,
        vocab_sample=100,
        seed=0,
        max_ratio=9.0,
    )
    left_out = data.manifest["left_out"]
    assert left_out == {"empty": 1, "length_ratio": 2, "duplicates": 1, "too_long": 1, "longer_than_max_length": 0}
    assert data.rows == 495 and data.manifest["vocabularies"]["joint"]["level"] == "word"
    assert len(built["sample"]) == 100 and len(set(built["sample"])) == 100  # a sample of distinct kept pairs
    vocab = text.Vocabulary(**data.manifest["vocabularies"]["joint"])
    kept = [tuple(line.split("\t")) for number, line in enumerate(lines) if number not in (10, 11, 12, 13, 14)]
    expected = vocab.encode([t for _, t in kept], add_start=True, add_end=True)
    flat, lengths = data.gather(0, np.arange(data.rows))["target"]
    assert flat.tolist() == expected.flat_values.numpy().tolist()
    assert lengths.tolist() == expected.row_lengths().numpy().tolist()
    err = capsys.readouterr().out
    assert "test: reading: 500 records" in err and "left out: 1 empty, 2 length ratio, 1 duplicates, 1 too long" in err
    # The same seed draws the same sample; the stored files are read back alike by a new reader.
    again = preparation.sample(records, np.ones(500, bool), 100, seed=0)
    assert again == preparation.sample(records, np.ones(500, bool), 100, seed=0)
    assert (
        prepared.Prepared(data.directory).gather(0, [5])["source"][0].tolist()
        == vocab.encode([kept[5][0]]).flat_values.numpy().tolist()
    )


def test_clean_parallel_keeps_the_rules_of_the_streamed_scan():
    pairs = [("a", "b"), ("a", "b"), ("", "c"), ("d", "e" * 20)]
    kept, counts = loaders.clean_parallel(pairs)
    assert kept == [("a", "b"), ("d", "e" * 20)] and counts == {"empty": 1, "duplicates": 1, "too_long": 0}
    mask, counts = preparation.scan(lambda: iter(pairs), max_ratio=9.0)
    assert mask.tolist() == [True, False, False, False] and counts["length_ratio"] == 1


def test_rows_past_the_longest_and_no_usable_rows(tmp_path):
    path = tmp_path / "long.tsv"
    path.write_text("one two three four five six\tun\nshort\tcourt\n", encoding="utf-8")
    records = lambda: loaders.streamed_parallel_tsv(str(path))
    data = preparation.prepare(
        str(tmp_path / "p"),
        records,
        "test",
        word_build,
        word_encode,
        ("source", "target"),
        len,
        vocab_sample=10,
        seed=0,
    )
    assert data.rows == 1 and data.manifest["left_out"]["longer_than_max_length"] == 1
    path.write_text("\tun\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected some usable examples, got none after cleaning .left out: 1 empty"):
        preparation.prepare(
            str(tmp_path / "q"),
            records,
            "test",
            word_build,
            word_encode,
            ("source", "target"),
            len,
            vocab_sample=10,
            seed=0,
        )


def test_digests_follow_the_content(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("a\tb\n", encoding="utf-8")
    first = preparation.file_digest(str(path))
    path.write_text("a\tc\n", encoding="utf-8")
    assert preparation.file_digest(str(path)) != first
    assert preparation.records_digest([("a", "b")]) != preparation.records_digest([("a", "c")])


def test_a_known_file_is_found_by_its_fingerprint_and_verify_reads_it_whole(tmp_path, monkeypatch, capsys):
    block = 1 << 16
    path = tmp_path / "big.tsv"
    content = bytearray(b"a\tb\n" * (preparation.FINGERPRINT_BLOCKS * block // 2))  # twice the sampled bytes
    path.write_bytes(bytes(content))
    cache = str(tmp_path / "prepared")
    digest = preparation.known_file_digest(str(path), cache)
    assert digest == preparation.file_digest(str(path))
    # Bytes between two sampled blocks change, with the size and the modification time kept: the
    # fingerprint is blind to them, so the remembered digest comes back without reading the file...
    status = os.stat(path)
    between = block + 16  # past the first block; the second starts about two blocks on
    content[between : between + 4] = b"c\td\n"
    path.write_bytes(bytes(content))
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    read = []
    monkeypatch.setattr(preparation, "file_digest", lambda p: read.append(p) or "computed")
    assert preparation.known_file_digest(str(path), cache) == digest and read == []
    # ...and --verify-data reads it whole, says so and corrects the remembered digest.
    assert preparation.known_file_digest(str(path), cache, verify=True) == "computed" and read == [str(path)]
    assert "its content changed with its size and time unchanged" in capsys.readouterr().out
    assert preparation.known_file_digest(str(path), cache) == "computed" and len(read) == 1
    # A new modification time is a new fingerprint: the digest is computed again.
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    assert preparation.known_file_digest(str(path), cache) == "computed" and len(read) == 2


def test_scan_keeps_per_record_data_in_files_and_finds_every_duplicate_across_chunks(monkeypatch):
    monkeypatch.setattr(preparation, "CHUNK", 7)  # many chunks, so repeats fall in other chunks than their first
    records = [(f"s{i % 40}", f"t{i % 40}") for i in range(100)] + [("x" * 200, "y" * 200)]
    kept, counts = preparation.scan(lambda: iter(records))
    assert kept.tolist() == [True] * 40 + [False] * 60 + [True]
    assert counts == {"empty": 0, "length_ratio": 0, "duplicates": 60, "too_long": 0}
    # The default too-long limit: 8 times the 99th percentile of the kept records' longest field, at least 400.
    kept, counts = preparation.scan(lambda: iter(records + [("z" * 2000, "w")] * 3), max_ratio=None)
    assert counts["too_long"] == 1 and counts["duplicates"] == 62


@pytest.mark.nightly
def test_memory_does_not_follow_the_row_count():
    """Preparation adds at most 4 bytes a row, and training's batch plans (4 bytes a row each, the
    next epoch's drawn ahead) with the memory-mapped lengths at most 24: no per-row Python object,
    no memory map of the ids."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "prepared_memory.py")
    small, large = (
        json.loads(subprocess.run([sys.executable, script, str(rows)], capture_output=True, check=True).stdout)
        for rows in (300_000, 3_000_000)
    )
    rows = large["rows"] - small["rows"]
    assert (large["preparation_peak_kib"] - small["preparation_peak_kib"]) * 1024 / rows < 4
    assert (large["training_peak_kib"] - small["training_peak_kib"]) * 1024 / rows < 24
