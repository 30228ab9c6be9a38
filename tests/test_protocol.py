"""The worker protocol's codec: typed requests round-trip, nothing but JSON and array bytes, and
every malformed frame is a ProtocolError (never pickle, never another exception)."""

from __future__ import annotations

import struct
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_edge.errors import BackendError
from pytest_edge.measurement.machine import Machine
from pytest_edge.measurement.timing import ProcessTiming
from pytest_edge.worker import protocol
from pytest_edge.worker.frames import decode, encode
from pytest_edge.worker.protocol import Load, Measure, ProtocolError, Run, request_from, request_json

from edge_helpers import FIXTURES

# Also run by tox -e tflite-runtime: the worker codec on NumPy 1.x there.
pytestmark = pytest.mark.tflite_runtime_lane

DTYPES = ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64"]


@settings(max_examples=60, deadline=None)
@given(arrays=st.lists(hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)),
                       max_size=4),
       reset=st.booleans())
def test_run_request_round_trips_with_arrays(arrays: list[np.ndarray], reset: bool) -> None:
    request = request_from(decode(encode(request_json(Run("k", arrays, reset)))))
    assert isinstance(request, Run) and request.key == "k" and request.reset is reset
    assert len(request.feeds) == len(arrays)
    for sent, got in zip(arrays, request.feeds):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)


def test_replies_keep_int_keys_nan_and_nesting() -> None:
    reply = {"order": [3, 1], "tensors": {3: np.arange(4, dtype=np.int32), 1: np.ones((2, 2), np.float32)},
             "names": {3: "a", 1: "b"}, "drift": float("nan"), "scalar": np.float64(2.5), "none": None}
    back = decode(encode(protocol.ok(reply)))["value"]
    assert back["order"] == [3, 1] and set(back["tensors"]) == {1, 3} and back["names"][3] == "a"
    np.testing.assert_array_equal(back["tensors"][3], np.arange(4))
    assert np.isnan(back["drift"]) and back["scalar"] == 2.5 and isinstance(back["scalar"], float)


def test_intermediates_cross_the_frames_through_the_codec() -> None:
    """Issue #48: a runtime's Intermediates is the reply as codec.to_json writes it (integer tensor ids
    kept, arrays as arrays, details nested) and reply_as reads it; the details back as their method's
    type (told by the key only it has), none as {}."""
    from pytest_edge import codec
    from pytest_edge.backends import Intermediates
    from pytest_edge.backends.intermediates import EtdumpEvent, EtdumpRecord, NodeOf, NodeRuns, NodeWalk

    found = Intermediates("tensors", order=[3, 1], producers={3: "CONV_2D (node 0) on the CPU kernels", 1: "x"},
                          tensors={3: np.ones((1, 2), np.float32), 1: np.zeros(2, np.int8)}, names={3: "a", 1: "b"},
                          delegated=True, details=NodeRuns(runs={"plain": {3: np.ones(1)}}))
    reply = decode(encode(protocol.ok(codec.to_json(found))))["value"]
    assert list(reply) == ["method", "order", "producers", "tensors", "names", "delegated", "unavailable", "details"]
    back = protocol.reply_as(Intermediates, "intermediates", reply)
    assert back.order == [3, 1] and back.producers == found.producers and back.names == found.names
    assert all(np.array_equal(back.tensors[k], found.tensors[k]) for k in found.tensors) and back.delegated
    assert isinstance(back.details, NodeRuns) and list(back.details.runs["plain"]) == [3]
    with pytest.raises(ProtocolError, match="malformed reply to intermediates: producers.3: expected a string, got 4"):
        protocol.reply_as(Intermediates, "intermediates", {**reply, "producers": {3: 4}})
    walked = NodeWalk(configurations=["plain"], nodes={"t": NodeOf("n", "Relu", 0)}, optimized="ORT_ENABLE_ALL")
    assert list(codec.to_json(walked)) == ["runs", "skipped", "configurations", "runtime", "runtime_short", "nodes",
                                           "optimized", "unoptimized", "exposure", "exposure_delta", "solo_stopped_at",
                                           "fused", "removed", "solo_budget_s"]
    event = EtdumpEvent(3, "kernel", "aten::add.out at instruction 3", {"v1": np.ones(2)}, {"v2": np.ones(2)})
    for details in (walked, EtdumpRecord(events=[event], partitions=1), None):
        sent = codec.to_json(Intermediates("nodes", details=details))
        assert (sent["details"] == {}) == (details is None)
        again = protocol.reply_as(Intermediates, "intermediates", decode(encode(protocol.ok(sent)))["value"])
        assert type(again.details) is type(details)
    with pytest.raises(ProtocolError, match=r"malformed reply to intermediates: details.events\[0\]: "
                                            "no kind, label, inputs, outputs"):
        protocol.reply_as(Intermediates, "intermediates", {**reply, "details": {"events": [{"instruction": 1}]}})


def test_hellos_and_counted_replies_are_the_json_they_always_were() -> None:
    """The hellos and Count's reply are typed on both sides; their JSON is the dict each was built as
    (key for key, in order: a device's worker may be of another pytest-edge), and reads back."""
    from pytest_edge import __version__, codec

    machine = Machine("cpu", "aarch64", 4, 8000, "Linux", "3.11.2", "1.26.4", emulated="qemu")
    sent = decode(encode(protocol.hello("litert", machine, protocol.RuntimeName("ai-edge-litert", "1.2"))))
    assert sent == {"ok": True, "value": {
        "protocol": protocol.PROTOCOL_VERSION, "plugin": __version__, "backend": "litert",
        "machine": {"cpu": "cpu", "arch": "aarch64", "cores": 4, "memory_mb": 8000, "os": "Linux", "python": "3.11.2",
                    "numpy": "1.26.4", "emulated": "qemu"},
        "runtime": {"name": "ai-edge-litert", "version": "1.2"}}}
    assert list(sent["value"]) == ["protocol", "plugin", "backend", "machine", "runtime"]
    assert protocol.reply_as(protocol.WorkerHello, "start", sent["value"]).machine == machine
    local = decode(encode(protocol.hello("litert", None, protocol.RuntimeName("ai-edge-litert", None))))["value"]
    assert local["machine"] is None and "emulated" not in codec.to_json(machine.on_device("1.26.4", None))
    assert codec.to_json(protocol.ZygoteHello(12, 0.25, 3)) == {"pid": 12, "import_s": 0.25, "threads": 3}
    counted = protocol.CountedRuns(3, 2, 101.5, {"data_reads": 4.0}, 0.01, [101, 102, 101])
    assert list(codec.to_json(counted)) == ["runs", "warmup_runs", "instructions", "cache", "run_spread",
                                            "run_instructions"]
    assert "cache" not in codec.to_json(replace(counted, cache={}))  # no cache simulation: no key
    assert protocol.reply_as(protocol.CountedRuns, "count", decode(encode(protocol.ok(codec.to_json(counted))))["value"]) \
        == counted


def test_typed_replies_round_trip_over_the_codec_and_a_malformed_one_is_a_protocol_error() -> None:
    """Each request's reply, as Generation is Generate's: codec.to_json crosses the frame codec,
    reply_as types it; a missing or mistyped field is a ProtocolError naming the request and the field."""
    from pytest_edge import codec
    from pytest_edge.backends import Coverage, TensorSpec

    loaded = protocol.Loaded([TensorSpec("x", (1, "n"), "float32")], [TensorSpec("y", (1, 4), "float32")],
                             {"name": "rt", "version": "1"}, Coverage(3, 2, 1, 1, {"CUMSUM": 1}), 1.5, "float32",
                             True, {"x": "marker"})
    replies = [loaded, protocol.Loaded([], [], {}, None, 0.5, "int8", False),
               protocol.DecoderLoaded(2.0, protocol.RuntimeName("rt", None)),
               protocol.GenerationTimes([0.1], [0.01, 0.02], [0.03], [0.13], 1, 12.5, None, 3.0, [None]),
               protocol.ContextMemory(None, 4.0)]
    for reply, op in zip(replies, ["load", "load", "load", "measure_generation", "probe_context"]):
        assert protocol.reply_as(type(reply), op, decode(encode(protocol.ok(codec.to_json(reply))))["value"]) == reply
    # The reply's keys and order as protocol 6 has always sent them (a device's worker may be older or newer).
    assert list(codec.to_json(loaded)) == ["inputs", "outputs", "runtime", "coverage", "load_ms", "precision",
                                           "shape_sources", "threads_applied", "arena"]
    assert codec.to_json(loaded)["coverage"]["fallback"] == round(1 / 3, 6)
    assert codec.to_json(loaded)["inputs"] == [{"name": "x", "shape": [1, "n"], "dtype": "float32"}]
    logits = protocol.reply_as(protocol.TeacherForcedLogits, "teacher_force", decode(encode(protocol.ok(codec.to_json(
        protocol.TeacherForcedLogits(np.ones((2, 5), np.float64))))))["value"]).logits
    assert logits.dtype == np.float32 and logits.shape == (2, 5)
    timed = ProcessTiming(0.5, {"p50": 1.0, "p99": 2.0, "min": 0.9}, 1.01, None, 2, 3, 4.0, 3.5, 0.1,
                          np.array([10, 20, 30], np.int64), 96.0, None, True, "forked", load_ms=7.0)
    back = protocol.reply_as(ProcessTiming, Measure.op, decode(encode(protocol.ok(codec.to_json(timed))))["value"])
    np.testing.assert_array_equal(back.samples_ns, timed.samples_ns)
    assert replace(back, samples_ns=timed.samples_ns, load_ms=7.0) == timed and back.load_ms is None  # Load's figure
    # The reply as ProcessTiming.to_reply() wrote it: every field in order but the Load reply's load_ms.
    assert list(codec.to_json(timed)) == [f.name for f in fields(ProcessTiming) if f.name != "load_ms"]
    with pytest.raises(BackendError, match="malformed reply to measure: no samples_ns"):
        protocol.reply_as(ProcessTiming, Measure.op, {k: v for k, v in codec.to_json(timed).items() if k != "samples_ns"})
    with pytest.raises(ProtocolError, match="malformed reply to measure: latency_ms.p50: expected a number, got 'x'"):
        protocol.reply_as(ProcessTiming, Measure.op, {**codec.to_json(timed), "latency_ms": {"p50": "x"}})
    with pytest.raises(ProtocolError, match="malformed reply to load: no coverage, load_ms"):
        protocol.reply_as(protocol.Loaded, "load", {"inputs": [], "outputs": [], "runtime": {}, "precision": "x",
                                                    "threads_applied": 1})
    with pytest.raises(ProtocolError, match="malformed reply to probe_context: no peak_memory_mb"):
        protocol.reply_as(protocol.ContextMemory, "probe_context", [1, 2])
    with pytest.raises(ProtocolError, match=r"malformed reply to load: inputs\[0\]\.shape: expected a list, got 3"):
        protocol.reply_as(protocol.Loaded, "load", {**codec.to_json(loaded), "inputs": [{"name": "x", "shape": 3,
                                                                                          "dtype": "f"}]})
    with pytest.raises(ProtocolError, match="malformed reply to load: coverage.total_ops: expected an integer, got 'x'"):
        protocol.reply_as(protocol.Loaded, "load", {**codec.to_json(loaded), "coverage": {
            **codec.to_json(loaded.coverage), "total_ops": "x"}})


def test_a_loads_decoder_and_calibration_cross_as_json_and_arrive_typed() -> None:
    """Load's decoder (an LlmConfig) and calibration (a CalibrationSet) travel as their JSON, the
    arrays as arrays, and arrive as the types they were sent as; a malformed one is a ProtocolError
    naming the artifact and the field."""
    from pytest_edge.backends.base import CalibrationCase
    from pytest_edge.backends.decoder_config import LlmConfig

    config = LlmConfig(64, 2, 4, 2, 16, 128, source="config.json", sliding_window=8, sliding_layers=(1,))
    cases = protocol.CalibrationSet("the golden's 1 case(s)", [CalibrationCase("case 0", {"x": np.ones((1, 3), np.float32)})])
    sent = request_json(Load("k", "/m.gguf", 1, decoder=config, calibration=cases))
    assert sent["args"]["decoder"] == {"vocab_size": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
                                       "max_context": 128, "dtype": "float32", "source": "config.json",
                                       "sliding_window": 8, "sliding_layers": [1], "sliding_cache": 0}
    back = request_from(decode(encode(sent)))
    assert isinstance(back, Load) and back.decoder == config and back.calibration.source == cases.source
    (case,) = back.calibration.cases
    assert case.origin == "case 0" and case.inputs["x"].dtype == np.float32 and case.inputs["x"].shape == (1, 3)
    assert request_from(decode(encode(request_json(Load("k", "/m.onnx", 1))))).decoder is None
    with pytest.raises(ProtocolError, match="/m.gguf: load's decoder: vocab_size: expected an integer"):
        request_from({"op": "load", "args": {**sent["args"], "decoder": {**sent["args"]["decoder"], "vocab_size": "x"}}})
    with pytest.raises(ProtocolError, match=r"/m.gguf: load's calibration: cases\[0\]: no origin"):
        request_from({"op": "load", "args": {**sent["args"], "calibration": {"source": "s", "cases": [{"inputs": {}}]}}})


def test_typed_requests_reject_unknown_ops_and_fields() -> None:
    assert isinstance(request_from(decode(encode(request_json(Load("k", "/m.onnx", 1, {"x": [1, 2]}))))), Load)
    with pytest.raises(ProtocolError, match="not a request"):
        request_from({"op": "rm -rf", "args": {}})
    with pytest.raises(ProtocolError, match="unknown field"):
        request_from({"op": "measure", "args": {"key": "k", "feeds": [], "warmup": 1, "runs": 1, "evil": 1}})
    with pytest.raises(ProtocolError, match="measure"):
        request_from({"op": "measure", "args": {"key": "k"}})
    assert Measure.op == "measure"


def test_the_zygotes_requests_are_a_registry_of_their_own() -> None:
    """A worker refuses a zygote's op and a zygote a worker's; Exit, which ends either, is both's."""
    assert set(protocol.REQUESTS) & set(protocol.ZYGOTE_REQUESTS) == {"exit"}
    assert protocol.REQUESTS["exit"] is protocol.ZYGOTE_REQUESTS["exit"] is protocol.Exit
    for request in (protocol.Fork(), protocol.ProcessStatus(12, 0.5), protocol.KillProcess(12)):
        message = request_json(request)
        assert request_from(message, protocol.ZYGOTE_REQUESTS) == request
        with pytest.raises(ProtocolError, match="not a request"):
            request_from(message)
    for request in (Load("k", "/m.onnx", 1), protocol.Ping(), protocol.Start("litert")):
        with pytest.raises(ProtocolError, match="not a request"):
            request_from(request_json(request), protocol.ZYGOTE_REQUESTS)
    with pytest.raises(ProtocolError, match="unknown field"):
        request_from({"op": "kill", "args": {"pid": 1, "signal": 9}}, protocol.ZYGOTE_REQUESTS)
    with pytest.raises(ProtocolError, match="not a request"):
        request_from({"op": ["fork"], "args": {}}, protocol.ZYGOTE_REQUESTS)  # an unhashable op


@pytest.mark.parametrize("value, message", [
    (np.array(["a", "b"]), "dtype"),
    (np.array([object()], dtype=object), "dtype"),
    (object(), "cannot send"),
    ({1, 2}, "cannot send"),
])
def test_what_cannot_be_sent(value: object, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        encode({"v": value})


def _frame(header: bytes, body: bytes = b"", version: int = protocol.PROTOCOL_VERSION, magic: bytes = b"PEDG") -> bytes:
    return struct.pack("<4sHI", magic, version, len(header)) + header + body


@pytest.mark.parametrize("frame, message", [
    (b"PED", "truncated"),
    (_frame(b"{}", magic=b"\x80\x04\x95\x00"), "not a pytest-edge frame"),
    (_frame(b"{}", version=99), f"protocol version 99 from the peer, this side speaks {protocol.PROTOCOL_VERSION}"),
    (struct.pack("<4sHI", b"PEDG", protocol.PROTOCOL_VERSION, 10**9) + b"{}", "does not fit"),
    (_frame(b"{not json"), "not JSON"),
    (_frame(b'{"__array__": ["<f4", [4], 16]}', b"\0" * 8), "needs 16 bytes"),
    (_frame(b'{"__array__": ["|O", [1], 8]}', b"\0" * 8), "refused"),
    (_frame(b'{"__array__": ["<f4", [-1], 4]}', b"\0" * 4), "refused"),
    (_frame(b'{"__array__": 5}'), "malformed array"),
])
def test_malformed_frames_are_protocol_errors(frame: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode(frame)


def test_a_pickle_is_not_a_frame() -> None:
    import pickle

    with pytest.raises(ProtocolError, match="not a pytest-edge frame"):
        decode(pickle.dumps(("load", ("k",))))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.builds(lambda tail: _frame(tail), st.binary(max_size=100)))
def test_random_bytes_decode_or_fail_cleanly(data: bytes) -> None:
    try:
        decode(data)
    except ProtocolError:
        pass


def test_a_real_worker_speaks_it() -> None:
    """A worker process answers typed requests over the codec (ping: its pid; a bad op: an error)."""
    import os

    from pytest_edge.worker import BackendWorker

    worker = BackendWorker("onnxruntime-cpu")
    try:
        assert worker.request(protocol.Ping()) not in (None, os.getpid())
        model = FIXTURES / "tiny_mlp.onnx"
        loaded = protocol.reply_as(protocol.Loaded, "load", worker.request(Load("m", str(model), 1, {}), artifact=str(model)))
        assert loaded.inputs[0].name and loaded.coverage is not None and loaded.load_ms > 0
        with pytest.raises(Exception, match="failed to run.*KeyError"):
            worker.request(Run("never-loaded", [np.zeros(3, np.float32)]))
    finally:
        worker.close()


@pytest.mark.parametrize("size", [0, 1, 16384, 16385, 300_000])
def test_the_channel_frames_as_multiprocessing_connection_does(size: int) -> None:
    """frames.Channel (the worker's and the client's, without importing multiprocessing) writes and
    reads multiprocessing.Connection's framing byte for byte, both ways: a device's worker, an older
    peer or a test may speak Connection."""
    import socket
    from multiprocessing.connection import Connection

    from pytest_edge.worker.frames import Channel

    from concurrent.futures import ThreadPoolExecutor

    ours, theirs = socket.socketpair()
    channel, connection = Channel(ours.detach()), Connection(theirs.detach())
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    try:
        with ThreadPoolExecutor(1) as reader:  # a frame larger than the socket's buffer needs a reader meanwhile
            received = reader.submit(connection.recv_bytes)
            channel.send_bytes(data)
            assert received.result(timeout=30) == data
            received = reader.submit(channel.recv_bytes, size)
            connection.send_bytes(data)
            assert received.result(timeout=30) == data
    finally:
        channel.close()
        connection.close()


def test_the_channel_says_a_closed_stream_and_an_oversized_frame_as_connection_does() -> None:
    import os
    import socket

    from pytest_edge.worker.frames import Channel

    ours, theirs = socket.socketpair()
    channel = Channel(ours.detach())
    theirs.sendall(struct.pack("!i", 10) + b"abc")  # a frame cut short
    theirs.close()
    with pytest.raises(OSError, match="end of file during message"):
        channel.recv_bytes(100)
    with pytest.raises(EOFError):  # then nothing: the stream ended between frames
        channel.recv_bytes(100)
    channel.close()
    channel.close()  # twice: nothing
    ours, theirs = socket.socketpair()
    channel = Channel(ours.detach())
    theirs.sendall(struct.pack("!i", 101))
    with pytest.raises(OSError, match="bad message length"):
        channel.recv_bytes(100)
    with pytest.raises(OSError, match="closed"):  # closed then, as a Connection is
        channel.fileno()
    theirs.close()
    ours, theirs = socket.socketpair()  # a negative length other than -1: refused, not an empty frame
    channel = Channel(ours.detach())
    theirs.sendall(struct.pack("!i", -5))
    with pytest.raises(OSError, match="bad message length"):
        channel.recv_bytes(100)
    theirs.close()
    read, write = os.pipe()
    Channel(write).close()
    assert os.read(read, 1) == b""  # the descriptor was closed
    os.close(read)


def test_a_local_worker_imports_no_multiprocessing_and_not_the_runtimes_other_capabilities() -> None:
    """A local ONNX Runtime worker, as ``python -m pytest_edge.worker`` starts it: its frames need
    no multiprocessing (~11 ms of CPU at every worker's start), and a tensor model's worker no speech
    or triage-quant modules (made on first use: OrtBackend.speech, .quant_pairs)."""
    import subprocess
    import sys

    code = ("import sys; from pytest_edge.worker import frames, server; "
            "s = server.WorkerServer('onnxruntime-cpu', source='pytest_edge.backends.onnxruntime.backend:backends'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'multiprocessing' "
            "or m in ('pytest_edge.backends.speech', 'pytest_edge.backends.quant_pair'))); "
            "print(type(s.backend.speech).__name__, s.backend.quant_pairs.kind)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[:2] == ["[]", "OrtSpeech QDQ"], done.stderr
