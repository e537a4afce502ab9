"""keras_seq.distribution: the Megatron layout maps on 8 simulated devices, and the process settings."""

import json
import os
import subprocess
import sys

import keras
import pytest

from keras_seq import distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(os.path.dirname(HERE))
BACKEND = keras.backend.backend()

# The mesh axes each kernel is split along under model_parallel(2) ("model" of a (4, 2) mesh; None: kept whole).
COLUMN_PARALLEL, ROW_PARALLEL = [None, "model", None], ["model", None, None]
EXPECTED_SPECS = {
    "self_attention/query_kernel": COLUMN_PARALLEL,
    "self_attention/key_kernel": COLUMN_PARALLEL,
    "self_attention/value_kernel": COLUMN_PARALLEL,
    "self_attention/output_kernel": ROW_PARALLEL,
    "self_attention/query_bias": ["model", None],
    "feed_forward_inner/kernel": [None, "model"],
    "feed_forward_inner/bias": ["model"],
    "feed_forward_output/kernel": ["model", None],
    "token_embedding/embeddings": ["model", None],
}
REPLICATED = (
    "self_attention/output_bias",
    "feed_forward_output/bias",
    "feed_forward_norm/gamma",
    "position_embeddings",
)


def sharded_models():
    """The rows `sharded_models.py` prints, by model name (one subprocess for all: JAX starts once)."""
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": REPOSITORY,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    }
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "sharded_models.py")], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {row["model"]: row for row in map(json.loads, result.stdout.strip().splitlines())}


@pytest.mark.skipif(BACKEND != "jax", reason="Keras splits models over devices on JAX only")
def test_each_model_split_over_two_devices_computes_as_one():
    rows = sharded_models()
    assert sorted(rows) == sorted(
        [
            "transformer_seq2seq",
            "transformer_seq2seq_tied",
            "transformer_lm",
            "transformer_mlm",
            "transformer_classifier",
        ]
    )
    for name, row in rows.items():
        assert row["output_difference"] < 1e-5, name
        assert row["sharded_losses"] == pytest.approx(row["losses"], rel=1e-5), name
        assert row["losses"][1] < row["losses"][0], name  # training moved the weights
        specs = row["specs"]
        for suffix, expected in EXPECTED_SPECS.items():
            matching = [path for path in specs if path.endswith(suffix)]
            assert matching, (name, suffix)
            assert all(specs[path] == expected for path in matching), (name, suffix, [specs[path] for path in matching])
        for suffix in REPLICATED:
            assert all(set(specs[path]) == {None} for path in specs if path.endswith(suffix)), (name, suffix)
        if "logits/kernel" in specs:  # an untied output projection: split by columns (vocabulary, or classes)
            assert specs["logits/kernel"] == [None, "model"], name


def test_the_layout_map_splits_attention_and_feed_forward_megatron_style():
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], ["cpu:0", "cpu:1"])
    layout_map = distribution.transformer_layout_map(mesh)
    assert layout_map["decoder_block_3/cross_attention/value_kernel"].axes == (None, "model", None)
    assert layout_map["encoder_block_0/self_attention/output_kernel"].axes == ("model", None, None)
    assert layout_map["encoder_block_0/feed_forward_output/kernel"].axes == ("model", None)
    assert layout_map["source_embedding/token_embedding/embeddings"].axes == ("model", None)
    assert layout_map["logits/bias"].axes == ("model",)
    assert layout_map["token_embedding/position_embedding/position_embeddings"] is None  # replicated
    assert layout_map["encoder_block_0/self_norm/gamma"] is None
    unsplit_vocabulary = distribution.transformer_layout_map(mesh, shard_vocabulary=False)
    assert unsplit_vocabulary["shared_embedding/token_embedding/embeddings"] is None
    assert unsplit_vocabulary["logits/kernel"] is None


def test_bad_layouts_and_sizes_are_named():
    mesh = keras.distribution.DeviceMesh((2,), ["batch"], ["cpu:0", "cpu:1"])
    with pytest.raises(ValueError, match="transformer_layout_map.*model_axis.*'batch'.*model"):
        distribution.transformer_layout_map(mesh)
    with pytest.raises(ValueError, match="transformer_layout_map.*device_mesh.*DeviceMesh.*str"):
        distribution.transformer_layout_map("cpu:0")
    devices = [f"cpu:{i}" for i in range(4)]
    with pytest.raises(ValueError, match="model_parallel.*num_heads.*multiple of model_parallel_size=4.*6"):
        distribution.model_parallel(4, num_heads=6, intermediate_dim=64, devices=devices)
    with pytest.raises(ValueError, match="model_parallel.*intermediate_dim.*multiple of model_parallel_size=2.*33"):
        distribution.model_parallel(2, num_heads=4, intermediate_dim=33, devices=devices)
    with pytest.raises(ValueError, match="model_parallel.*model_parallel_size.*divisor of the 4 devices.*3"):
        distribution.model_parallel(3, num_heads=3, intermediate_dim=33, devices=devices)


def test_process_settings_come_from_arguments_then_the_environment():
    assert distribution.process_settings(environ={}) == (None, 1, 0)
    environ = {
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": "4",
        "KERAS_DISTRIBUTION_PROCESS_ID": "3",
    }
    assert distribution.process_settings(environ=environ) == ("10.0.0.1:1234", 4, 3)
    assert distribution.process_settings(process_id=1, environ=environ) == ("10.0.0.1:1234", 4, 1)
    torchrun_style = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9999", "WORLD_SIZE": "2", "RANK": "1"}
    assert distribution.process_settings(environ=torchrun_style) == ("127.0.0.1:9999", 2, 1)
    with pytest.raises(ValueError, match="process_settings.*process_id.*in \\[0, 2\\).*2"):
        distribution.process_settings("127.0.0.1:1", 2, 2, environ={})
    with pytest.raises(ValueError, match="process_settings.*coordinator.*host:port"):
        distribution.process_settings(None, 2, 0, environ={})
    with pytest.raises(ValueError, match="process_settings.*num_processes.*integer.*'two'"):
        distribution.process_settings("127.0.0.1:1", "two", 0, environ={})
