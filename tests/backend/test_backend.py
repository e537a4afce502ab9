"""keras_seq.backend: the running backend's overrides equal the plain path; the house rules about backends hold."""

import ast
import re
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq import backend
from keras_seq.backend import common, keras_internals

REPO = Path(__file__).resolve().parents[2]
BACKEND = keras.backend.backend()


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_the_running_backends_module_is_chosen_once():
    assert backend.NAME == BACKEND
    assert backend.OVERRIDES.__name__ == f"keras_seq.backend.{BACKEND}"
    for name in backend.OPERATIONS:
        chosen = getattr(backend, name)
        assert chosen is getattr(backend.OVERRIDES, name, getattr(common, name)), name


def test_every_override_has_a_plain_path_and_says_what_it_replaces():
    for module_name in ("tensorflow", "jax", "torch"):
        source = (REPO / "keras_seq" / "backend" / f"{module_name}.py").read_text()
        tree = ast.parse(source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                if node.name in {"uses_closed_form_layer_normalization", "closed_form_layer_normalization"}:
                    continue  # the TensorFlow override's own parts
                assert node.name in backend.OPERATIONS, f"{module_name}.{node.name} overrides nothing in common"
                assert ast.get_docstring(node), f"{module_name}.{node.name} has no docstring"


@pytest.mark.parametrize("use", [use for use, _ in keras_internals.PRIVATE_USES])
def test_each_private_keras_use_still_resolves(use):
    error = keras_internals.check_private_uses()[use]
    assert error is None, (
        f"Keras' private API used for {use!r} is gone in Keras {keras.__version__} "
        f"(checked with {keras_internals.CHECKED_WITH_KERAS}): {error}"
    )


def test_no_module_outside_the_backend_package_asks_which_backend_runs():
    asks = re.compile(r"backend\(\)\s*(==|!=|in\b|not in\b)|\bbackend\s*(==|!=)\s*[\"']")
    found = []
    for folder in ("keras_seq", "recipes"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.parent.name == "backend" and path.parent.parent.name == "keras_seq":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if asks.search(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def _imports_of(path, package_modules):
    """The package modules `path` imports, at its top or inside functions."""
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        imported.update(name for name in names if name in package_modules)
    return imported


def test_no_import_cycle_in_the_package_and_the_recipes():
    modules = {}
    for folder in ("keras_seq", "recipes"):
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    graph = {name: _imports_of(path, modules) - {name} for name, path in modules.items()}
    # A package's __init__ importing its own modules, and a module importing its package, are not cycles here.
    for name in graph:
        graph[name] = {
            other for other in graph[name] if not (other.startswith(name + ".") or name.startswith(other + "."))
        }
    cycles = []
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for other in sorted(graph[node]):
            if state.get(other) == "open":
                cycles.append(trail[trail.index(other) :] + [other])
            elif other not in state:
                visit(other, trail + [other])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


# Each override against the plain path, on the running backend.


@pytest.fixture
def logits_and_targets(rng):
    logits = rng.normal(size=(3, 5, 11)).astype("float32") * 3
    targets = rng.integers(0, 11, size=(3, 5)).astype("int32")
    return logits, targets


def test_target_nll_equals_the_plain_path_and_numpy(logits_and_targets):
    logits, targets = logits_and_targets
    shifted = logits - logits.max(-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probabilities, targets[..., None], -1)[..., 0]
    for function in (backend.target_nll_from_logits, common.target_nll_from_logits):
        got = function(ops.convert_to_tensor(logits), ops.convert_to_tensor(targets))
        np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-5, atol=1e-5)


def test_smoothed_nll_equals_the_plain_path_and_numpy(logits_and_targets):
    logits, targets = logits_and_targets
    epsilon = 0.1
    shifted = logits - logits.max(-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target_term = -np.take_along_axis(log_probabilities, targets[..., None], -1)[..., 0]
    expected = (1 - epsilon) * target_term + epsilon * -log_probabilities.mean(-1)
    for function in (backend.smoothed_nll_from_logits, common.smoothed_nll_from_logits):
        got = function(ops.convert_to_tensor(logits), ops.convert_to_tensor(targets), epsilon)
        np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-5, atol=1e-5)


def test_is_first_argmax_takes_the_first_of_tied_largest_scores():
    scores = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [5.0, 1.0, 5.0, -2.0]], "float32")
    for targets, expected in (([1, 0, 0], [True, True, True]), ([2, 1, 1], [False, False, False])):
        for function in (backend.is_first_argmax, common.is_first_argmax):
            got = function(ops.convert_to_tensor(scores), ops.convert_to_tensor(np.array(targets, "int32")))
            np.testing.assert_array_equal(to_numpy(got), expected)


def test_products_and_transposes_equal_the_plain_path(rng):
    a = rng.normal(size=(2, 3, 4, 5)).astype("float32")
    b = rng.normal(size=(2, 3, 6, 5)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(backend.matmul_transposed(a, b)), np.matmul(a, np.swapaxes(b, -1, -2)), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(
        to_numpy(backend.transpose(ops.convert_to_tensor(a), (0, 2, 1, 3))), np.transpose(a, (0, 2, 1, 3))
    )
    kernel, bias = rng.normal(size=(4, 5, 7)).astype("float32"), rng.normal(size=(7,)).astype("float32")
    for function in (backend.affine, common.affine):
        got = function(ops.convert_to_tensor(a), ops.convert_to_tensor(kernel), ops.convert_to_tensor(bias), 2)
        np.testing.assert_allclose(to_numpy(got), np.tensordot(a, kernel, 2) + bias, rtol=1e-5, atol=1e-5)


def test_concrete_values_are_read_eagerly():
    for value in (3, np.arange(4), ops.arange(4)):
        np.testing.assert_array_equal(backend.concrete_value(value), np.asarray(to_numpy(value)))
    assert backend.concrete_value(None) is None
    assert backend.concrete_value(keras.KerasTensor((2,))) is None
