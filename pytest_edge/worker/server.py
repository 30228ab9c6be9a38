"""The worker process of one backend: holds the loaded models and answers typed requests.

Loading, running and every timing and memory measurement happen here, never across the pipe.
A local worker is a fresh interpreter (``python -m pytest_edge.worker BACKEND FD``); a device
worker speaks over stdin/stdout (``python -m pytest_edge.worker --stdio``). With isolation off
(``--edge-isolation=none``) the same server runs in the pytest process, for pdb. The process's
loop over frames, its hello and its end with its parent are :mod:`.process`'s.
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import codec
from ..backends import InputShapes, LoadedModel, get_backend
from ..backends.base import CalibratedModel
from ..backends.decoder import Decoder, OwnLoopDecoder
from ..backends.base import no_tensors_reason
from ..errors import BackendError
from ..measurement import sensors, timing
from ..measurement.timing import MAX_RUNS  # timed runs a process keeps, whatever min_time asks (its sample buffer)
from ..core.sizes import runtime_package
from . import protocol
from .speech_ops import SpeechOps

if TYPE_CHECKING:  # a device's cache, counted mode, speech and decoders only: a local worker starts without them
    from ..backends.base import Intermediates
    from ..backends.decoder import Generation
    from ..backends.decoder_config import LlmConfig
    from ..backends.speech import Recognizer
    from .artifact_cache import ArtifactCache

# How this process started, for each measuring process's record: a new interpreter ("spawned"),
# or forked by its backend's zygote ("forked", set by worker/zygote.py in the child).
PROCESS_START = "spawned"

# What a device's artifact cache holds: files named by their content.


class WorkerServer(SpeechOps):
    """Holds loaded models of one backend and answers requests. Runs in the worker process."""

    def __init__(self, backend_name: str, cache_dir: Path | None = None, source: str | None = None) -> None:
        # ``source``: where the backend comes from (backends.backend_source), so this process imports
        # that module alone and does not read the entry points; None: asked of the registry.
        self.backend = get_backend(backend_name, source)
        # On a device, artifacts arrive by content into this folder and Load names them there;
        # the worker opens no other path (cache_dir None: a local worker, given local paths).
        self.cache: ArtifactCache | None = None
        if cache_dir is not None:
            from .artifact_cache import ArtifactCache

            self.cache = ArtifactCache(cache_dir)
        self.backend.import_runtime()
        # Timings go to a buffer allocated (and its pages touched) before any model is loaded, so
        # it sits in the memory baseline: a growing list of samples would count as the model's
        # memory (50 000 runs of a list of ints are ~2 MB).
        self._samples = array("q", bytes(8 * MAX_RUNS))
        self.models: dict[str, LoadedModel] = {}
        self.decoders: dict[str, Decoder | OwnLoopDecoder] = {}
        self.recognizers: dict[str, Recognizer] = {}  # OpenSpeech's
        self.speech_memory: dict[str, tuple[float, float | None] | None] = {}  # RSS before the open, its peak
        self.first_inference_ms: dict[str, float | None] = {}
        self.load_peak_mb: dict[str, float | None] = {}
        self.load_base_mb: dict[str, float | None] = {}
        self.loads = 0

    def handle(self, request: protocol.Request) -> Any:
        """The value of ``request``, typed (a reply of worker/protocol.py, an array, a number)."""
        return getattr(self, f"op_{request.op}")(**{f.name: getattr(request, f.name) for f in fields(request)})

    def answer(self, request: protocol.Request) -> Any:
        """The value of ``request`` as the frame carries it (``codec.to_json``): what a worker sends,
        and what the pytest side is given of a server in its own process (--edge-isolation=none)."""
        return codec.to_json(self.handle(request))

    def op_load(self, key: str, path: str, threads: int | None, shapes: dict,
                with_coverage: bool = True, external: dict | None = None,
                decoder: LlmConfig | None = None,
                calibration: protocol.CalibrationSet | None = None) -> protocol.Loaded | protocol.DecoderLoaded:
        """Load and describe a model (a decoder LLM where ``decoder`` gives its configuration). A
        measuring worker skips coverage: reading a .pte's program in Python would leave its
        allocations in the RSS that the memory figures start from."""
        if self.cache is not None:
            path = str(self.cache.model(path, external or {}))
        reset = timing.reset_hwm()
        base = timing.rss_mb()
        start = time.perf_counter_ns()
        if decoder is not None:
            decoders = self.backend.decoders
            if decoders is None:
                raise BackendError(f"{path} ({self.backend.name}): this runtime runs no decoder LLMs (edge_llm)")
            model: Any = decoders.open(Path(path), decoder, threads or 1)
        else:
            tensors = self.backend.tensors
            if tensors is None:
                raise BackendError(f"{path} ({self.backend.name}): {no_tensors_reason(self.backend)}")
            model = tensors.load(Path(path), threads=threads, shapes=codec.from_json(
                InputShapes, shapes, f"{path}: load's shapes", error=protocol.ProtocolError))
            if calibration is not None:  # a toolkit's int8 build, part of the load (Backend.calibrates)
                if not isinstance(model, CalibratedModel):
                    raise BackendError(f"{path} ({self.backend.name}): this backend takes no calibration cases "
                                       f"(from {calibration.source})")
                model.calibrate(calibration.cases, calibration.source)
        load_ms = (time.perf_counter_ns() - start) / 1e6
        # A peak over the baseline means something only if the high-water mark was reset, or this
        # is the first model of a fresh process.
        trusted = reset or self.loads == 0
        self.loads += 1
        self.first_inference_ms[key] = None
        self.load_base_mb[key] = base if trusted else None
        self.load_peak_mb[key] = timing.hwm_mb() if trusted else None
        if decoder is not None:
            self.decoders[key] = model
            return protocol.DecoderLoaded(load_ms, protocol.RuntimeName(self.backend.distribution,
                                                                        self.backend.runtime_version()))
        self.models[key] = model
        coverage = model.coverage() if with_coverage else None
        return protocol.Loaded(
            inputs=list(model.inputs),
            outputs=list(model.outputs),
            runtime={"name": self.backend.distribution, "version": self.backend.runtime_version(),
                        # A .pte's delegates are read with its coverage (exir's .pte reader: 140 MB
                        # that a measuring worker must not count as the model's).
                        "delegates": model.delegates() if with_coverage else [],
                        # The installed package where this worker runs (a device's own); once per process,
                        # and not in a measuring worker (with_coverage False), which records no runtime.
                        **({"package": codec.to_json(runtime_package(self.backend.distribution,
                                                                     self.backend.runtime_module))}
                           if with_coverage else {}),
                        **codec.to_json(model.runtime_details() or {})},
            coverage=coverage,
            load_ms=load_ms,
            precision=model.precision(),
            shape_sources=model.shape_sources,
            threads_applied=bool(threads) and self.backend.threads_supported,
            arena=model.arena(),
        )

    def _run_timed(self, key: str, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        model = self.models[key]
        start = time.perf_counter_ns()
        outputs = model.run(feeds)
        if self.first_inference_ms[key] is None:
            self.first_inference_ms[key] = (time.perf_counter_ns() - start) / 1e6
        return outputs

    def op_run(self, key: str, feeds: list[np.ndarray], reset: bool = True) -> list[np.ndarray]:
        if reset:
            self.models[key].reset()
        return self._run_timed(key, feeds)

    def op_measure(self, key: str, feeds: list[np.ndarray], warmup: int, runs: int,
                   min_time_s: float = 0.0) -> timing.ProcessTiming:
        """``warmup`` discarded runs, then timed runs until there are at least ``runs`` of them and
        they took at least ``min_time_s`` together (LiteRT benchmark_model's --min_secs), so a
        20 us model is timed thousands of times and a busy window is long enough to be judged."""
        model = self.models[key]
        reset = timing.reset_hwm()
        if self.first_inference_ms[key] is None:
            self._run_timed(key, feeds)
        infer = model.bind(feeds)
        before = sensors.read()  # temperature, frequency, power before the warm-up: "initial"
        load = timing.MachineLoad()
        for _ in range(warmup):
            infer()
        if runs > MAX_RUNS:
            raise ValueError(f"runs={runs} is more than the {MAX_RUNS} timed runs a process keeps; use edge_min_time "
                             "to time longer")
        buffer = self._samples
        clock = time.perf_counter_ns
        probe = timing.machine_probe_ns
        probes = [probe() for _ in range(timing.PROBE_AROUND)]
        probe_after = [0] * len(probes)  # timed runs before each probe: where it lies in the window
        deadline = clock() + int(min_time_s * 1e9)
        next_probe = clock() + timing.PROBE_EVERY_NS
        count = 0
        # Resident memory read between runs (outside their timing): every so many of the ``runs``, then
        # (runs kept going for ``min_time_s``) every so much time, and where the probe runs; a model
        # whose runtime keeps growing shows it as a slope. Never every few runs of a 2 us model past
        # ``runs``: thousands of readings slowed the window and their slope's pairs took 1.6 GB.
        rss_every = max(1, runs // timing.RSS_POINTS)
        rss_interval_ns = max(int(min_time_s * 1e9) // timing.RSS_POINTS, 1)
        rss_points = [[0, timing.rss_mb()]]
        window_start = clock()
        next_rss = window_start + rss_interval_ns
        while count < runs or (clock() < deadline and count < len(buffer)):
            start = clock()
            infer()
            end = clock()
            buffer[count] = end - start
            count += 1
            if end > next_probe:
                probes.append(probe())
                probe_after.append(count)
                next_probe = clock() + timing.PROBE_EVERY_NS
                rss_points.append([count, timing.rss_mb()])
            elif (count % rss_every == 0 and count <= runs) or (count > runs and end > next_rss):
                rss_points.append([count, timing.rss_mb()])
                next_rss = clock() + rss_interval_ns
        window_s = (clock() - window_start) / 1e9
        if rss_points[-1][0] != count:
            rss_points.append([count, timing.rss_mb()])
        growth = timing.memory_growth_kb_per_run(rss_points)
        probes += [probe() for _ in range(timing.PROBE_AROUND)]
        probe_after += [count] * timing.PROBE_AROUND
        samples = buffer[:count]
        other_cores = load.other_cores()
        after = sensors.read()  # at the end of the timed runs: "steady"
        peak, steady = self._memory_over_load_base(key, trusted=reset or self.loads == 1)
        return timing.ProcessTiming(
            hwm_reset=reset,
            process_start=PROCESS_START,
            first_inference_ms=self.first_inference_ms[key],
            latency_ms=timing.latency_stats(samples),
            drift=timing.drift(samples),
            probe_drift=timing.probe_drift(samples, probe_after, probes),
            warmup_runs=warmup, measured_runs=len(samples),
            peak_memory_mb=peak, steady_memory_mb=steady,
            other_cores_busy=other_cores,
            probe_us=float(np.median(probes)) / 1e3,
            power_and_temperature=sensors.window(before, after),
            samples_ns=np.asarray(samples, dtype=np.int64),
            rss_points=rss_points, memory_growth_kb_per_run=growth,
            memory_growth_mb_per_min=(growth / 1024 * count / (window_s / 60)
                                      if growth is not None and window_s > 0 else None),
        )

    def _memory_over_load_base(self, key: str, trusted: bool) -> tuple[float | None, float | None]:
        """Peak (the load's or the runs' high-water mark, the higher) and steady memory over the RSS
        before ``key`` was loaded, in MB; None where the load's baseline is not trusted (the
        high-water mark could not be reset and other models came first) or ``trusted`` is False."""
        base = self.load_base_mb[key]
        if base is None or not trusted:
            return None, None
        peaks = [p for p in (self.load_peak_mb[key], timing.hwm_mb()) if p is not None]
        rss = timing.rss_mb()
        return (max(peaks) - base if peaks else None), (rss - base if rss is not None else None)

    def op_generate(self, key: str, prompt: list[int], new_tokens: int) -> Generation:
        from ..backends.decoder import generate

        return generate(self.decoders[key], prompt, new_tokens)

    def op_teacher_force(self, key: str, prompt: list[int], tokens: list[int]) -> protocol.TeacherForcedLogits:
        from ..backends.decoder import teacher_forced

        return protocol.TeacherForcedLogits(teacher_forced(self.decoders[key], prompt, tokens))

    def op_measure_generation(self, key: str, prompt: list[int], new_tokens: int, warmup: int,
                              runs: int) -> protocol.GenerationTimes:
        """TTFT and TPOT samples of ``runs`` generations after ``warmup``; memory as op_measure's:
        over the RSS before the decoder was loaded, trusted in a fresh process only."""
        from ..backends.decoder import generate

        decoder = self.decoders[key]
        started = time.perf_counter()
        for _ in range(warmup):
            generate(decoder, prompt, new_tokens)
            if time.perf_counter() - started > protocol.GENERATION_TIME_CAP_S / 2:
                break
        # The machine probe around and between the timed generations, as op_measure times it between
        # runs: the merge gate tells a slower machine from a slower decoder by it (docs/gate.md).
        probes = [timing.machine_probe_ns() for _ in range(timing.PROBE_AROUND)]
        ttft, tpot, decode, whole, counted = [], [], [], [], []
        started = time.perf_counter()
        for _ in range(runs):
            decoder.reset_runtime_timings()  # the runtime's own counters per generation, beside ours
            run = generate(decoder, prompt, new_tokens)
            counted.append(decoder.runtime_timings())
            ttft.append(run.prefill_s)
            tpot.extend(run.step_s)
            decode.append(sum(run.step_s))  # the time after the first token, per generation
            whole.append(run.prefill_s + sum(run.step_s))
            probes.append(timing.machine_probe_ns())
            if time.perf_counter() - started > protocol.GENERATION_TIME_CAP_S:
                break  # the runs done are the figures; the reply says how many (a record's note)
        probes += [timing.machine_probe_ns() for _ in range(timing.PROBE_AROUND)]
        peak, steady = self._memory_over_load_base(key, trusted=True)
        return protocol.GenerationTimes(
            ttft_s=ttft, tpot_s=tpot, decode_s=decode, generation_s=whole, runs=len(whole), peak_memory_mb=peak,
            steady_memory_mb=steady, probe_us=float(np.median(probes)) / 1e3,
            runtime_timings=counted if any(counted) else None)

    def op_limit_address_space(self, limit_mb: float) -> int:
        return timing.limit_address_space(limit_mb)

    def op_probe_context(self, key: str, context: int, vocab_size: int) -> protocol.ContextMemory:
        """A prompt of ``context`` - 1 random ids (seeded by the length), then one decode step: the
        decoder's cache filled to ``context`` positions; peak and steady memory over the load's base."""
        from ..backends.decoder import generate

        prompt = np.random.default_rng(context).integers(0, vocab_size, context - 1).tolist()
        generate(self.decoders[key], prompt, 2)
        peak, steady = self._memory_over_load_base(key, trusted=True)
        return protocol.ContextMemory(peak, steady)

    def op_count(self, key: str, feeds: list[np.ndarray], warmup: int, runs: int) -> protocol.CountedRuns:
        """Counted mode (a worker under callgrind): instructions per inference of ``runs`` runs."""
        from . import callgrind

        if self.first_inference_ms[key] is None:
            self._run_timed(key, feeds)
        return callgrind.count_runs(self.models[key].bind(feeds), warmup, runs)

    def op_intermediates(self, key: str, feeds: list[np.ndarray]) -> Intermediates | None:
        return self.models[key].intermediates(feeds)

    def op_ping(self) -> int:
        return os.getpid()

    def op_has(self, name: str) -> bool:
        return self._cache().has(name)

    def op_put(self, name: str, data: np.ndarray) -> bool:
        self._cache().put(name, np.ascontiguousarray(data, dtype=np.uint8).tobytes())
        return True

    def _cache(self) -> ArtifactCache:
        if self.cache is None:
            raise PermissionError("this worker has no artifact cache (a local worker is given local paths)")
        return self.cache
