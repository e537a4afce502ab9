"""keras_seq.data.loaders: the file readers (formats, blank lines, errors with line numbers)."""

import pytest

from keras_seq.data import loaders


@pytest.fixture
def write(tmp_path):
    def write(content, name="data.tsv"):
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")
        return str(path)

    return write


def test_parallel_tsv(write):
    path = write("I see the cat.\tJe vois le chat.\n\n  She is here. \t Elle est là.\r\nWe go.\tNous allons.")
    assert loaders.read_parallel_tsv(path) == [
        ("I see the cat.", "Je vois le chat."),
        ("She is here.", "Elle est là."),
        ("We go.", "Nous allons."),
    ]


def test_labelled_tsv(write):
    assert loaders.read_labelled_tsv(write("positive\tGreat film.\nnegative\tDull.\n")) == [
        ("positive", "Great film."),
        ("negative", "Dull."),
    ]


def test_byte_order_mark_is_not_part_of_the_first_field(write):
    path = write("\ufeffpositive\tGreat film.\nnegative\tDull.\n".encode("utf-8"))
    assert loaders.read_labelled_tsv(path)[0] == ("positive", "Great film.")


@pytest.mark.parametrize(
    "content, line",
    [
        ("a\tb\nno tab here\n", 2),
        ("a\tb\n\n\na\tb\tc\n", 4),
    ],
)
def test_two_column_errors_name_the_line(write, content, line):
    path = write(content)
    with pytest.raises(ValueError, match=f"line {line}: expected `source<TAB>target`") as error:
        loaders.read_parallel_tsv(path)
    assert path in str(error.value)


@pytest.mark.parametrize("content, line", [("\tonly a text\n", 1), ("a\tb\nlabel only\t  \n", 2)])
def test_labelled_lines_need_both_sides(write, content, line):
    with pytest.raises(ValueError, match=f"line {line}: expected `label<TAB>text` with both non-empty"):
        loaders.read_labelled_tsv(write(content))


def test_parallel_pairs_are_cleaned_and_counted(write):
    long_line = "word " * 1000
    content = (
        "\ufeffI see.\tJe vois.\r\n"  # a byte order mark and CRLF line ends
        "\tonly a target\r\n"
        "I see. \tJe vois.\r\n"  # a repeat once stripped
        "We go.\tNous allons.\r\n"
        f"{long_line}\tun mot\r\n"
        "Open.\t \r\n"
    )
    pairs = loaders.read_parallel_tsv(write(content))
    assert len(pairs) == 6 and pairs[0] == ("I see.", "Je vois.")
    kept, counts = loaders.clean_parallel(pairs)
    assert kept == [("I see.", "Je vois."), ("We go.", "Nous allons.")]
    assert counts == {"empty": 2, "duplicates": 1, "too_long": 1}
    assert loaders.clean_parallel(pairs, max_characters=12)[1]["too_long"] == 1
    assert loaders.clean_parallel(pairs, max_characters=5)[1]["too_long"] == 3


@pytest.mark.parametrize("content", ["", "\n \n\t\n"], ids=["empty", "blank"])
def test_no_example(write, content):
    with pytest.raises(ValueError, match="got no example"):
        loaders.read_labelled_tsv(write(content))


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="expected an existing file"):
        loaders.read_parallel_tsv(str(tmp_path / "missing.tsv"))
    with pytest.raises(ValueError, match="expected an existing file"):
        loaders.read_text(str(tmp_path))  # a folder is not a data file


def test_undecodable_bytes(write):
    with pytest.raises(ValueError, match="expected UTF-8 text, got undecodable bytes at 13"):
        loaders.read_text(write(b"Caf\xc3\xa9 ok. Caf\xe9"))


def test_read_text(write):
    assert loaders.read_text(write("Alice was\nbeginning\r\nto get very tired.\n", "book.txt")) == (
        "Alice was\nbeginning\nto get very tired."
    )
    with pytest.raises(ValueError, match="empty file"):
        loaders.read_text(write(" \n\n", "blank.txt"))


def test_read_tagged(write):
    content = "The\tDET\ncat\tNOUN \n.\tPUNCT\n\n\n\nIt\tPRON\nsleeps\tVERB\n"
    assert loaders.read_tagged(write(content, "tags.txt")) == [
        [("The", "DET"), ("cat", "NOUN"), (".", "PUNCT")],
        [("It", "PRON"), ("sleeps", "VERB")],
    ]


@pytest.mark.parametrize(
    "content, line", [("The\tDET\ncat NOUN\n", 2), ("a\tDET\n\nb\tX\tY\n", 3), ("a\t \n", 1), ("\tDET\n", 1)]
)
def test_tagged_errors_name_the_line(write, content, line):
    with pytest.raises(ValueError, match=f"line {line}: expected `token<TAB>tag`"):
        loaders.read_tagged(write(content, "tags.txt"))


def test_tagged_without_a_sequence(write):
    with pytest.raises(ValueError, match="got no sequence"):
        loaders.read_tagged(write("\n\n", "tags.txt"))
