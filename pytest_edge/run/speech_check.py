"""The check of one ``edge_asr`` test on one backend (docs/speech.md): per audio file, the
reference's greedy tokens and transcript (the golden, recorded with ``--edge-update-golden`` from the
reference model's own export by the first speech backend available, stored atomically under the
golden folder as ``<model>/speech/<audio stem>.json``), this backend's transcription, and the
judgement: a float export's tokens equal the golden's (the first differing position named with
both tokens); with ``reference=`` (a quantized export against the float one) the word and character
error rates of its transcript against the reference's, judged by ``max_wer``/``max_cer``
(checks.check_speech). Figures recorded, never judged here: real-time factor, encoder time, time to
first token, decoder tokens/s. Returns the record and every violation; the session's one ending
concludes it.

Audio longer than the one window the export reads (Whisper: 30 s) is cut into consecutive windows,
each decoded on its own from the forced start (as Whisper's long-form decoding without timestamps
or the previous window's text as a prompt does, and as a device decodes a stream chunk by chunk):
the golden keeps each window's tokens, each window is judged against its own, and the record keeps
each window's latency (the per-chunk latency) beside the file's totals.

Transcripts: the exports here carry no tokenizer; token ids become one word each (``w<id>``), so
that WER and CER are computable on any export (a trained model's tokenizer would give real words;
the rates' meaning is the same: how much of the reference's transcript changed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import __version__, codec
import numpy as np

from ..backends.speech import Recognizer, mask_suppressed
from ..backends.speech_features import AudioError, read_wav
from ..checks import BUDGET, Finding, check_speech, check_teacher_forced
from ..core.models import Model
from ..core.record import Record, SpeechFile, SpeechRecord, SpeechWindow
from ..core.speech_record import FilePosition, NotForced, RecordSpeechConfig, SpeechTeacherForced
from ..core.record_accuracy import SpeechAccuracy
from ..core.record_blocks import AudioInput, ModelIdentity, PluginIdentity
from ..core.settings import Settings
from ..errors import EdgeUsageError, GoldenError
from ..files import atomic_write, relative_path, sha256_file
from ..llm.metrics import TeacherForced, teacher_forced, top_logprobs
from ..backends.speech import SpeechConfig, Transcription
from ..worker.pool import WorkerPool
from ..worker.protocol import ForceSpeech, OpenSpeech, Transcribe, reply_as
from ..worker.speech_replies import ForcedSpeechLogits, SpeechOpened
from .speech_golden import WORD_PER_ID, SpeechGolden, golden_path, read_speech_golden, transcript
from .speech_plan import SpeechTarget, missing_files, runtime_info, speech_backends, speech_files, why_not


def error_rates(reference: str, hypothesis: str) -> tuple[float, float]:
    """(WER, CER) of ``hypothesis`` against ``reference`` by jiwer (the field's implementation);
    an empty reference: 0 where the hypothesis is empty too, else 1."""
    if not reference.strip():
        return (0.0, 0.0) if not hypothesis.strip() else (1.0, 1.0)
    import jiwer

    return float(jiwer.wer(reference, hypothesis)), float(jiwer.cer(reference, hypothesis))


def windows(samples: np.ndarray, config: SpeechConfig) -> list[tuple[float, np.ndarray]]:
    """(start in seconds, samples) of each consecutive window of ``samples`` the export reads at once."""
    rate = config.features.sampling_rate
    size = int(config.features.chunk_length * rate)
    return [(start / rate, samples[start:start + size]) for start in range(0, max(len(samples), 1), size)]


def first_difference(expected: Sequence[int], got: Sequence[int]) -> int | None:
    for index, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return index
    return None if len(expected) == len(got) else min(len(expected), len(got))


class WorkerRecognizer:
    """A recognizer in ``backend``'s worker (Backend.speech, opened there by OpenSpeech), as every
    runtime runs: a crash or a hang is one test's error, and runtimes whose native libraries cannot
    share a process (whisper.cpp's and llama.cpp's libggml.so.0) never meet. A worker that died is
    replaced and the recognizer opened again there, as a Load is (worker/client.py)."""

    def __init__(self, pool: WorkerPool, backend: str, folder: Path, threads: int) -> None:
        self.pool, self.backend, self.folder, self.threads = pool, backend, folder, threads
        self.key = f"speech|{folder}|{threads}"
        reply = pool.request(backend, OpenSpeech(self.key, str(folder), threads), folder)
        self.config = reply_as(SpeechOpened, OpenSpeech.op, reply).config

    def _request(self, request: Any) -> Any:
        return self.pool.request(self.backend, request, self.folder)

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        return reply_as(Transcription, Transcribe.op,
                        self._request(Transcribe(self.key, np.asarray(audio, np.float32), new_tokens)))

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray | None:
        logits = reply_as(ForcedSpeechLogits, ForceSpeech.op, self._request(
            ForceSpeech(self.key, np.asarray(audio, np.float32), [int(t) for t in tokens]))).logits
        return None if logits is None else np.asarray(logits, np.float32)


class SpeechChecker:
    """Session-wide: the recognizers opened in the backends' workers (one per backend, export and
    threads) and the goldens recorded this session."""

    def __init__(self, settings: Settings, pool: WorkerPool) -> None:
        self.settings = settings
        self.pool = pool
        self._open: dict[tuple[str, str, int], Recognizer] = {}
        self._recorded: set[Path] = set()

    def recognizer(self, backend: str, folder: Path, threads: int) -> Recognizer:
        key = (backend, str(folder.resolve()), threads)
        if key not in self._open:
            self._open[key] = WorkerRecognizer(self.pool, backend, folder.resolve(), threads)
        return self._open[key]

    def audio(self, path: Path, backend: str, recognizer: Recognizer) -> Any:
        try:
            return read_wav(path, recognizer.config.features.sampling_rate)
        except AudioError as exc:
            raise EdgeUsageError(f"{backend}: {exc}") from None

    def reference_backend(self, folder: Path) -> str:
        """The first speech backend installed here with an export in ``folder``."""
        for name in speech_backends():
            if why_not(name) is None and not missing_files(name, folder):
                return name
        raise GoldenError(f"no speech backend is available here to record goldens of {folder} (" +
                          "; ".join(f"{name}: {why_not(name) or 'no ' + ', '.join(missing_files(name, folder))}"
                                    for name in speech_backends()) + ")")

    def golden(self, target: SpeechTarget, audio: Path) -> SpeechGolden:
        """``audio``'s golden, of the model the target is judged against; with --edge-update-golden
        first recorded once per session by the reference backend."""
        owner: Model = target.golden_model
        path = golden_path(self.settings.golden_dir, owner.key, audio)
        if self.settings.update_golden and path not in self._recorded:
            folder = owner.place
            assert folder is not None
            backend = self.reference_backend(folder)
            recognizer = self.recognizer(backend, folder, target.spec.threads)
            samples = self.audio(audio, backend, recognizer)
            parts = []
            for start_s, window in windows(samples, recognizer.config):
                run = recognizer.transcribe(window, target.spec.new_tokens)
                # The reference's distribution at each of its tokens, teacher-forced (as greedy decoding saw them).
                logits = recognizer.teacher_force(window, run.tokens) if run.tokens else None
                found = top_logprobs(mask_suppressed(logits, recognizer.config)) if logits is not None else None
                parts.append({"start_s": start_s, "tokens": run.tokens, "ended": run.ended,
                              "top_ids": found.ids.tolist() if found is not None else [],
                              "top_logprobs": found.logprobs.tolist() if found is not None else [],
                              "rest_logprob": [None if not np.isfinite(r) else float(r) for r in found.rest]
                              if found is not None else []})
            tokens = [t for part in parts for t in part["tokens"]]
            meta = {"reference_backend": backend, "model": owner.key,
                    "path": relative_path(folder, self.settings.rootdir), "new_tokens": target.spec.new_tokens,
                    "files": {name: sha256_file(folder / name) for name in speech_files(backend)},
                    "audio": relative_path(audio, self.settings.rootdir), "audio_sha256": sha256_file(audio),
                    "transcript_decoding": WORD_PER_ID, "plugin_version": __version__}
            # One window: the flat format goldens always had; more: each window's, in order.
            data = ({**{k: v for k, v in parts[0].items() if k != "start_s"}, "transcript": transcript(tokens)}
                    if len(parts) == 1 else
                    {"tokens": tokens, "ended": parts[-1]["ended"], "transcript": transcript(tokens), "windows": parts})
            data["meta"] = meta
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
            self._recorded.add(path)
        return read_speech_golden(path, audio, owner.key, target.spec.new_tokens)

    def check(self, test_id: str, target: SpeechTarget, step: Callable[[str], None]) -> tuple[Record, list[str]]:
        spec, backend = target.spec, target.backend
        budgets = spec.budgets()
        if target.reference is not None and all(v is None for v in budgets.values()):
            judged_by = ", ".join(f"{keyword}=" for keyword in budgets)
            raise EdgeUsageError(f"edge_asr reference={spec.reference!r}: a model judged against another's transcripts "
                                 f"is judged by {judged_by}; none is given, so nothing would be judged")
        step("open the speech model")
        recognizer = self.recognizer(backend, target.folder, spec.threads)
        violations: list[str] = []
        files: list[SpeechFile] = []
        compared = 0
        forced: list[TeacherForced] = []
        not_forced: list[str] = []  # files whose logits this runtime does not give
        forced_names: list[str] = []
        for audio in target.audio:
            step(f"transcribe {audio.name}")
            samples = self.audio(audio, backend, recognizer)  # audio it cannot take: said before any golden
            golden = self.golden(target, audio)
            pieces = windows(samples, recognizer.config)
            if len(pieces) != len(golden.windows):
                raise GoldenError(f"{golden_path(self.settings.golden_dir, target.golden_model.key, audio)}: holds "
                                  f"{len(golden.windows)} windows of {audio.name}, which {backend}'s export reads in "
                                  f"{len(pieces)} windows of {recognizer.config.features.chunk_length} s: re-record it "
                                  "with --edge-update-golden")
            runs: list[Transcription] = []
            parts: list[SpeechWindow] = []
            for index, ((start_s, window), stored) in enumerate(zip(pieces, golden.windows)):
                run = recognizer.transcribe(window, spec.new_tokens)
                runs.append(run)
                expected_here = stored.tokens
                where = audio.name if len(pieces) == 1 else f"{audio.name} window {index} ({start_s:g} s)"
                first_here = first_difference(expected_here, run.tokens)
                logits = recognizer.teacher_force(window, expected_here) if expected_here else None
                if logits is not None:
                    forced.append(teacher_forced(expected_here, stored.distributions,
                                                 mask_suppressed(logits, recognizer.config)))
                    forced_names.append(where)
                elif expected_here:
                    not_forced.append(where)
                compared += max(len(expected_here), len(run.tokens))
                if target.reference is None and first_here is not None:
                    said = lambda tokens: str(tokens[first_here]) if first_here < len(tokens) else "end of text"  # noqa: E731
                    violations.append(f"{backend}: {where}: tokens differ from the golden's ({golden.reference}) at "
                                      f"position {first_here}: golden {said(expected_here)}, got {said(run.tokens)} "
                                      f"(golden {expected_here}, got {run.tokens})")
                parts.append(SpeechWindow(start_s, run.audio_s, len(run.tokens), first_here, run.total_ms,
                                          run.encoder_ms, run.first_token_ms, run.real_time_factor))
            got, expected = [t for run in runs for t in run.tokens], golden.tokens
            text = transcript(got)
            wer, cer = error_rates(golden.transcript, text)
            files.append(_file(audio.name, runs, expected, got, golden.transcript, text,
                               first_difference(expected, got), wer, cer, parts if len(parts) > 1 else []))
        if compared == 0:  # nothing silent: a check that compared no token judged nothing
            violations.append(f"{backend}: no token was compared: the golden and this run both ended at once on "
                              f"every audio file ({', '.join(a.name for a in target.audio)})")
        overall: SpeechTeacherForced | NotForced | None = _overall(forced, forced_names)
        if not_forced:  # said, never invented: the budgets on these figures then fail (check_teacher_forced)
            said = f"not measured: {backend} gives no decoder logits ({', '.join(not_forced)})"
            overall = replace(overall, not_measured=said) if overall is not None else NotForced(said)
        block = SpeechRecord(RecordSpeechConfig.of(recognizer.config), spec.new_tokens,
                             target.golden_model.key, WORD_PER_ID, files, overall)
        findings: list[Finding] = check_speech(block, budgets, backend)
        for finding in findings:  # the audio file of the worst figure the finding's row reads
            read = BUDGET[finding.check].read
            assert read is not None
            worst = max(files, key=lambda f: read(f))
            violations.append(f"{finding.message} on {worst.audio}: reference transcript {worst.golden_transcript!r}, "
                              f"got {worst.transcript!r}")
        tf_findings = check_teacher_forced(overall, budgets, backend)
        findings += tf_findings
        violations += [finding.message for finding in tf_findings]
        record = Record(
            test=test_id, backend=backend,
            model=ModelIdentity.of(target.model.key, target.artifact, self.settings.rootdir),
            runtime=runtime_info(backend), plugin=PluginIdentity.this(), threads=spec.threads,
            input=AudioInput([relative_path(a, self.settings.rootdir) for a in target.audio]),
            artifact_bytes=sum((target.folder / name).stat().st_size for name in speech_files(backend)),
            accuracy=SpeechAccuracy(reference=target.golden_model.key, wer=block.wer, cer=block.cer,
                                    token_agreement=sum(f.first_difference is None for f in files) / len(files),
                                    top1_agreement=overall.top1_agreement if isinstance(overall, SpeechTeacherForced)
                                    else None,
                                    kld_mean=overall.kld.mean if isinstance(overall, SpeechTeacherForced) and overall.kld
                                    else None),
            speech=block, checked=True, budget_findings=findings,
            peak_memory_mb=max(peaks) if (peaks := [f.peak_memory_mb for f in files if f.peak_memory_mb is not None])
            else None)
        return record, violations


def _file(name: str, runs: Sequence[Transcription], expected: list[int], got: list[int], golden_text: str, text: str,
          first: int | None, wer: float, cer: float, parts: list[SpeechWindow]) -> SpeechFile:
    """A file's figures over its windows: times summed, the first token the first window's, decoder
    tokens/s over every window's tokens after its first, the runtime's own timers summed."""
    audio_s = sum(run.audio_s for run in runs)
    after = sum(len(run.tokens) + int(run.ended) - (run.first_token_ms is not None) for run in runs)
    decode_s = sum(run.decode_s for run in runs)
    timers = [run.runtime_timers for run in runs]
    summed = None
    if all(t is not None for t in timers):
        summed = {**codec.to_json(timers[0]), **{key: sum(getattr(t, key) for t in timers)
                                                 for key in ("mel_ms", "encode_ms", "decode_ms", "sample_ms", "total_ms")}}
    return SpeechFile(name, audio_s, expected, got, golden_text, text, first, wer, cer,
                      sum(run.total_ms for run in runs) / 1e3 / audio_s if audio_s > 0 else float("inf"),
                      sum(run.features_ms for run in runs),
                      # None: a runtime whose encoder is not timed apart (sherpa-onnx's one decode_stream call)
                      None if any(run.encoder_ms is None for run in runs) else sum(run.encoder_ms for run in runs),
                      runs[0].first_token_ms, after / decode_s if after > 0 and decode_s > 0 else None, summed, parts,
                      peak_memory_mb=max(peaks) if (peaks := [r.peak_memory_mb for r in runs if r.peak_memory_mb is not None])
                      else None)


def _overall(parts: Sequence[TeacherForced], names: Sequence[str]) -> SpeechTeacherForced | None:
    """The teacher-forced figures over every audio file's positions, where the first top-1
    difference and the worst KL divergence lie named by audio file (as ``prompt``, the decoders'
    word) and new token; None where no file had a golden token."""
    if not parts:
        return None
    found = TeacherForced.joined(parts).figures()
    starts = np.cumsum([0] + [p.positions for p in parts])

    def where(index: int | None) -> FilePosition | None:
        if index is None:
            return None
        part = int(np.searchsorted(starts, index, side="right") - 1)
        return FilePosition(names[part], int(index - starts[part]))

    unkept = any(p.kld is None for p in parts)
    return SpeechTeacherForced(
        found.positions, found.top1_agreement, where(found.first_top1_difference), found.kld,
        where(found.max_kld_at), found.golden_rest_mass_max,
        "not measured: a golden keeps no log-probabilities; re-record it with --edge-update-golden" if unkept else None)
