"""Files and folders that appear complete or not at all.

Each is written under a temporary name in the same folder, flushed to disk, then
renamed over its final name: a rename within one file system is atomic, so a reader
(or a run resumed after a kill) finds the old version or the new one, never a mix,
and a write that fails (a full disk) leaves the old version as it was. A folder that
replaces another is the one exception: between its two renames neither is in place
(the old one waits beside it as `.old-*`).
"""

import contextlib
import hashlib
import os
import shutil


@contextlib.contextmanager
def replaced_atomically(path):
    """Yields a temporary path beside `path` to write a file or a folder to; on success it replaces `path`.

    The temporary name ends with `path`'s own name, so writers that check a
    suffix (`model.save` wants `.keras`) accept it. On an exception it is removed
    and `path` is left untouched.
    """
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".partial-{os.getpid()}-{name}")
    remove(temporary)
    try:
        yield temporary
        flush_to_disk(temporary)
        if os.path.isdir(temporary) and os.path.isdir(path):
            # A folder cannot be renamed over a non-empty one: move the old one aside first.
            old = os.path.join(directory, f".old-{os.getpid()}-{name}")
            remove(old)
            os.replace(path, old)
            os.replace(temporary, path)
            shutil.rmtree(old)
        else:
            os.replace(temporary, path)
        flush_to_disk(directory, files=False)
    except BaseException:
        remove(temporary)
        raise


def write_text(path, text):
    """Write `text` (UTF-8) to `path` atomically."""
    with replaced_atomically(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)


def sha256(path):
    """Hex SHA-256 of a file's bytes (a checkpoint records its model's, to detect a torn pair)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def flush_to_disk(path, files=True):
    """fsync a file, or a folder and (with `files`) every file in it, so a rename never publishes unwritten data."""
    paths = [path]
    if os.path.isdir(path) and files:
        paths = [
            os.path.join(root, n) for root, folders, names in os.walk(path, topdown=False) for n in names + folders
        ] + [path]
    for each in paths:
        descriptor = os.open(each, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def remove_leftovers(directory):
    """Delete what killed writers left in `directory` (their `.partial-*` and `.old-*` copies)."""
    for name in os.listdir(directory):
        if name.startswith((".partial-", ".old-")):
            remove(os.path.join(directory, name))


def remove(path):
    """Delete a file or a folder, if there."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
