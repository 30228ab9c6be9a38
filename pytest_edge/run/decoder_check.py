"""The check of one ``edge_llm`` test on one backend, the decoder's steps of the session's check:
goldens (recorded by the reference backend with ``--edge-update-golden``, in the one golden store),
free-running token agreement and first-step logits per prompt, the teacher-forced top-1 agreement
and KL divergence over the golden continuation, then, when a budget or a baseline asks for them,
the figures measured in fresh processes, the context sweep and the merge gate
(:mod:`pytest_edge.judging.generation`). Returns the record and every violation; the session
keeps it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..accuracy.compare import worst
from ..backends import get_backend, split_device
from ..backends.decoder import Generation
from ..backends.decoder_config import LlmConfig
from ..checks import Finding, check_generation, check_teacher_forced
from ..errors import BackendError, EdgeUsageError
from ..golden.tokens import golden_path
from ..llm.marker import check_prompt
from ..llm.metrics import (FirstStepLogits, TeacherForced, logits_figures, logits_messages, teacher_forced, timing_figures,
                           token_agreement, token_message, top_logprobs)
from ..judging import generation
from ..judging.baseline import twin_of
from ..judging.gate import GateResult
from ..worker.pool import WorkerPool
from ..worker.protocol import Generate, Load, TeacherForce, TeacherForcedLogits, reply_as
from .decoder_golden import DecoderGoldens, ProducedTokens
from .decoder_plan import LlmTarget, config_of, model_identity, run_context, spec_context
from ..core.external_data import artifact_files
from ..core.models import ModelKeys
from .pipeline import gate_into
from ..core.generation_figures import (ContextSweep, GenerationFigures, PromptResult, TeacherForcedOverall,
                                       TokenPosition)
from ..core.generation_record import RecordLlmConfig
from ..core.record import NOT_MEASURED, GenerationRecord, Record, timing_not_judged
from ..core.record_accuracy import DecoderAccuracy
from ..core.baseline_check import TwinFigures
from ..core.record_blocks import DeviceRun, InputTensor, PluginIdentity, RuntimeIdentity
from ..core.settings import Settings
from ..core.sizes import artifact_size


class LlmChecker:
    """Session-wide: the decoders loaded in the backends' workers (one per artifact, backend and
    threads) and the goldens recorded. Generation runs in the backend's worker, as every model's
    inference does: a crash or a hang (edge_timeout) there is one test's error, on this machine or a
    device."""

    def __init__(self, settings: Settings, pool: WorkerPool, keys: ModelKeys | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.keys = keys or ModelKeys()
        # (backend, artifact, threads) -> the contexts a decoder of it is loaded with in that worker
        self._loaded: dict[tuple[str, str, int], list[int]] = {}
        self.goldens = DecoderGoldens(settings, self.keys, self.generate, self.teacher_force)

    def generate(self, backend: str, artifact: Path, config: LlmConfig, threads: int, prompt: Sequence[int],
                 new_tokens: int, at_least: int = 0) -> Generation:
        """Greedy decoding in ``backend``'s worker (the decoder loaded there once per session and
        context size; a worker that died is restarted and loads it again). The runtime's cache is
        sized for this generation, or ``at_least`` positions (the test's longest prompt and its new
        tokens: its prompts share one load), by :func:`run_context`, never for the model's
        declared maximum; a decoder already loaded with room enough is used."""
        key = self._load(backend, artifact, config, threads, max(len(prompt) + new_tokens, at_least))
        reply = self.pool.request(backend, Generate(key, list(prompt), new_tokens), artifact)
        return reply_as(Generation, Generate.op, reply, prompt=list(prompt))

    def teacher_force(self, backend: str, artifact: Path, config: LlmConfig, threads: int, prompt: Sequence[int],
                      tokens: Sequence[int], at_least: int = 0) -> np.ndarray:
        """The logits [len(tokens), vocab] at each position of ``tokens`` fed after ``prompt`` in
        ``backend``'s worker (backends.decoder.teacher_forced)."""
        key = self._load(backend, artifact, config, threads, max(len(prompt) + len(tokens), at_least))
        reply = self.pool.request(backend, TeacherForce(key, list(prompt), [int(t) for t in tokens]), artifact)
        logits = reply_as(TeacherForcedLogits, TeacherForce.op, reply).logits
        if logits.shape != (len(tokens), config.vocab_size):
            raise BackendError(f"{artifact} ({backend}): teacher-forced logits of shape {list(logits.shape)}, "
                               f"expected [{len(tokens)}, {config.vocab_size}]")
        return logits

    def _load(self, backend: str, artifact: Path, config: LlmConfig, threads: int, positions: int) -> str:
        """The decoder loaded in ``backend``'s worker with a cache for ``positions`` (:func:`run_context`),
        once per session and context (a worker that died is restarted and loads it again); a decoder
        already loaded with room enough is used. Its key."""
        needed = min(positions, config.max_context)
        loaded = self._loaded.setdefault((backend, str(artifact), threads), [])
        roomy = [context for context in loaded if context >= needed]
        context = min(roomy) if roomy else run_context(needed, config)
        key = f"decoder|{artifact}|{threads}|{context}"
        if context not in loaded:
            # Every file of the artifact present, confined and dense before a runtime opens it (a split
            # GGUF's missing shard, a .ptd or .onnx.data): named here, not by the runtime's own failure.
            artifact_files(artifact, backend)
            self.pool.request(backend, Load(key, str(artifact), threads, decoder=config.for_context(context)),
                              artifact)
            loaded.append(context)
        return key

    def check(self, test_id: str, target: LlmTarget, step: Callable[[str], None]) -> tuple[Record, list[str]]:
        """The decoder's record and its violations (the session's one ending concludes it)."""
        step("check the decoder")
        rootdir = self.settings.rootdir
        spec, artifact = target.spec.for_backend(target.backend), target.artifact  # its tolerances= too
        try:
            config = config_of(target.model, artifact)
        except EdgeUsageError as exc:  # the file's reader names the file; the test's backend is said too
            raise EdgeUsageError(f"{target.backend}: {exc}") from None
        where = f"{target.model.name} ({target.backend})"
        prompts = [check_prompt(p, spec.new_tokens, config, where) for p in spec.prompts]
        spec.check_context_budget(config, where)
        violations: list[str] = []
        per_prompt = []
        forced: list[TeacherForced] = []
        unkept: list[str] = []  # goldens without distributions
        obtained: list[ProducedTokens] = []  # each prompt's, for the obtained files of a failure
        # A runtime whose API exposes no logits (DecoderRuntime.why_no_logits): its tokens are checked, its
        # logits figures are not measured, said on the record (a budget on them fails as not measured).
        decoders = get_backend(target.backend).decoders
        assert decoders is not None  # a decoder target is planned on decoder_backends() only
        no_logits = decoders.why_no_logits
        for prompt in prompts:
            golden = self.goldens.golden(target, config, prompt)
            run = self.generate(target.backend, artifact, config, spec.threads, prompt, spec.new_tokens,
                                spec_context(spec))
            expected = golden.tokens[:spec.new_tokens]
            forced_logits = None if no_logits is not None else self.teacher_force(
                target.backend, artifact, config, spec.threads, prompt, expected, spec_context(spec))
            if forced_logits is not None:
                forced.append(teacher_forced(expected, golden.distributions, forced_logits))
            if golden.distributions is None:
                unkept.append(str(golden_path(self.settings.golden_dir, self.goldens.folder(target.golden_model), prompt)))
            agreement, first = token_agreement(expected, run.tokens)
            found = [m for m in [token_message(expected, run.tokens, agreement, first, spec.min_token_agreement)] if m]
            if no_logits is None:
                logits = logits_figures(golden.first_logits, run.first_logits)
                found += logits_messages(logits, spec.logits_atol, spec.logits_cosine)
            else:
                logits = FirstStepLogits(None, None)
                if spec.logits_cosine is not None:  # asked for, and nothing to compare: said, never passed
                    found.append(f"first-step logits cosine not measured (logits_cosine={spec.logits_cosine:g}): "
                                 f"{no_logits}")
            violations += [f"{target.backend}: prompt {_short(prompt)}: {m}" for m in found]
            # The top-k of a failing prompt only: sorting a large vocabulary's logits takes seconds.
            kept = golden.distributions if found and forced_logits is not None else None
            obtained.append(ProducedTokens(golden, run, None if forced_logits is None else np.argmax(forced_logits, -1).tolist(),
                                      None if kept is None else top_logprobs(forced_logits, int(kept.ids.shape[1])),
                                      len(violations) - 1 if found else None))
            per_prompt.append(PromptResult(
                prompt_tokens=len(prompt), golden_tokens=tuple(expected), tokens=tuple(run.tokens),
                token_agreement=agreement, first_difference=first, max_abs_err=logits.max_abs_err,
                cosine=logits.cosine, shape=logits.shape, not_measured=no_logits,
                teacher_forced=forced[-1].figures() if forced else None,
                reference=golden.meta.reference_backend))
        overall = _overall(forced, unkept) if no_logits is None else TeacherForcedOverall(
            positions=0, top1_agreement=None, first_top1_difference=None, kld=None,
            not_measured=f"not measured on {target.backend}: {no_logits}")
        block = GenerationRecord(config=RecordLlmConfig.of(config), new_tokens=spec.new_tokens, kv_cache=decoders.kv_cache,
                                 prompts=tuple(per_prompt), teacher_forced=overall)
        measured: generation.GenerationMeasurement | None = None
        judged: GateResult | None = None
        # the budgets' checks.Finding, kept on the record as for tensor models
        findings: list[Finding] = check_teacher_forced(overall, spec.budgets(check_teacher_forced), target.backend)
        violations += [finding.message for finding in findings]
        if findings or any(p.last_message is not None for p in obtained):
            self.goldens.write_obtained(target, spec, obtained, no_logits, forced, violations, bool(findings))
            if findings:  # its note went on the last finding's message: the record's finding says it too
                findings[-1] = replace(findings[-1], message=violations[-1])
        # Gated (measured, and a model without a twin or record listed as new) as every model is.
        gated = self.settings.gating
        # An emulated device's timing and memory are an emulator's (as for tensor models): not
        # measured by default, recorded but not judged with edge_emulated_timing = record.
        not_judged = timing_not_judged(self.pool.machine(target.backend), self.settings.emulated_timing)
        if (spec.needs_measurement or self.settings.measure or gated) and not_judged != NOT_MEASURED:
            measured, judged, figures, sweep = self._measure(test_id, target, config, prompts[0])
            block = replace(block, measured=figures, context=sweep)
            if not_judged is None:
                timed = check_generation(block, spec.budgets(check_generation), target.backend)
                findings += timed
                violations += [finding.message for finding in timed]
            else:
                judged = None
            if sweep is not None and sweep.points and sweep.longest_stable is None and sweep.stopped is not None:
                # A sweep none of whose lengths ran compared nothing: said, not passed in silence.
                violations.append(f"{target.backend}: the context sweep ran none of its lengths "
                                  f"({', '.join(str(p.tokens) for p in sweep.points)}): stopped at "
                                  f"{sweep.stopped.tokens} tokens: {sweep.stopped.reason}")
        if not_judged is not None:
            block = replace(block, timing_not_judged=not_judged)
        record = Record(
            test=test_id, backend=target.backend,
            model=model_identity(target, rootdir),
            runtime=_runtime(target.backend), plugin=PluginIdentity.this(),
            precision=config.dtype, threads=spec.threads,
            input={"input_ids": InputTensor([1, len(prompts[0])], "int64")},
            warmup_runs=spec.warmup if measured else None, measured_runs=spec.runs if measured else None,
            load_ms=measured.load_ms if measured else None, peak_memory_mb=measured.peak_memory_mb if measured else None,
            artifact_bytes=artifact_size(artifact, target.backend)[0],
            steady_memory_mb=measured.steady_memory_mb if measured else None,
            accuracy=DecoderAccuracy(reference=per_prompt[0].reference,
                                     token_agreement=min(p.token_agreement for p in per_prompt),
                                     top1_agreement=overall.top1_agreement,
                                     kld_mean=overall.kld.mean if overall.kld is not None else None,
                                     max_abs_err=worst([r.max_abs_err for r in per_prompt], max),
                                     cosine=worst([r.cosine for r in per_prompt], min)),
            device=(DeviceRun(split_device(target.backend)[1], self.pool.machine(target.backend))
                    if split_device(target.backend)[1] else None),
            generation=block, checked=True, budget_findings=findings)
        if judged is not None:
            violations += gate_into(record, judged, self.settings)
        return record, violations  # the session's one ending concludes it (restarts, verdict, failure)

    def _measure(self, test_id: str, target: LlmTarget, config: LlmConfig, prompt: list[int]
                 ) -> tuple[generation.GenerationMeasurement, GateResult | None, GenerationFigures, ContextSweep | None]:
        """The measurement, the merge gate's decision (None: no baseline), the record's measured
        figures and the context sweep (None: not asked for)."""
        spec, artifact, settings = target.spec, target.artifact, self.settings
        twin = twin_of(settings.baseline_models, target.model, artifact)
        models = [(artifact, config)] + ([(twin, generation.twin_config(twin, config))] if twin is not None else [])
        # Each loaded for this generation's context, as the tests' own generations are.
        models = [(path, c.for_context(run_context(len(prompt) + spec.new_tokens, c))) for path, c in models]

        def rounds(count: int) -> list[generation.GenerationMeasurement]:
            return generation.measure_rounds(self.pool, target.backend, models, prompt, spec.new_tokens, spec.warmup,
                                             spec.runs, count, spec.threads)

        measured, *twin_measured = rounds(settings.processes)
        judged = generation.gate_generation(settings, test_id, target.backend, target.model, artifact, twin, measured,
                                            twin_measured[0] if twin_measured else None, rounds)

        def figures_of(found: generation.GenerationMeasurement, of_config: LlmConfig) -> GenerationFigures:
            timing = timing_figures(len(prompt), found.ttft_s, found.tpot_s, found.decode_s, spec.new_tokens)
            return replace(timing, load_ms=found.load_ms, peak_memory_mb=found.peak_memory_mb,
                           steady_memory_mb=found.steady_memory_mb, processes=found.processes,
                           runtime_timings=found.runtime_timings, runs_capped=found.capped(spec.runs),
                           kv_cache_estimate_mb=of_config.kv_cache_bytes(len(prompt) + spec.new_tokens) / 2**20)

        figures = figures_of(measured, config)
        if judged is not None and judged.summary is not None and twin is not None and twin_measured:
            # The twin's figures on the record, as a tensor model's are: the pages' "against the
            # baseline" shows a decoder's A/B change as it shows a stored one (report/ab_baseline.py).
            twin_figures = figures_of(twin_measured[0], models[1][1])
            judged.summary.twin = TwinFigures(peak_memory_mb=twin_figures.peak_memory_mb,
                                              steady_memory_mb=twin_figures.steady_memory_mb,
                                              load_ms=twin_figures.load_ms,
                                              artifact_bytes=artifact_size(twin, target.backend)[0],
                                              generation=twin_figures)
        sweep = None
        if spec.needs_context_sweep:
            cap = min(spec.context_cap or config.max_context, config.max_context)
            lengths = list(spec.contexts) if spec.contexts else generation.context_lengths(64, cap)
            too_long = [n for n in lengths if n > config.max_context]
            if too_long:
                raise EdgeUsageError(f"{target.model.name}: contexts {too_long} exceed the model's maximum "
                                     f"context of {config.max_context}")
            # Each length in a fresh worker of the backend under the address-space limit, on this
            # machine or the device the backend runs on.
            sweep = generation.context_sweep(self.pool, target.backend, artifact, config, lengths,
                                             spec.sweep_memory_mb, spec.memory_limit_mb, spec.threads)
        return measured, judged, figures, sweep


def _overall(parts: Sequence[TeacherForced], unkept: Sequence[str]) -> TeacherForcedOverall:
    """The teacher-forced figures over every prompt's positions, where the worst KL divergence and
    the first top-1 difference lie named by prompt and new token."""
    found = TeacherForced.joined(parts).figures()
    starts = np.cumsum([0] + [p.positions for p in parts])

    def where(index: int | None) -> TokenPosition | None:
        if index is None:
            return None
        prompt = int(np.searchsorted(starts, index, side="right") - 1)
        return TokenPosition(prompt, int(index - starts[prompt]))

    return TeacherForcedOverall(
        positions=found.positions, top1_agreement=found.top1_agreement,
        first_top1_difference=where(found.first_top1_difference), kld=found.kld, max_kld_at=where(found.max_kld_at),
        golden_rest_mass_max=found.golden_rest_mass_max,
        not_measured=(f"not measured: the golden {unkept[0]} keeps no log-probabilities (recorded by an earlier "
                      "version): re-record it with --edge-update-golden") if unkept else None)


def _short(prompt: list[int]) -> str:
    return str(prompt) if len(prompt) <= 8 else f"[{', '.join(map(str, prompt[:6]))}, … ({len(prompt)} tokens)]"


def _runtime(backend: str) -> RuntimeIdentity:
    runtime = get_backend(backend)
    return RuntimeIdentity(runtime.distribution, runtime.runtime_version())
