"""Golden inputs: generated, given, matched (inputs.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_edge.backends import TensorSpec
from pytest_edge.errors import EdgeUsageError
from pytest_edge.accuracy.inputs import concrete_shape, feed_order, generate_case, user_cases

# Also run by tox -e tflite-runtime: seeded inputs NumPy 1.x generates there.
pytestmark = pytest.mark.tflite_runtime_lane

# ---------------------------------------------------------------- inputs


def test_concrete_shape_rules() -> None:
    assert concrete_shape(TensorSpec("x", ("batch", 16), "float32"), {}) == (1, 16)
    assert concrete_shape(TensorSpec("x", (1, 3, "h", "w"), "float32"), {"x": (1, 3, 5, 6)}) == (1, 3, 5, 6)
    with pytest.raises(EdgeUsageError, match="dynamic dimension 'h' at axis 2"):
        concrete_shape(TensorSpec("x", (1, 3, "h", 4), "float32"), {})
    with pytest.raises(EdgeUsageError, match="rank"):
        concrete_shape(TensorSpec("x", (1, 3), "float32"), {"x": (1, 3, 3)})


def test_generated_inputs_are_seeded_and_typed() -> None:
    specs = [TensorSpec("a", (2, 3), "float32"), TensorSpec("b", (4,), "int8"), TensorSpec("c", (2,), "bool")]
    one, two = generate_case(specs, {}, 7), generate_case(specs, {}, 7)
    assert all(np.array_equal(one[k], two[k]) for k in one)
    assert [one[k].dtype.name for k in "abc"] == ["float32", "int8", "bool"]
    assert not np.array_equal(one["a"], generate_case(specs, {}, 8)["a"])


def test_user_cases_forms(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", x=np.ones(3))
    assert user_cases("in.npz", tmp_path)[0]["x"].tolist() == [1, 1, 1]
    assert len(user_cases(lambda: [{"x": 1}, {"x": 2}], tmp_path)) == 2
    with pytest.raises(EdgeUsageError, match="cannot read inputs file"):
        user_cases("missing.npz", tmp_path)


def test_feed_order_by_name_or_position() -> None:
    ref = [TensorSpec("a", (1,), "float32"), TensorSpec("b", (1,), "int32")]
    assert feed_order(ref, [ref[1], ref[0]]) == [1, 0]
    assert feed_order(ref, [TensorSpec("input_0", (1,), "float32"), TensorSpec("input_1", (1,), "int32")]) == [0, 1]
    with pytest.raises(ValueError):
        feed_order(ref, ref[:1])


