"""The demo: pytest-edge on the models shipped in fixtures/ (see fixtures/models.json)."""

import numpy as np
import pytest


@pytest.mark.edge(model="tiny_cnn", atol=1e-4, rtol=1e-3, max_fallback=0.25, p50_ms="50ms",
                  peak_memory_mb="256MB")
def test_tiny_cnn(edge_model):
    logits = edge_model(np.zeros((1, 3, 32, 32), np.float32))
    assert logits.shape == (1, 10)


@pytest.mark.edge(model="tiny_mlp", max_fallback=0.0)
def test_tiny_mlp(edge_model):
    pass


@pytest.mark.edge(model="two_io")
def test_two_io(edge_model):
    y, m = edge_model(np.ones((1, 8), np.float32), np.arange(8, dtype=np.int32).reshape(1, 8))
    assert m.dtype == np.int32 and (m == np.arange(1, 9)).all()


@pytest.mark.edge(model="tiny_cnn_int8", min_cosine=0.99, min_snr_db=20)
def test_tiny_cnn_int8(edge_model):
    pass


@pytest.mark.edge(model="counter_state")
def test_counter_state_is_reset(edge_model):
    pass


@pytest.mark.edge(model="mlp_dynbatch")
def test_dynamic_batch(edge_model):
    pass


@pytest.mark.edge(model="conv_dynhw", shapes={"x": (1, 3, 24, 40)})
def test_dynamic_hw(edge_model):
    assert edge_model.outputs[0].shape[2:] == ("height", "width")  # dynamic in the artifact


@pytest.mark.edge(model="mobilenet_v2", shapes={"x": (1, 3, 64, 64)})
def test_converted_by_pnnx_and_mnnconvert(edge_model):
    """A network no one here wrote (transformers' MobileNetV2), its .onnx converted by pnnx and
    mnnconvert, unedited: shapes= names the ONNX input, which ncnn calls in0."""


@pytest.mark.edge(model="cumsum_cnn", shapes={"x": (1, 3, 16, 16)})
def test_partly_converted_by_pnnx(edge_model):
    """pnnx leaves the cumsum as layers ncnn does not have: ncnn's row says "does not convert", with
    ncnn's own message; MNN converts and runs it."""
