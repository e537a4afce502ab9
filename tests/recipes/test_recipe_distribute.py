"""`--distribute` on two simulated CPU devices gives the losses of one device (issue #5)."""

import json
import os
import subprocess
import sys

import pytest
from recipe_runs import BACKEND, recipe_main, translate_argv

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(os.path.dirname(HERE))


def first_steps(devices, distribute):
    env = {**os.environ, "KERAS_BACKEND": BACKEND, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": REPOSITORY}
    if BACKEND == "jax":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    command = [sys.executable, os.path.join(HERE, "distributed_first_steps.py"), str(devices), str(int(distribute))]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(BACKEND == "torch", reason="Keras has no data-parallel fit on torch (see the next test)")
def test_two_devices_match_one():
    single, parallel = first_steps(1, False), first_steps(2, True)
    assert single["replicas"] == 1 and parallel["replicas"] == 2
    assert parallel["losses"] == pytest.approx(single["losses"], rel=1e-5)
    assert parallel["losses"][1] < parallel["losses"][0]  # the step was taken, on both devices alike


@pytest.mark.skipif(BACKEND != "torch", reason="torch only")
def test_distribute_on_torch_is_a_one_line_error(capsys, data_dir, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        recipe_main("translate", translate_argv(data_dir, tmp_path / "out", "transformer", 1, "--distribute"))
    assert exit_info.value.code == 2
    assert "--distribute: expected the tensorflow or jax backend" in capsys.readouterr().err
