"""Training throughput of the translate recipe on 1, 2 and 4 processes of one host (JAX and TensorFlow).

Each run starts N translate processes on 127.0.0.1 with the same flags and global batch (JAX's
`--num-processes`, TensorFlow's `TF_CONFIG`) and reads Keras' `ms/step` of the last epoch from
process 0's log. Throughput is sentence pairs per second of the whole job (global batch / step
time); efficiency is that over one process's, divided by N: what N processes on N hosts would
ideally reach when each has its own cores, which here they share.

    python benchmarks/process_scaling.py --backends jax,tensorflow --processes 1,2,4
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import _timing

from recipes import devices

STEP_TIME = re.compile(r"(\d+(?:\.\d+)?)(ms|s)/step")


def run(backend, count, recipe_flags, output_dir):
    """Seconds per training step of the last epoch, as process 0 of `count` logs it."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(_timing.REPO)}
    env.pop("TF_CONFIG", None)
    processes = []
    for flags, variables in devices.processes_on_this_host(count, backend):
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "recipes.translate", *recipe_flags, "--output-dir", output_dir, *flags],
            env={**env, **variables}, cwd=_timing.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    logs = [process.communicate()[0] for process in processes]
    for process, log in zip(processes, logs):
        if process.returncode:
            raise RuntimeError(f"{backend}, {count} processes: exit {process.returncode}\n{log[-3000:]}")
    value, unit = STEP_TIME.findall(logs[0])[-1]
    return float(value) / (1000.0 if unit == "ms" else 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="jax,tensorflow")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--recipe-flags", default="--max-examples 4000 --epochs 2 --validate-sentences 20 --num-beams 1",
                        help="translate's flags besides --batch-size and --output-dir (default data: the embedded corpus)")
    args = parser.parse_args()
    recipe_flags = [*args.recipe_flags.split(), "--batch-size", str(args.batch_size)]
    rows = []
    for backend in args.backends.split(","):
        one = None
        for count in map(int, args.processes.split(",")):
            with tempfile.TemporaryDirectory() as output_dir:
                seconds = run(backend, count, recipe_flags, output_dir)
            throughput = args.batch_size / seconds
            one = one or throughput
            rows.append([backend, str(count), f"{seconds * 1000:.0f}", f"{throughput:.0f}", f"{throughput / one:.2f}",
                         f"{throughput / one / count:.2f}"])
            print(rows[-1], flush=True)
    print(f"\n{_timing.utc_now()}, commit {_timing.git_commit()}, {_timing.cpu_name()}, {os.cpu_count()} cores; "
          f"translate {' '.join(recipe_flags)}\n")
    print("\n".join(_timing.markdown_table(["backend", "processes", "ms/step", "pairs/s", "speed-up", "efficiency"], rows,
                                           right_aligned=range(1, 6))))


if __name__ == "__main__":
    main()
