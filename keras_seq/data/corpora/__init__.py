"""Real corpora shipped inside the package, each with its provenance and licences (nothing is downloaded).

`software_en_fr`: English->French software-interface messages (menus, messages,
options, errors) from the French translation catalogs of BSD- and MIT-licensed
Python packages; `software_en_fr/PROVENANCE.md` names every package, version,
wheel hash and catalog, `software_en_fr/LICENSES/` holds their licences, and
`python -m keras_seq.data.corpora.build software_en_fr` rebuilds it byte for byte.
"""

import collections
import functools
import gzip
from importlib import resources

SPLITS = ("train", "valid", "test")


@functools.lru_cache(maxsize=1)
def _software_rows():
    data = resources.files(__package__).joinpath("software_en_fr", "pairs.tsv.gz").read_bytes()
    return tuple(tuple(line.split("\t")) for line in gzip.decompress(data).decode("utf-8").splitlines())


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
    if split not in SPLITS:
        raise ValueError(f"software_en_fr: `split` expected one of {SPLITS}, got {split!r}.")
    known = software_origins()
    for argument, names in (("origins", origins or ()), ("exclude", exclude)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"software_en_fr: `{argument}` expected origins among {sorted(known)}, got {unknown}.")
    return [
        (source, target) for row_split, origin, source, target in _software_rows()
        if row_split == split and (origins is None or origin in origins) and origin not in exclude
    ]
