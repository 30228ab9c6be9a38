"""Property tests from a model's signature (strategies.py), as users write them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_edge.backends import TensorSpec
from pytest_edge.strategies import inputs_for


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_drawn_inputs_fit_the_signature(data) -> None:
    specs = [TensorSpec("x", ("batch", 3, 8, 8), "float32"), TensorSpec("ids", (1, 5), "int64"),
             TensorSpec("img", (1, 4, 4, 3), "uint8"), TensorSpec("mask", (1, 5), "bool")]
    case = data.draw(inputs_for(specs, {"x": (2, 3, 8, 8)}))
    assert case["x"].shape == (2, 3, 8, 8) and case["x"].dtype == np.float32
    assert np.isfinite(case["x"]).all() and np.abs(case["x"]).max(initial=0) <= 4.0
    assert case["ids"].dtype == np.int64 and 0 <= case["ids"].min() and case["ids"].max() <= 10
    assert case["img"].dtype == np.uint8 and case["mask"].dtype == bool
    image = data.draw(inputs_for(specs[:1], {"x": (1, 3, 8, 8)}, image=True))["x"]
    assert 0.0 <= image.min() and image.max() <= 1.0


def test_backends_agree_on_any_input(pytester: pytest.Pytester, models: Path) -> None:
    """The property test of docs/triage.md, run against the real runtimes; and it can fail: a tolerance of
    zero between a delegate and another runtime is caught with the counterexample."""
    pytester.makepyfile("""
        import numpy as np, pytest
        from hypothesis import HealthCheck, given, settings, strategies as st
        from pytest_edge.strategies import inputs_for

        def agree(edge_model, data, tolerance):
            feeds = data.draw(inputs_for(edge_model))
            ours, theirs = edge_model.run(feeds), edge_model.on("onnxruntime-cpu").run(feeds)
            for name, value in ours.items():
                np.testing.assert_allclose(value, next(iter(theirs.values())), atol=tolerance, rtol=tolerance)

        @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(data=st.data())
        @pytest.mark.edge(model="tiny_cnn", backends=["litert"])
        def test_agree(edge_model, data):
            agree(edge_model, data, 1e-3)

        @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(data=st.data())
        @pytest.mark.edge(model="tiny_cnn", backends=["litert"])
        def test_bitwise(edge_model, data):
            agree(edge_model, data, 0.0)
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*Not equal to tolerance rtol=0, atol=0*", "*Max absolute difference*"])
