"""Helpers shared by the benchmark scripts: timing, device detection, the per-backend driver, RESULTS.md.

Timing is interleaved: every implementation of a comparison is built and warmed up in
the same process, then the steps are timed round-robin (A, B, C, A, B, C, ...), so a
change in machine load (the CPU is shared) hits every side alike; a row reports the
median (and minimum) over the rounds. Compare ratios within a run, not absolute
figures across runs.

Only `keras`, `numpy` and the standard library are imported here (and the backend's
own package, lazily, for device detection); scripts import this module as `_timing`
(they run from `benchmarks/`, which Python puts on the path).
"""

import datetime
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BACKENDS = ("tensorflow", "jax", "torch")
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # keras_seq from this checkout when it is not installed
    sys.path.append(str(REPO))
PACKAGES = ("keras", "tensorflow", "jax", "torch", "keras-hub")


def emit(**record):
    """One JSON line on stdout: what a `--backend-run` reports to its driver."""
    print(json.dumps(record), flush=True)


def first_line(error, limit=300):
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:limit]}"


def time_interleaved(cases, rounds, steps=1, warmup=2, on_error=None):
    """Median seconds per call of each case, timed round-robin.

    Args:
        cases: `{name: make}` where `make()` builds the case and returns a
            zero-argument callable that does one step and blocks until its result is
            ready (e.g. turns a loss into a Python float).
        rounds: timed rounds; each round times `steps` consecutive calls per case.
        warmup: untimed calls per case before the first round (compilation).
        on_error: `on_error(name, error)` for a case that fails to build or run; the
            case is dropped and the others go on.

    Returns:
        `{name: [seconds per call, one per round]}` for the cases that ran.
    """
    steps_of = {}
    for name, make in cases.items():
        try:
            step = make()
            for _ in range(warmup):
                step()
            steps_of[name] = step
        except Exception as error:  # one failing implementation must not hide the others
            if on_error is None:
                raise
            on_error(name, error)
    times = {name: [] for name in steps_of}
    for _ in range(rounds):
        for name in list(steps_of):
            try:
                start = time.perf_counter()
                for _ in range(steps):
                    steps_of[name]()
                times[name].append((time.perf_counter() - start) / steps)
            except Exception as error:
                if on_error is None:
                    raise
                on_error(name, error)
                del steps_of[name], times[name]
    return times


def summary(seconds):
    """`(median, min)` of a list of per-call times, in seconds."""
    return statistics.median(seconds), min(seconds)


def device():
    """`{"kind": "cpu" | "gpu" | "tpu", "name": ...}` of the device the current Keras backend computes on."""
    import keras

    backend = keras.backend.backend()
    try:
        if backend == "jax":
            import jax

            first = jax.devices()[0]
            kind = "gpu" if first.platform in ("gpu", "cuda", "rocm") else first.platform
            if kind != "cpu":
                return {"kind": kind, "name": first.device_kind}
        elif backend == "torch":
            import torch

            if torch.cuda.is_available():
                return {"kind": "gpu", "name": torch.cuda.get_device_name(0)}
        elif backend == "tensorflow":
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")
            if gpus:
                details = tf.config.experimental.get_device_details(gpus[0])
                return {"kind": "gpu", "name": details.get("device_name", "GPU")}
    except Exception:  # detection must never stop a benchmark
        pass
    return {"kind": "cpu", "name": f"{cpu_name()}, {os.cpu_count()} cores"}


def device_label(info):
    return "CPU" if info["kind"] == "cpu" else f"{info['kind'].upper()}: {info['name']}"


def sync(x):
    """Block until `x` (a backend tensor) is computed: a scalar read forces every backend to finish."""
    import keras

    return float(keras.ops.convert_to_numpy(keras.ops.sum(keras.ops.cast(x, "float32"))))


def matmul_peak(size, dtype="float32", repeats=4, rounds=5):
    """Measured FLOP/s of a `(size, size) @ (size, size)` matmul with `keras.ops` (median of rounds)."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    a = keras.ops.convert_to_tensor(rng.standard_normal((size, size), dtype=np.float32), dtype)
    b = keras.ops.convert_to_tensor(rng.standard_normal((size, size), dtype=np.float32), dtype)

    def step():
        out = [keras.ops.matmul(a, b) for _ in range(repeats)]  # queued back to back, one sync
        sync(out[-1][:1, :1])
        return out

    seconds = time_interleaved({"matmul": lambda: step}, rounds, warmup=1)["matmul"]
    return 2.0 * size**3 * repeats / statistics.median(seconds)


def cpu_name():
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        "unknown CPU",
    )


def git_commit():
    def git(*command):
        return subprocess.run(["git", *command], cwd=REPO, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def versions(packages=PACKAGES):
    found = []
    for package in packages:
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def run_backends(script, forwarded, backends=BACKENDS, records_path=None):
    """Run `script --backend-run *forwarded` once per backend; gather its JSON records.

    Returns `(records, notes)`: every record with a `backend` key added, and a note
    per failed run (its last stderr line) or per `{"note": ...}` record. With
    `records_path`, each record is also appended to that file (JSON lines) as it
    arrives, so a run cut short keeps what it measured (see `load_records`).
    """
    import tempfile

    records, notes = [], []

    def keep(record):
        if "note" in record:
            notes.append(f"{record['backend']}: {record['note']}")
        else:
            records.append(record)
        if records_path:
            with open(records_path, "a") as file:
                file.write(json.dumps(record) + "\n")

    for backend in backends:
        print(f"running the {backend} backend ...", file=sys.stderr, flush=True)
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        # OpenMP's default (spinning waits) is what users get and is fastest on a quiet CPU; on a CPU
        # shared with other work, run with OMP_WAIT_POLICY=PASSIVE (inherited here): spinning torch
        # threads were then up to 10x slower, passive ones within noise.
        command = [sys.executable, str(script), "--backend-run", *forwarded]
        with tempfile.TemporaryFile("w+") as errors:
            process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=errors, text=True)
            for line in process.stdout:
                if line.startswith("{"):
                    keep({"backend": backend, **json.loads(line)})
            returncode = process.wait()
            errors.seek(0)
            stderr = errors.read()
        if returncode:
            sys.stderr.write(stderr[-4000:])
            last = (stderr.strip().splitlines() or ["no output"])[-1]
            keep({"backend": backend, "note": f"the backend run failed (exit {returncode}): {last[:300]}"})
    return records, notes


def load_records(path):
    """`(records, notes)` from a file written by `run_backends(..., records_path=path)`."""
    records, notes = [], []
    for line in Path(path).read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "note" in record:
                notes.append(f"{record['backend']}: {record['note']}")
            else:
                records.append(record)
    return records, notes


def markdown_table(header, rows, right_aligned=()):
    """A Markdown table; `right_aligned` holds the indices of numeric columns."""
    align = ["--:" if index in right_aligned else "---" for index in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def write_section(path, key, section, replace=True):
    """Put `section` (Markdown starting with a `## ` heading) into the file at `path`.

    With `replace`, an existing section whose heading starts with `key` (up to the
    next `## ` heading) is replaced in place; otherwise, or when there is none, the
    section is appended.
    """
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.rstrip().split("\n")
    start = next((i for i, line in enumerate(lines) if replace and line.startswith(key)), None)
    new = section.rstrip().split("\n")
    if start is None:
        lines += [""] + new
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        tail = [""] + lines[end:] if end < len(lines) else []
        lines = lines[:start] + new + tail
    path.write_text("\n".join(lines) + "\n")
