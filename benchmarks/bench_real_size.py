"""Real-size corpora: what `recipes.translate` costs at 20k, 500k and 2M pairs, beside Eole 0.6.4.

For each size the script writes a training file whose every line joins two pairs drawn (seeded)
from the shipped `software_en_fr` training split, `source_a source_b<TAB>target_a target_b`: real
sentences, lines unique but for rare repeats, about 170 bytes a line. The validation file is the
corpus's valid split. Then, one at a time, alone on the machine:

* **first run**: `python -m recipes.translate --train F --valid V --max-seconds S` (the user's
  command; everything else at its defaults) in a new output folder: preparation, training, the
  final evaluation and export;
* **rerun**: the same command in another new output folder with `--prepared-dir` of the first
  (the data is found prepared: what every later run, and every process of a multi-process run, pays);
* **resume**: `--resume` in the first run's folder with `--max-seconds S + R`;
* **Eole**: `eole train` on the same file (split into its two sides), on the fly through Eole's
  `sentencepiece` transform with the first run's SentencePiece model and its pieces as the
  vocabulary: Eole's own streaming, with the nearest model it has to the recipe's default
  (bidirectional GRU encoder, GRU decoder, Bahdanau's "mlp" attention, width 192, no input
  feeding, shared embeddings), 32 sentences a batch like the recipe's `--batch-size`, stopped
  after S seconds of training.

Measured: the peak resident memory of the run (the kernel's high-water mark, `ru_maxrss`, from
`wait4`: exact, not sampled; it holds every page the process touched, memory-mapped files too);
the seconds from the command's start to its first training step (the recipe's "first training
step done" line, read as it is printed; for Eole its first report, which it prints after each
step); target tokens a second of training (the recipe's own line: tokens it predicts,
end marks included, over the time of the steps after the first, validation left out; Eole's
"tok/s" reports after its first one). A 36M-pair (WMT14 En-Fr) estimate is drawn from the 2M
figures: disk of the prepared folder per pair, preparation time per pair, and memory by the slope
of the peaks between the smallest and the largest size.

    .tox/tensorflow/bin/python benchmarks/bench_real_size.py --sizes 20000,2000000 --seconds 300   # about an hour

(run by a tox environment's Python: it reads the shipped corpus through keras_seq, and the first
run's SentencePiece model for Eole's vocabulary).
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import _timing
from bench_translate_train import DEFAULT_EOLE_VENV, EOLE_REPORT, SPECIALS

REPO = _timing.REPO
FIRST_STEP = "first training step done"
SPEED = "target tokens/s"


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="20000,500000,2000000", help="pairs of each training file, comma-separated")
    p.add_argument("--seconds", type=int, default=300, help="the recipe's --max-seconds, and Eole's training time")
    p.add_argument("--resume-seconds", type=int, default=60, help="training time the resumed run adds")
    p.add_argument("--backend", default="tensorflow", choices=_timing.BACKENDS)
    p.add_argument("--directory", default="/tmp/bench_real_size", help="where the files and runs go (kept)")
    p.add_argument("--eole-venv", default=DEFAULT_EOLE_VENV, help="virtualenv with eole 0.6.4 (bin/eole)")
    p.add_argument("--no-eole", action="store_true", help="leave Eole out")
    p.add_argument("--tox-dir", default=str(REPO / ".tox"))
    return p.parse_args()


def write_corpora(directory, sizes):
    """The joined-pair training files (reused when present) and the valid split, as TSV."""
    sys.path.insert(0, str(REPO))
    from keras_seq.data import corpora

    pairs = corpora.software_en_fr("train")
    valid = directory / "valid.tsv"
    if not valid.exists():
        valid.write_text("".join(f"{s}\t{t}\n" for s, t in corpora.software_en_fr("valid")), encoding="utf-8")
    files = {}
    for size in sizes:
        path = directory / f"train_{size}.tsv"
        if not path.exists():
            draw = random.Random(size)
            with open(path.with_suffix(".part"), "w", encoding="utf-8") as f:
                for _ in range(size):
                    (source_a, target_a), (source_b, target_b) = draw.choice(pairs), draw.choice(pairs)
                    f.write(f"{source_a} {source_b}\t{target_a} {target_b}\n")
            path.with_suffix(".part").rename(path)
        files[size] = path
    return files, valid


def measured(command, env, cwd, log_path, stop=None):
    """Run `command`; `(peak RSS bytes, exit status, [(seconds since start, line)])`.

    `stop(seconds, line)` returning True ends the run's process group (Eole trains until stopped)."""
    started = time.monotonic()
    lines = []
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for line in process.stdout:
            now = time.monotonic() - started
            log.write(line)
            lines.append((now, line))
            if stop is not None and stop(now, line):
                return _stopped(process), 0, lines
        _, status, usage = os.wait4(process.pid, 0)
    return usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), lines


def _stopped(process):
    """End `process`'s group (Eole's trainer and its workers); its own peak RSS, reaped by `wait4`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pid, _, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                return usage.ru_maxrss * 1024
            time.sleep(0.2)
    _, _, usage = os.wait4(process.pid, 0)
    return usage.ru_maxrss * 1024


def recipe_run(args, env, name, flags, log_path):
    command = [str(Path(args.tox_dir) / args.backend / "bin" / "python"), "-m", "recipes.translate", *flags]
    peak, status, lines = measured(command, env, REPO, log_path)
    if status:
        tail = "".join(line for _, line in lines[-3:]).strip()
        raise SystemExit(f"bench_real_size: {name} failed (exit status {status}, log {log_path}): {tail[-400:]}")
    first_step = next((seconds for seconds, line in lines if FIRST_STEP in line), None)
    speed = next(
        (float(line.split("first, ")[1].split()[0].replace(",", "")) for _, line in lines if SPEED in line), None
    )
    return {
        "peak_rss_gib": round(peak / 2**30, 2),
        "first_step_s": first_step and round(first_step, 1),
        "target_tokens_per_s": speed,
        "wall_s": round(lines[-1][0], 1),
    }


def eole_inputs(directory, train, model_path):
    """Eole's two side files of `train` and a vocabulary of the SentencePiece model's pieces."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    if tuple(pieces[:4]) != SPECIALS:
        raise SystemExit(f"bench_real_size: expected the reserved pieces {SPECIALS} first, got {pieces[:4]}")
    (directory / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    with (
        open(train, encoding="utf-8") as lines,
        open(directory / "train.src", "w", encoding="utf-8") as source,
        open(directory / "train.tgt", "w", encoding="utf-8") as target,
    ):
        for line in lines:
            left, right = line.rstrip("\n").split("\t")
            source.write(left + "\n")
            target.write(right + "\n")
    return len(pieces)


def eole_config(directory, model_path, vocabulary):
    return {
        "save_data": str(directory / "eole"),
        "overwrite": True,
        "seed": 1,
        "src_vocab": str(directory / "vocab.txt"),
        "tgt_vocab": str(directory / "vocab.txt"),
        "share_vocab": True,
        "src_vocab_size": vocabulary,
        "tgt_vocab_size": vocabulary,
        "vocab_size_multiple": 1,
        "src_words_min_frequency": 0,
        "tgt_words_min_frequency": 0,
        "pad_token": "<pad>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "decoder_start_token": "<s>",
        "data": {
            "corpus_1": {
                "path_src": str(directory / "train.src"),
                "path_tgt": str(directory / "train.tgt"),
                "transforms": ["sentencepiece"],
            }
        },
        "transforms_configs": {
            "sentencepiece": {"src_subword_model": str(model_path), "tgt_subword_model": str(model_path)}
        },
        "skip_empty_level": "silent",
        "report_every": 1,
        "tensorboard": False,
        "model": {
            "architecture": "rnn",
            "rnn_type": "GRU",
            "hidden_size": 192,
            "layers": 1,
            "encoder": {"encoder_type": "brnn"},
            "decoder": {"global_attention": "mlp"},
            "input_feed": 0,
            "share_embeddings": True,
            "share_decoder_embeddings": True,
            "embeddings": {"word_vec_size": 192},
        },
        "training": {
            "model_path": str(directory / "eole_model"),
            "train_steps": 10_000_000,
            "save_checkpoint_steps": 10_000_000,
            "valid_steps": 10_000_000,
            "world_size": 1,
            "gpu_ranks": [],
            "num_workers": 0,
            "batch_type": "sents",
            "batch_size": 32,
            "optim": "adam",
            "learning_rate": 3e-3,
            "dropout": [0.0],
            "compute_dtype": "fp32",
        },
    }


def eole_run(args, directory, train, model_path, log_path):
    directory.mkdir(parents=True, exist_ok=True)
    vocabulary = eole_inputs(directory, train, model_path)
    config = directory / "config.yaml"
    config.write_text(json.dumps(eole_config(directory, model_path, vocabulary), indent=1))  # JSON is YAML
    env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count()), "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    reports = []

    def stop(seconds, line):
        match = EOLE_REPORT.search(line)
        if match:
            step, _, target_per_batch, _, _, target_rate = map(float, match.groups())
            reports.append((seconds, int(step), target_per_batch, target_rate))
        return bool(reports) and seconds - reports[0][0] >= args.seconds

    peak, _, _ = measured(
        [str(Path(args.eole_venv) / "bin" / "eole"), "train", "--config", str(config)], env, directory, log_path, stop
    )
    if len(reports) < 2:
        raise SystemExit(f"bench_real_size: Eole gave fewer than two reports (log {log_path})")
    first_step = reports[0][0]  # a report a step: the first is printed as the first step ends
    later = reports[1:]
    tokens = sum(r[2] * (r[1] - previous[1]) for previous, r in zip(reports, later))
    busy = sum(r[2] * (r[1] - previous[1]) / r[3] for previous, r in zip(reports, later))
    return {
        "peak_rss_gib": round(peak / 2**30, 2),
        "first_step_s": round(first_step, 1),
        "target_tokens_per_s": round(tokens / busy),
        "steps": reports[-1][1],
    }


def size_runs(args, size, train, valid, env):
    root = Path(args.directory) / f"runs_{size}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    first, again = root / "first", root / "rerun"
    common = ["--train", str(train), "--valid", str(valid)]
    print(f"bench_real_size: {size:,} pairs ...", file=sys.stderr, flush=True)
    result = {"pairs": size, "file_mib": round(train.stat().st_size / 2**20, 1)}
    result["first"] = recipe_run(
        args,
        env,
        "first run",
        [*common, "--max-seconds", str(args.seconds), "--output-dir", str(first)],
        root / "first.log",
    )
    prepared = next(path.parent for path in (first / "prepared").glob("*/manifest.json"))  # not digests/
    result["prepared_mib"] = round(sum(f.stat().st_size for f in prepared.iterdir()) / 2**20, 1)
    result["rows"] = json.loads((prepared / "manifest.json").read_text())["rows"]
    result["rerun"] = recipe_run(
        args,
        env,
        "rerun",
        [
            *common,
            "--max-seconds",
            str(args.seconds),
            "--output-dir",
            str(again),
            "--prepared-dir",
            str(first / "prepared"),
        ],
        root / "rerun.log",
    )
    result["resume"] = recipe_run(
        args,
        env,
        "resume",
        [*common, "--max-seconds", str(args.seconds + args.resume_seconds), "--output-dir", str(first), "--resume"],
        root / "resume.log",
    )
    if not args.no_eole:
        print(f"bench_real_size: {size:,} pairs, Eole ...", file=sys.stderr, flush=True)
        result["eole"] = eole_run(args, root / "eole", train, first / "sentencepiece.model", root / "eole.log")
    return result


def estimate_36m(small, large, pairs=36_000_000):
    """Disk, memory and preparation time at `pairs`, linear in pairs from the two sizes' figures.

    The memory a row adds is the slope of the peaks between the sizes (the run's per-row arrays and
    preparation's first pass; the vocabulary's sample is the same at both once past `--vocab-sample`)."""
    scale = pairs / large["pairs"]
    preparation = max(large["first"]["first_step_s"] - large["rerun"]["first_step_s"], 0)
    rows = large["rows"] - small["rows"]

    def at_pairs(run):
        slope = (large[run]["peak_rss_gib"] - small[run]["peak_rss_gib"]) / rows if rows > 0 else 0.0
        return round(large[run]["peak_rss_gib"] + max(slope, 0.0) * (pairs - large["pairs"]), 2)

    return {
        "pairs": pairs,
        "prepared_gib": round(large["prepared_mib"] * scale / 1024, 1),
        "preparation_minutes": round(preparation * scale / 60),
        "first_run_peak_gib": at_pairs("first"),
        "rerun_peak_gib": at_pairs("rerun"),
    }


def main():
    args = parse()
    directory = Path(args.directory)
    directory.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    files, valid = write_corpora(directory, sizes)
    env = {**os.environ, "KERAS_BACKEND": args.backend, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONHASHSEED": "0"}
    record = {
        "date": _timing.utc_now(),
        "commit": _timing.git_commit(),
        "backend": args.backend,
        "machine": _timing.cpu_name(),
        "cores": os.cpu_count(),
        "seconds": args.seconds,
        "sizes": [],
    }
    for size in sizes:
        record["sizes"].append(size_runs(args, size, files[size], valid, env))
        _timing.emit(**record["sizes"][-1])
    record["estimate_36m"] = estimate_36m(record["sizes"][0], record["sizes"][-1])
    _timing.emit(**record)


if __name__ == "__main__":
    main()
