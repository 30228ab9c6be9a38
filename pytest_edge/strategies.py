"""Hypothesis strategies drawn from a model's signature, for property tests such as "the backends
agree on any input":

    from hypothesis import given, settings, HealthCheck, strategies as st
    from pytest_edge.strategies import inputs_for

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    @pytest.mark.edge(model="tiny_mlp", backends=["litert"])
    def test_backends_agree(edge_model, data):
        feeds = data.draw(inputs_for(edge_model))
        ours, theirs = edge_model.run(feeds), edge_model.on("onnxruntime-cpu").run(feeds)
        ...

Values are bounded (no NaN/Inf, floats in [-bound, bound]) so a disagreement is a kernel's, not
an overflow's; ``image=True`` draws 8-bit images ([0, 255], or [0, 1] for float inputs).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .backends import TensorSpec
from .accuracy.inputs import concrete_shape, integer_range


def inputs_for(model: Any, shapes: Mapping[str, Sequence[int]] | None = None, *, bound: float = 4.0,
               image: bool = False) -> Any:
    """A strategy of ``{input name: array}`` for ``model`` (an ``EdgeModel`` or a list of
    :class:`TensorSpec`). Dynamic dimensions come from ``shapes`` (else the marker's ``shapes=``;
    a dynamic batch dimension is 1)."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    specs: Sequence[TensorSpec] = model if isinstance(model, (list, tuple)) else model.inputs
    if shapes is None:
        shapes = getattr(getattr(model, "plan", None), "shapes", None) or {}
    fields = {}
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        shape = concrete_shape(spec, shapes)
        if dtype.kind == "f":
            high = 1.0 if image else bound
            elements = st.floats(0.0 if image else -high, high, allow_nan=False, allow_infinity=False,
                                 width=min(dtype.itemsize * 8, 64))
        elif dtype.kind == "b":
            elements = st.booleans()
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            low, high = (0, 255) if image else integer_range(dtype)
            elements = st.integers(max(low, int(info.min)), min(high, int(info.max)))
        else:
            raise ValueError(f"input {spec.name!r}: no strategy for dtype {spec.dtype}")
        fields[spec.name] = hnp.arrays(dtype, shape, elements=elements)
    return st.fixed_dictionaries(fields)
