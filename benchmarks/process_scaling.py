"""Training throughput of the translate recipe on 1, 2 and 4 processes of one host (JAX and TensorFlow).

Each run starts N translate processes on 127.0.0.1 with the same flags (JAX's `--num-processes`,
TensorFlow's `TF_CONFIG`) and reads the step time of the last epoch from process 0's Keras log. Keras
prints it at the epoch's end, after the epoch's validation (the valid loss, `--validate-sentences`
decoded), so the figure includes that share; keep the valid set's share small or equal across runs.
Throughput is sentence pairs per second of the whole job (global batch / step time); efficiency
is that over one process's, divided by N. By default the global batch stays `--batch-size` and
the processes share the host's cores (strong scaling); `--weak --pin` gives each process
`--batch-size` rows and a core of its own (process i on core i), which is what N one-core hosts
would do, less a real network.

    python benchmarks/process_scaling.py --backends jax,tensorflow --processes 1,2,4
    python benchmarks/process_scaling.py --backends jax,tensorflow --processes 1,2 --weak --pin
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import _timing

from recipes import devices

# Keras' line per epoch (verbose 2): "47/47 - 8s - 172ms/step - loss: ..."; at a second or more a step it
# rounds the step time to whole seconds, so the epoch's seconds over its steps are the finer figure.
EPOCH_LINE = re.compile(r"(\d+)/\d+ - (\d+)s - (\d+(?:\.\d+)?)(ms|s)/step")


def run(backend, count, recipe_flags, output_dir, pin=False):
    """Seconds per training step of the last epoch, as process 0 of `count` logs it (`pin`: process i on core i)."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(_timing.REPO)}
    env.pop("TF_CONFIG", None)
    processes = []
    for index, (flags, variables) in enumerate(devices.processes_on_this_host(count, backend)):
        core = index % os.cpu_count()
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "recipes.translate", *recipe_flags, "--output-dir", output_dir, *flags],
                env={**env, **variables},
                cwd=_timing.REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=(lambda core=core: os.sched_setaffinity(0, {core})) if pin else None,
            )
        )
    logs = [process.communicate()[0] for process in processes]
    for process, log in zip(processes, logs):
        if process.returncode:
            raise RuntimeError(f"{backend}, {count} processes: exit {process.returncode}\n{log[-3000:]}")
    steps, epoch_seconds, value, unit = EPOCH_LINE.findall(logs[0])[-1]
    return float(value) / 1000.0 if unit == "ms" else float(epoch_seconds) / float(steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="jax,tensorflow")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--weak", action="store_true", help="each process trains --batch-size rows (global batch x N)")
    parser.add_argument("--pin", action="store_true", help="process i runs on core i alone (os.sched_setaffinity)")
    parser.add_argument(
        "--recipe-flags",
        default="--max-examples 3000 --epochs 2 --validate-sentences 20 --num-beams 1",
        help="translate's flags besides --batch-size and --output-dir (default data: the embedded corpus)",
    )
    args = parser.parse_args()
    rows = []
    for backend in args.backends.split(","):
        one = None
        for count in map(int, args.processes.split(",")):
            batch = args.batch_size * (count if args.weak else 1)
            recipe_flags = [*args.recipe_flags.split(), "--batch-size", str(batch)]
            with tempfile.TemporaryDirectory() as output_dir:
                seconds = run(backend, count, recipe_flags, output_dir, args.pin)
            throughput = batch / seconds
            one = one or throughput
            rows.append(
                [
                    backend,
                    str(count),
                    str(batch),
                    f"{seconds * 1000:.0f}",
                    f"{throughput:.0f}",
                    f"{throughput / one:.2f}",
                    f"{throughput / one / count:.2f}",
                ]
            )
            print(rows[-1], flush=True)
    mode = "weak scaling" if args.weak else "strong scaling"
    print(
        f"\n{_timing.utc_now()}, commit {_timing.git_commit()}, {_timing.cpu_name()}, {os.cpu_count()} cores; {mode}"
        f"{', one core per process' if args.pin else ''}; translate {args.recipe_flags}\n"
    )
    header = ["backend", "processes", "global batch", "ms/step", "pairs/s", "speed-up", "efficiency"]
    print("\n".join(_timing.markdown_table(header, rows, right_aligned=range(1, 7))))


if __name__ == "__main__":
    main()
