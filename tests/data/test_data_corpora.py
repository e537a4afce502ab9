"""The shipped software_en_fr corpus: size, disjoint splits, provenance and licences, and its build steps."""

import gzip
import io
import re
import struct
from importlib import resources

import pytest

from keras_seq.data import corpora
from keras_seq.data.corpora import build

PERMISSIVE = {"BSD-2-Clause", "BSD-3-Clause", "MIT", "Apache-2.0"}
FOLDER = resources.files(corpora).joinpath("software_en_fr")


def test_splits_are_large_disjoint_and_follow_the_hash():
    splits = {split: corpora.software_en_fr(split) for split in corpora.SPLITS}
    assert sum(map(len, splits.values())) >= 8000 and all(len(pairs) >= 300 for pairs in splits.values())
    sources = {split: {s for s, _ in pairs} for split, pairs in splits.items()}
    assert (
        not (sources["train"] & sources["valid"])
        and not (sources["train"] & sources["test"])
        and not (sources["valid"] & sources["test"])
    )
    assert all(build.split_of(s) == split for split, pairs in splits.items() for s, _ in pairs)
    assert all(
        len(s) == len(set(s)) for s in ([x for x, _ in pairs] for pairs in splits.values())
    )  # one target per source


def test_every_origin_has_its_provenance_and_licence():
    provenance = FOLDER.joinpath("PROVENANCE.md").read_text(encoding="utf-8")
    origins = corpora.software_origins()
    assert len(origins) >= 5 and sum(origins.values()) == sum(len(corpora.software_en_fr(s)) for s in corpora.SPLITS)
    for origin, count in origins.items():
        row = next(line for line in provenance.splitlines() if line.startswith(f"| {origin} |"))
        fields = [field.strip() for field in row.strip("|").split("|")]
        assert fields[4] in PERMISSIVE and int(fields[5]) == count and re.fullmatch(r"[0-9a-f]{64}", fields[3])
        licence = FOLDER.joinpath("LICENSES", f"{origin}.txt").read_text(encoding="utf-8")
        assert "Permission is hereby granted" in licence or "Redistribution and use" in licence


def test_the_shipped_file_is_what_the_writer_makes_of_its_rows():
    shipped = FOLDER.joinpath("pairs.tsv.gz").read_bytes()
    rows = [tuple(line.split("\t")) for line in gzip.decompress(shipped).decode("utf-8").splitlines()]
    assert rows == sorted(rows, key=lambda row: (corpora.SPLITS.index(row[0]), row[1], row[2]))
    written = io.BytesIO()
    build.write_rows(rows, written)
    assert written.getvalue() == shipped


def test_filtering_by_origin():
    django = corpora.software_en_fr("valid", origins=["django"])
    rest = corpora.software_en_fr("valid", exclude=["django"])
    assert django and len(django) + len(rest) == len(corpora.software_en_fr("valid"))
    with pytest.raises(
        ValueError, match=r"software_en_fr: `split` expected one of \('train', 'valid', 'test'\), got 'dev'"
    ):
        corpora.software_en_fr("dev")
    with pytest.raises(ValueError, match="`exclude` expected origins among"):
        corpora.software_en_fr("train", exclude=["nowhere"])


def mo_file(entries):
    """The bytes of a little-endian GNU .mo file holding `(msgid, msgstr)` entries (the format's layout)."""
    entries = sorted(entries)
    count = len(entries)
    originals_at, translations_at = 28, 28 + 8 * count
    data_at = translations_at + 8 * count
    blob, tables = b"", ([], [])
    for side in (0, 1):
        for entry in entries:
            encoded = entry[side].encode("utf-8")
            tables[side].append((len(encoded), data_at + len(blob)))
            blob += encoded + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, count, originals_at, translations_at, 0, 0)
    return header + b"".join(struct.pack("<2I", *e) for e in tables[0] + tables[1]) + blob


def test_catalog_pairs_read_mo_files():
    data = mo_file(
        [
            ("", "Content-Type: text/plain; charset=UTF-8\n"),
            ("Delete %(name)s?", "Supprimer %(name)s ?"),
            ("%d file\x00%d files", "%d fichier\x00%d fichiers"),
            ("menu\x04Open", "Ouvrir"),
        ]
    )
    assert build.catalog_pairs(data) == [
        ("%d file", "%d fichier"),
        ("Delete %(name)s?", "Supprimer %(name)s ?"),
        ("Open", "Ouvrir"),
    ]
    with pytest.raises(ValueError, match="expected a GNU .mo file"):
        build.read_mo(b"\x00" * 28)


@pytest.mark.parametrize(
    "pair, expected",
    [
        (
            ("Use <b>--force</b> on  config.ini", "Utilisez <b>--force</b> sur config.ini"),
            ("Use --force on config.ini", "Utilisez --force sur config.ini"),
        ),
        (
            ("Version 2.0 of {count} %(name)s", "Version 2.0 de {count} %(name)s"),
            ("Version 2.0 of {count} %(name)s", "Version 2.0 de {count} %(name)s"),
        ),
        (("OK", "OK"), None),  # untranslated
        (("%s", "%s"), None),
        (("x", "y"), None),  # too short
        (("Save", "Enregistrer toutes les modifications de ce document maintenant"), None),  # lengths 3x apart
        (("12:30", "12 h 30"), None),  # no letter in the source
    ],
)
def test_clean_pair(pair, expected):
    assert build.clean_pair(*pair) == expected


@pytest.mark.parametrize("corpus, filename", [("loc_workshop_en", "lines.tsv.gz"), ("sotu_en", "addresses.tsv.gz")])
def test_each_corpus_has_provenance_a_licence_and_its_writers_bytes(corpus, filename):
    folder = resources.files(corpora).joinpath(corpus)
    provenance = folder.joinpath("PROVENANCE.md").read_text(encoding="utf-8")
    assert re.search(r"sha256 `[0-9a-f]{64}`", provenance) and "public domain" in provenance.lower()
    assert any(name.name.endswith(".txt") for name in folder.joinpath("LICENSES").iterdir())
    shipped = folder.joinpath(filename).read_bytes()
    rows = [tuple(line.split("\t")) for line in gzip.decompress(shipped).decode("utf-8").splitlines()]
    written = io.BytesIO()
    build.write_rows(rows, written)
    assert written.getvalue() == shipped


def test_loc_workshop_en_is_real_prose_in_hashed_paragraphs():
    splits = {split: corpora.loc_workshop_en(split) for split in corpora.SPLITS}
    assert 200_000 <= len(splits["train"]) <= 1_000_000 and all(len(splits[s]) >= 10_000 for s in ("valid", "test"))
    for split, text in splits.items():
        paragraphs = [p for p in text.split("\n\n") if p.strip()]
        assert all(build.split_of(p) == split for p in paragraphs)
    assert "Gutenberg Etext" not in "".join(splits.values()) and "\r" not in splits["train"]
    with pytest.raises(ValueError, match=r"loc_workshop_en: `split` expected one of"):
        corpora.loc_workshop_en("dev")


def test_prose_rows_keep_paragraphs_whole():
    text = (
        "The Project Gutenberg Etext of X\r\n\r\nOne line,  \r\nthe same paragraph.\r\n\r\n\r\nAnother.\r\n"
        "*End of The Project Gutenberg Etext of X\r\n"
    )
    rows = build.prose_rows(text)
    first, second = "One line,\nthe same paragraph.", "Another."
    assert rows == [
        (build.split_of(first), "One line,"),
        (build.split_of(first), "the same paragraph."),
        (build.split_of(first), ""),
        (build.split_of(second), "Another."),
        (build.split_of(second), ""),
    ]


def test_sotu_addresses_are_split_whole_and_cleaned():
    addresses = {split: corpora.sotu_addresses(split) for split in corpora.SPLITS}
    assert sum(map(len, addresses.values())) == 233 and all(len(a) >= 10 for a in addresses.values())
    keys = {split: {(a["year"], a["president"]) for a in rows} for split, rows in addresses.items()}
    assert (
        not (keys["train"] & keys["valid"])
        and not (keys["train"] & keys["test"])
        and not (keys["valid"] & keys["test"])
    )
    assert all(
        build.split_of(f"{year} {president}", held_out=10) == split
        for split, k in keys.items()
        for year, president in k
    )
    assert not any("(Applause" in a["text"] for rows in addresses.values() for a in rows)


def test_address_rows_drop_audience_reactions():
    rows = build.address_rows(
        [
            {
                "year": 2000,
                "name": "A B",
                "party": "P",
                "text": "Thank you. (Applause.)  We will\u2014(applause)\u2014go on.",
            }
        ]
    )
    assert rows == [(build.split_of("2000 A B", held_out=10), "2000", "A B", "P", "Thank you. We will go on.")]


def test_sotu_party_passages_are_whole_sentences_of_two_parties():
    passages = corpora.sotu_party_passages("valid")
    assert len(passages) >= 500 and {label for label, _ in passages} == {"Democratic", "Republican"}
    assert all(len(text.split()) >= 60 for _, text in passages)
    ends = [text.rstrip()[-1] in ".!?\"')]\u201d" for _, text in passages]  # a few end inside a table of figures
    assert sum(ends) >= 0.99 * len(passages)


def test_sotu_punctuation_tags_the_mark_after_each_word():
    sequences = corpora.sotu_punctuation("valid", length=40)
    assert len(sequences) >= 1000 and all(len(s) == 40 for s in sequences)
    tags = {tag for s in sequences for _, tag in s}
    assert tags == {"O", "COMMA", "PERIOD", "QUESTION"}
    assert all(word == word.lower() and word[-1].isalnum() for s in sequences for word, _ in s)


def test_punctuation_tags_read_the_mark_after_each_word():
    text = 'Is it "war?" No, Sir: we (the people) shall \u2014 I trust \u2014 prevail; and win. "Yes!" 1,000,000 men.'
    assert corpora.punctuation_tags(text) == [
        ("is", "O"),
        ("it", "O"),
        ("war", "QUESTION"),
        ("no", "COMMA"),
        ("sir", "COMMA"),
        ("we", "O"),
        ("the", "O"),
        ("people", "O"),
        ("shall", "O"),
        ("i", "O"),
        ("trust", "O"),
        ("prevail", "PERIOD"),
        ("and", "O"),
        ("win", "PERIOD"),
        ("yes", "PERIOD"),
        ("1,000,000", "O"),
        ("men", "PERIOD"),
    ]
