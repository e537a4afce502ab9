"""SubwordVocabulary against the sentencepiece package itself: same ids, exact round trips, byte fallback."""

import pytest
import sentencepiece
import tensorflow as tf

from keras_seq.data import phrasebook, text
from keras_seq.data.subword import SubwordVocabulary, vocabulary_from_config

UNSEEN = ["Ωmega ✓ 日本語 — naïve", "Delete %(name)s? Use --force on /etc/config.ini (v2.0.1)", "« Bonjour » : ça va ?"]


@pytest.fixture(scope="module")
def corpus():
    train, _ = phrasebook.english_french_pairs(size=300, valid_size=10)
    return (
        [s for s, _ in train]
        + [t for _, t in train]
        + ["Cannot open %(name)s: file not found.", "Use --force to overwrite {count} files."] * 5
    )


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def vocab(request, corpus):
    return SubwordVocabulary.train(corpus, 400, request.param)


def reference(vocab):
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(vocab.model)
    return processor


def test_reserved_ids_are_those_of_the_word_vocabularies(vocab):
    assert vocab.tokens[: len(text.RESERVED)] == ["<pad>", "<s>", "</s>", "<unk>"]
    processor = reference(vocab)
    assert (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id()) == (
        text.PAD,
        text.START,
        text.END,
        text.UNKNOWN,
    )
    assert len(vocab) == processor.GetPieceSize() <= 400


def test_ids_equal_sentencepiece_and_round_trip_exactly(vocab, corpus):
    sentences = corpus[:50] + UNSEEN
    ids = vocab.encode(sentences).to_list()
    assert ids == reference(vocab).EncodeAsIds(sentences)
    assert all(text.UNKNOWN not in row for row in ids)  # byte fallback: no unknown characters
    decoded = [s.decode("utf-8") for s in vocab.decode(vocab.encode(sentences).to_tensor()).numpy()]
    assert decoded == [" ".join(s.split()) for s in sentences]


def test_start_end_and_padding(vocab):
    ids = vocab.encode(["the cat", "Ωmega"], add_start=True, add_end=True)
    rows = ids.to_list()
    assert all(row[0] == text.START and row[-1] == text.END for row in rows)
    padded = ids.to_tensor()
    after_end = tf.concat([padded, tf.fill([2, 3], 7)], axis=1)  # ids after the end id are ignored
    assert [s.decode() for s in vocab.decode(after_end).numpy()] == ["the cat", "Ωmega"]


def test_config_file_and_table_round_trips(vocab, tmp_path):
    again = vocabulary_from_config(vocab.get_config())
    assert isinstance(again, SubwordVocabulary) and again.model == vocab.model
    vocab.save(tmp_path / "v.model")
    loaded = SubwordVocabulary.load(tmp_path / "v.model")
    assert loaded.encode(UNSEEN).to_list() == vocab.encode(UNSEEN).to_list()
    table = vocab.lookup_table()
    assert vocab.encode(UNSEEN, table=table).to_list() == vocab.encode(UNSEEN).to_list()
    assert vocab.split("the cat") == reference(vocab).EncodeAsPieces("the cat")
    word = text.Vocabulary(["the", "cat"])
    assert vocabulary_from_config(word.get_config()).tokens == word.tokens


def test_lowercase_and_a_size_past_the_data(corpus):
    small = SubwordVocabulary.train(corpus[:40], 100000, lowercase=True)
    assert 260 < len(small) < 100000  # an upper bound: the data supports fewer pieces
    assert small.encode(["THE CAT"]).to_list() == small.encode(["the cat"]).to_list()
    assert vocabulary_from_config(small.get_config()).lowercase
    many_characters = [chr(c) * 3 for c in range(0x4E00, 0x4E00 + 300)]  # 300 characters that need an id each
    raised = SubwordVocabulary.train(many_characters, 270, byte_fallback=False)
    assert len(raised) > 300 and raised.encode([many_characters[5]]).to_list()[0] != [text.UNKNOWN]


def test_bad_input_raises_value_errors(corpus, tmp_path):
    with pytest.raises(ValueError, match="`model_type` expected one of"):
        SubwordVocabulary.train(corpus, 400, "wordpiece")
    with pytest.raises(ValueError, match="`vocabulary_size` expected more than 260"):
        SubwordVocabulary.train(corpus, 200)
    with pytest.raises(ValueError, match="`texts` expected at least one non-empty string"):
        SubwordVocabulary.train(["", "  "], 400)
    with pytest.raises(ValueError, match="expected a serialized SentencePiece model"):
        SubwordVocabulary(b"not a model")
    (tmp_path / "broken.model").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="expected a serialized SentencePiece model"):
        SubwordVocabulary.load(tmp_path / "broken.model")
    with pytest.raises(ValueError, match="expected a readable .model file"):
        SubwordVocabulary.load(tmp_path / "missing.model")


def test_sampled_splits_spell_the_same_text_and_repeat_with_their_seed(vocab, corpus):
    # Subword regularization (Kudo, 2018) and BPE-dropout: each draw is a valid split of the same sentence.
    sentences = corpus[:60] + UNSEEN
    processor = reference(vocab)
    alpha = 0.2
    first = vocab.sample(sentences, alpha, seed=3, add_start=True, add_end=True).to_list()
    assert first == vocab.sample(sentences, alpha, seed=3, add_start=True, add_end=True).to_list()
    assert first != vocab.sample(sentences, alpha, seed=4, add_start=True, add_end=True).to_list()
    best = vocab.encode(sentences).to_list()
    assert sum(row[1:-1] != ids for row, ids in zip(first, best)) >= 10  # the draws leave the best split
    for row, sentence in zip(first, sentences):
        assert row[0] == text.START and row[-1] == text.END
        assert processor.decode(row[1:-1]) == sentence


def test_sample_rejects_an_alpha_outside_0_1(vocab):
    with pytest.raises(ValueError, match="alpha"):
        vocab.sample(["a"], 0.0, seed=0)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_in_another_process_gives_the_same_model(corpus, model_type, tmp_path):
    # Every process of a multi-process recipe run trains its own vocabulary from the same data: they must agree.
    import json
    import subprocess
    import sys

    (tmp_path / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    program = (
        "import json, sys; from keras_seq.data.subword import SubwordVocabulary; "
        f"texts = json.load(open({str(tmp_path / 'corpus.json')!r}, encoding='utf-8')); "
        f"sys.stdout.write(SubwordVocabulary.train(texts, 400, {model_type!r}).get_config()['model'])"
    )
    other = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    assert other == SubwordVocabulary.train(corpus, 400, model_type).get_config()["model"]
