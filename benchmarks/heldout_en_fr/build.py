"""Build `heldout_en_fr`: English->French software messages that the translate defaults never saw.

    python benchmarks/heldout_en_fr/build.py --output-dir /tmp/heldout

The corpus is made like the shipped `software_en_fr`, but from the French gettext
catalogs of 29 other packages (`SOURCES` below), so that `recipes.translate` can be
measured on text that no default was chosen on. It is not shipped; this script
writes `train.tsv`, `valid.tsv` and `test.tsv` (`source<TAB>target`, UTF-8) and the
packages' licences (`LICENSES/`) to the output folder. Packages, versions, wheel
hashes, licences and the expected counts: `PROVENANCE.md` beside this file.

Steps: pip downloads each wheel (checked against its SHA-256); each French catalog
is compiled to `.mo` (`compiled_catalogs`); `keras_seq/data/corpora/build.py`
cleans, de-duplicates and splits the pairs (`corpus_rows`, with `SOURCES` below in
place of its own); then pairs whose English source is in `software_en_fr` and pairs
whose placeholders differ between source and target are dropped.
"""

import argparse
import collections
import gzip
import importlib.util
import io
import os
import re
import subprocess
import sys
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Imported by path: through the `keras_seq` package it would load Keras and TensorFlow, which it does not need.
_spec = importlib.util.spec_from_file_location(
    "corpora_build", os.path.join(REPO, "keras_seq", "data", "corpora", "build.py")
)
corpora_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpora_build)
SHIPPED_PAIRS = os.path.join(REPO, "keras_seq", "data", "corpora", "software_en_fr", "pairs.tsv.gz")


def _catalogs(*packages, locale="fr"):
    """A regex on wheel paths: the French `.po` and `.mo` catalogs under these top-level packages."""
    return rf"^({'|'.join(packages)})/(.+/)?{locale}/LC_MESSAGES/[^/]+\.(po|mo)$"


# Shaped like `corpora_build.SOURCES` (origin, pip requirement, wheel file, its sha256, licence (SPDX),
# catalogs (regex on wheel paths), licence file in the wheel); ties in target choice go to the earlier package.
SOURCES = (
    (
        "horizon",
        "horizon==27.0.0",
        "horizon-27.0.0-py3-none-any.whl",
        "8a981dae4fb6626e71553aa185f6e429b0b1efb86b04b0a72c3b18ee04f1f990",
        "Apache-2.0",
        _catalogs("horizon", "openstack_auth", "openstack_dashboard"),
        "horizon-27.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "apache-superset",
        "apache-superset==6.1.0",
        "apache_superset-6.1.0-py3-none-any.whl",
        "4b5886b2d6389a32df790aeae2532ad72529bce1af93b6edf2d1b2a8bf658748",
        "Apache-2.0",
        _catalogs("superset"),
        "apache_superset-6.1.0.dist-info/licenses/LICENSE.txt",
    ),
    (
        "spyder",
        "spyder==6.1.8",
        "spyder-6.1.8-py3-none-any.whl",
        "4da836742a7138c93392a8a0bd1a5ff40002cf92d217ef0e7bed11b522322f90",
        "MIT",
        _catalogs("spyder"),
        "spyder-6.1.8.dist-info/licenses/LICENSE.txt",
    ),
    (
        "django-helpdesk",
        "django-helpdesk==2.6.1",
        "django_helpdesk-2.6.1-py3-none-any.whl",
        "f2167cd340577088be861fa5d25ca6f828226ac0d25db7e67b96a35a89ca4e44",
        "BSD-3-Clause",
        _catalogs("helpdesk"),
        "django_helpdesk-2.6.1.dist-info/licenses/LICENSE",
    ),
    (
        "mezzanine",
        "mezzanine==6.1.1",
        "mezzanine-6.1.1-py2.py3-none-any.whl",
        "abb8a3d7ee91b724d8aa89fa971bad1cf8e368c21055da4913e20e1418a96d1b",
        "BSD-2-Clause",
        _catalogs("mezzanine"),
        "mezzanine-6.1.1.dist-info/licenses/LICENSE",
    ),
    (
        "nbclassic",
        "nbclassic==1.3.3",
        "nbclassic-1.3.3-py3-none-any.whl",
        "dcee5149aa6aa01846c7458d6394b29b325213b5e118ee14c80d689122e0e4f2",
        "BSD-3-Clause",
        _catalogs("nbclassic", locale="fr_FR"),
        "nbclassic-1.3.3.dist-info/licenses/LICENSE",
    ),
    (
        "trove-dashboard",
        "trove-dashboard==27.0.0",
        "trove_dashboard-27.0.0-py3-none-any.whl",
        "3e2ddb8138a0251da34c377f8283c6b8cac024d29a12976da04545a14ccdab09",
        "Apache-2.0",
        _catalogs("trove_dashboard"),
        "trove_dashboard-27.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "manila-ui",
        "manila-ui==16.0.0",
        "manila_ui-16.0.0-py3-none-any.whl",
        "b05f56cc010900aa451412288d077f3a485132851999d41cb36209ed7eb5e738",
        "Apache-2.0",
        _catalogs("manila_ui"),
        "manila_ui-16.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "djangocms-frontend",
        "djangocms-frontend==2.5.3",
        "djangocms_frontend-2.5.3-py3-none-any.whl",
        "34eb6ad93c48387d60e8e3e4959dbe5652289baedf7742e3dafab994162bd204",
        "BSD-3-Clause",
        _catalogs("djangocms_frontend"),
        "djangocms_frontend-2.5.3.dist-info/licenses/LICENSE",
    ),
    (
        "flask-security-too",
        "flask-security-too==5.9.2",
        "flask_security_too-5.9.2-py3-none-any.whl",
        "98f5e676767735dd2ff48afa92bcc9916778306b103999f8f4538a36b096f111",
        "MIT",
        _catalogs("flask_security", locale="fr_FR"),
        "flask_security_too-5.9.2.dist-info/licenses/LICENSE.txt",
    ),
    (
        "django-filer",
        "django-filer==3.6.0",
        "django_filer-3.6.0-py3-none-any.whl",
        "b441e081f0f5688d234815bd0421a1bafa10217eac31bdfe7c3ef3b092430bb3",
        "BSD-3-Clause",
        _catalogs("filer"),
        "django_filer-3.6.0.dist-info/licenses/LICENSE",
    ),
    (
        "starlette-admin",
        "starlette-admin==1.0.3",
        "starlette_admin-1.0.3-py3-none-any.whl",
        "c240c333afed8e6844e3a889dda177818043619d95aeb526052908671aadf7aa",
        "MIT",
        _catalogs("starlette_admin"),
        "starlette_admin-1.0.3.dist-info/licenses/LICENSE",
    ),
    (
        "heat-dashboard",
        "heat-dashboard==16.0.0",
        "heat_dashboard-16.0.0-py3-none-any.whl",
        "205e17a8fb2a24165f3fc1b8ae9c491470e7ea3ef4cda33272c96114d88887d8",
        "Apache-2.0",
        _catalogs("heat_dashboard"),
        "heat_dashboard-16.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "magnum-ui",
        "magnum-ui==19.0.0",
        "magnum_ui-19.0.0-py3-none-any.whl",
        "80642e89bba9b4d6c5eb9e1b774f3593f564e0076f96d1f3158c639575e7f42f",
        "Apache-2.0",
        _catalogs("magnum_ui"),
        "magnum_ui-19.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "flask-appbuilder",
        "flask-appbuilder==5.3.0",
        "flask_appbuilder-5.3.0-py3-none-any.whl",
        "85d7c9520402848d864ac91672e19c921ca518ddc9b840d631ed6c04306b89ed",
        "BSD-3-Clause",
        _catalogs("flask_appbuilder"),
        "flask_appbuilder-5.3.0.dist-info/LICENSE",
    ),
    (
        "django-debug-toolbar",
        "django-debug-toolbar==8.0.0",
        "django_debug_toolbar-8.0.0-py3-none-any.whl",
        "329dfd6e1c26d9b4501a5cc69294c8bb734206ccb1bd36e96afc4d14128b630a",
        "BSD-3-Clause",
        _catalogs("debug_toolbar"),
        "django_debug_toolbar-8.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "flask-admin",
        "flask-admin==2.2.1",
        "flask_admin-2.2.1-py3-none-any.whl",
        "a0533fd1968543fc621733316bb9c30774b501c119816f1e83d7dcedacb99895",
        "BSD-3-Clause",
        _catalogs("flask_admin"),
        "flask_admin-2.2.1.dist-info/licenses/LICENSE",
    ),
    (
        "ironic-ui",
        "ironic-ui==6.9.0",
        "ironic_ui-6.9.0-py3-none-any.whl",
        "88b1fd90544e26255bf17902614b3195e7fc006438c711e4ed2bad5ef9d8cdc8",
        "Apache-2.0",
        _catalogs("ironic_ui"),
        "ironic_ui-6.9.0.dist-info/licenses/LICENSE",
    ),
    (
        "django-two-factor-auth",
        "django-two-factor-auth==1.18.1",
        "django_two_factor_auth-1.18.1-py3-none-any.whl",
        "ccc9cee10be880037914e572389be6dcae93947709a8a9ff01fb23f7dee254f2",
        "MIT",
        _catalogs("two_factor"),
        "django_two_factor_auth-1.18.1.dist-info/licenses/LICENSE",
    ),
    (
        "octavia-dashboard",
        "octavia-dashboard==18.0.0",
        "octavia_dashboard-18.0.0-py3-none-any.whl",
        "90c1cfbeac0a9bfe4905be62b4bee35a56291d5bd7c4acbcd8802b0ab968fa90",
        "Apache-2.0",
        _catalogs("octavia_dashboard"),
        "octavia_dashboard-18.0.0.dist-info/licenses/LICENSE",
    ),
    (
        "django-filter",
        "django-filter==26.2",
        "django_filter-26.2-py3-none-any.whl",
        "df8f737841d6359df00b84dda9b5ab59067fe60292091f1bdae1e3e6281cedb0",
        "BSD-3-Clause",
        _catalogs("django_filters"),
        "django_filter-26.2.dist-info/LICENSE",
    ),
    (
        "wtforms",
        "wtforms==3.3.2",
        "wtforms-3.3.2-py3-none-any.whl",
        "2fac992f39102d6268b06e05cdbdf37a7e9b9a4e103916d2dff1d09a080b531d",
        "BSD-3-Clause",
        _catalogs("wtforms"),
        "wtforms-3.3.2.dist-info/licenses/LICENSE.rst",
    ),
    (
        "mkdocs",
        "mkdocs==1.6.1",
        "mkdocs-1.6.1-py3-none-any.whl",
        "db91759624d1647f3f34aa0c3f327dd2601beae39a366d6e064c03468d35c20e",
        "BSD-2-Clause",
        _catalogs("mkdocs"),
        "mkdocs-1.6.1.dist-info/licenses/LICENSE",
    ),
    (
        "django-import-export",
        "django-import-export==4.4.3",
        "django_import_export-4.4.3-py3-none-any.whl",
        "45234e698289fcc1a077ff0c9743b367a76a79c2272c7bf8622b5ff42335c65e",
        "BSD-2-Clause",
        _catalogs("import_export"),
        "django_import_export-4.4.3.dist-info/licenses/LICENSE",
    ),
    (
        "django-simple-history",
        "django-simple-history==3.13.0",
        "django_simple_history-3.13.0-py3-none-any.whl",
        "1cf1d83054479f64aee022023afc1671843aa0a99888799c5c4c3966b0252521",
        "BSD-3-Clause",
        _catalogs("simple_history"),
        "django_simple_history-3.13.0.dist-info/licenses/LICENSE.txt",
    ),
    (
        "django-jazzmin",
        "django-jazzmin==3.0.5",
        "django_jazzmin-3.0.5-py3-none-any.whl",
        "578fb1fc0a1b7e3b8472d2692ace60b1584ccd937c3828e2c9a89bdf94067f94",
        "MIT",
        _catalogs("jazzmin"),
        "django_jazzmin-3.0.5.dist-info/licenses/LICENSE",
    ),
    (
        "django-guardian",
        "django-guardian==3.5.2",
        "django_guardian-3.5.2-py3-none-any.whl",
        "545ea01d528830d936c129a125dc2f1aba581da4c3f3daa5d4d1e31654e276a8",
        "BSD-2-Clause",
        _catalogs("guardian"),
        "django_guardian-3.5.2.dist-info/licenses/LICENSE",
    ),
    (
        "django-axes",
        "django-axes==8.3.1",
        "django_axes-8.3.1-py3-none-any.whl",
        "f7887582fd12713064f1602091ff6152752becae5e891a15bf802746cab0f51a",
        "MIT",
        _catalogs("axes"),
        "django_axes-8.3.1.dist-info/licenses/LICENSE",
    ),
    (
        "django-extensions",
        "django-extensions==4.1",
        "django_extensions-4.1-py3-none-any.whl",
        "0699a7af28f2523bf8db309a80278519362cd4b6e1fd0a8cd4bf063e1e023336",
        "MIT",
        _catalogs("django_extensions"),
        "django_extensions-4.1.dist-info/licenses/LICENSE",
    ),
)
# `.po` catalogs that plain msgfmt does not compile, and what is done instead (PROVENANCE.md).
MSGUNIQ_FIRST = {"nbclassic/i18n/fr_FR/LC_MESSAGES/nbui.po"}  # duplicate definitions: msguniq --use-first
SHIPPED_MO = {  # msgfmt refuses the .po (newline mismatch) and the .po has no fuzzy entry: the wheel's .mo
    "spyder/locale/fr/LC_MESSAGES/spyder.po",
    "jazzmin/locale/fr/LC_MESSAGES/django.po",
}
# printf placeholders (`%(name)s`, `%1$s`, `%s`, `%d`, `%.2f`) and brace ones (`{name}`, `{0}`, `{$ expr $}`).
# Not `keras_seq.metrics.copy_rate`'s pattern: its braces hold no space, so it would keep the pairs whose
# AngularJS expressions (`{$ 'text' $}`, horizon) differ; the corpus that PROVENANCE.md describes drops them.
_PLACEHOLDER = re.compile(r"%\([^)]*\)[-#0 +]*\d*(?:\.\d+)?[sdifr]|%\d+\$[sd]|%[-#0 +]*\d*(?:\.\d+)?[sdifr]|\{[^{}]*\}")


def _run(command, data):
    return subprocess.run(command, input=data, capture_output=True, check=True).stdout


def compiled_catalogs(archive, pattern):
    """`[(path, how, .mo bytes), ...]`: each French catalog that `pattern` picks in the wheel, compiled.

    Where the wheel ships the `.po`, GNU msgfmt compiles it (leaving fuzzy and obsolete
    entries out), after `msguniq --use-first` for those in `MSGUNIQ_FIRST`; the `.mo`
    shipped beside it is used for those in `SHIPPED_MO`, and where there is no `.po`.
    """
    names = set(archive.namelist())
    catalogs = []
    for stem in sorted({name[:-3] for name in names if re.match(pattern, name)}):
        po, mo = stem + ".po", stem + ".mo"
        if po in names and po not in SHIPPED_MO:
            data = archive.read(po)
            how = "msgfmt"
            if po in MSGUNIQ_FIRST:
                data, how = _run(["msguniq", "--use-first", "-"], data), "msguniq --use-first + msgfmt"
            catalogs.append((po, how, _run(["msgfmt", "-o", "-", "-"], data)))
        else:
            if po in names and b"#, fuzzy" in archive.read(po):
                raise ValueError(f"build: {po} has fuzzy entries, which its shipped .mo may hold.")
            catalogs.append((mo, "shipped .mo", archive.read(mo)))
    return catalogs


def placeholders(text):
    """The placeholders of `text` (`%s`, `%d`, `%(name)s`, `{name}`, ...), sorted; `%%` is a literal `%`."""
    return sorted(_PLACEHOLDER.findall(text.replace("%%", "")))


def build(output_dir, wheel_dir):
    """Write the splits and licences to `output_dir`; return the kept rows, the dropped counts and the catalogs."""
    wheels = corpora_build._download(wheel_dir, SOURCES)
    compiled, how_of = {}, {}
    os.makedirs(os.path.join(output_dir, "LICENSES"), exist_ok=True)
    for origin, _, _, _, _, pattern, licence_path in SOURCES:
        buffer = io.BytesIO()  # an in-memory wheel of compiled catalogs, each at its stem + ".mo"
        with zipfile.ZipFile(io.BytesIO(wheels[origin])) as archive, zipfile.ZipFile(buffer, "w") as out:
            for path, how, data in compiled_catalogs(archive, pattern):
                out.writestr(path[:-3] + ".mo", data)
                how_of[(origin, path[:-3] + ".mo")] = (path, how)
            with open(os.path.join(output_dir, "LICENSES", f"{origin}.txt"), "wb") as f:
                f.write(archive.read(licence_path))
        compiled[origin] = buffer.getvalue()
    rows, catalogs = corpora_build.corpus_rows(compiled, SOURCES)

    with gzip.open(SHIPPED_PAIRS, "rt", encoding="utf-8") as f:
        shipped = {line.split("\t")[2] for line in f.read().splitlines()}
    dropped = collections.Counter({"placeholders differ": 0, "source in software_en_fr": 0})
    kept = []
    for row in rows:
        _, _, source, target = row
        if source in shipped:
            dropped["source in software_en_fr"] += 1
        elif placeholders(source) != placeholders(target):
            dropped["placeholders differ"] += 1
        else:
            kept.append(row)
    for split in corpora_build.SPLITS:
        with open(os.path.join(output_dir, f"{split}.tsv"), "w", encoding="utf-8", newline="\n") as f:
            f.writelines(f"{source}\t{target}\n" for row_split, _, source, target in kept if row_split == split)
    catalogs = [(origin, *how_of[(origin, path)], count) for origin, path, count in catalogs]
    return kept, dropped, len(rows), catalogs


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python benchmarks/heldout_en_fr/build.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--output-dir", required=True, help="folder for train.tsv, valid.tsv, test.tsv and LICENSES/")
    parser.add_argument(
        "--wheel-dir", help="folder the wheels are downloaded to and reused from (default: OUTPUT_DIR/wheels)"
    )
    parser.add_argument(
        "--catalogs", action="store_true", help="also print the pairs each catalog gives (PROVENANCE.md's second table)"
    )
    args = parser.parse_args(argv)
    wheel_dir = args.wheel_dir or os.path.join(args.output_dir, "wheels")
    os.makedirs(wheel_dir, exist_ok=True)
    kept, dropped, total, catalogs = build(args.output_dir, wheel_dir)
    if args.catalogs:
        for origin, path, how, count in catalogs:
            print(f"{origin}\t{path}\t{how}\t{count}")
    per_split = collections.Counter(row[0] for row in kept)
    print("Pairs by split: " + ", ".join(f"{s} {per_split[s]}" for s in corpora_build.SPLITS) + f"; total {len(kept)}.")
    print("Dropped after de-duplication: " + ", ".join(f"{k} {v}" for k, v in dropped.items()) + f" (of {total}).")
    print(f"Written to {args.output_dir}")


if __name__ == "__main__":
    sys.exit(main())
