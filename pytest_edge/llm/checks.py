"""The check of one ``edge_llm`` test on one backend: goldens (recorded by the reference backend
with ``--edge-update-golden``), token agreement and first-step logits per prompt, then, when a
budget asks for them, the figures measured in fresh processes and the context sweep. Returns the
record (with its ``llm`` block) and every violation; the plugin keeps and reports it."""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .. import __version__
from ..errors import EdgeUsageError, GoldenError
from ..files import sha256_file
from ..measurement.gate import GateResult
from ..models import Model, resolve_model
from ..pipeline import gate_into
from ..record import Record
from ..settings import Settings
from . import gate, probe
from .config import GENAI_CONFIG, LlmConfig, genai_decoder, read_config
from .gguf import from_gguf
from .golden import TokenGolden, golden_path, read_golden, write_golden
from .marker import LlmSpec
from .metrics import budget_messages, logits_figures, logits_messages, timing_figures, token_agreement, token_message
from .runners import LLM_BACKENDS, Runner, check_prompt, generate, open_runner

RUNTIME_DISTRIBUTIONS = {"onnxruntime-cpu": "onnxruntime", "executorch": "executorch",
                         "onnxruntime-genai": "onnxruntime-genai", "llama.cpp": "llama-cpp-python"}
CACHE_KIND = {"onnxruntime-cpu": "dynamic (past/present grow with the context)",
              "onnxruntime-genai": "the generator's own (genai_config.json: past_present_share_buffer)",
              "executorch": "static (mutable buffers of max_context positions, allocated at load)",
              "llama.cpp": "llama.cpp's own (float16 K and V for n_ctx positions, allocated at load)"}


@dataclass(frozen=True)
class LlmTarget:
    """One ``edge_llm`` test's model on one backend: the fixture's parametrization value."""
    spec: LlmSpec
    model: Model
    backend: str
    unavailable: str | None = None

    @property
    def artifact(self) -> Path | None:
        return self.model.artifact(LLM_BACKENDS[self.backend].suffix)


def targets(spec: LlmSpec, model: Model, selected: list[str] | None) -> list[LlmTarget]:
    """One target per LLM backend, with the reason where it cannot run here (a skip, or a failure
    where --edge-require names it)."""
    for name in [*(spec.backends or []), *spec.skip_backends]:
        if name not in LLM_BACKENDS:
            raise EdgeUsageError(f"edge_llm: unknown backend {name!r}; LLM backends: {', '.join(LLM_BACKENDS)}")
    found = []
    for name, backend in LLM_BACKENDS.items():
        if name in spec.skip_backends or (spec.backends is not None and name not in spec.backends) \
                or (selected is not None and name not in selected):
            continue
        # A runtime without a runner here says so first: that is what holds it back, artifact or not.
        artifact = model.artifact(backend.suffix)
        reason = backend.why_not or (f"no {backend.suffix} artifact for {model.name}" if artifact is None else
                                     backend.unavailable_reason() or (backend.refuses and backend.refuses(artifact)))
        found.append(LlmTarget(spec, model, name, reason))
    return found


def resolve_llm_model(spec: str, dirs: Sequence[Path]) -> Model:
    """A decoder as its exporter left it: an export folder (ONNX Runtime GenAI's, with the decoder its
    ``genai_config.json`` names; an Optimum folder's ``model.onnx``; a lone ``.pte``/``.gguf``/``.tflite``
    in it), else a path or stem with the LLM runtimes' suffixes (``.gguf`` among them)."""
    suffixes = list(dict.fromkeys(b.suffix for b in LLM_BACKENDS.values()))
    for folder in dirs:
        candidate = Path(spec) if Path(spec).is_absolute() else folder / spec
        if not candidate.is_dir():
            continue
        artifacts: dict[str, Path] = {}
        decoder = genai_decoder(candidate)
        if decoder is None and (candidate / "model.onnx").is_file():
            decoder = candidate / "model.onnx"
        if decoder is not None:
            if not decoder.is_file():
                raise EdgeUsageError(f"{candidate / GENAI_CONFIG} names the decoder {decoder.name}, which is not there")
            artifacts[".onnx"] = decoder
        for suffix in suffixes:
            found = sorted(candidate.glob("*" + suffix))
            if suffix not in artifacts and len(found) == 1:
                artifacts[suffix] = found[0]
        if artifacts:
            return Model(candidate.name, artifacts)
    return resolve_model(spec, dirs, suffixes)


def config_of(model: Model) -> LlmConfig:
    """The decoder configuration its exporter wrote with one of the model's artifacts (the first that
    has one: config.read_config's order); none: the error of the first, naming what was looked for."""
    first: EdgeUsageError | None = None
    for path in model.artifacts.values():
        try:
            return read_config(path, metadata=from_gguf)  # a GGUF carries its configuration inside
        except EdgeUsageError as exc:
            first = first or exc
    assert first is not None, model
    raise first


class LlmChecker:
    """Session-wide: loaded runners (one per artifact and backend) and the goldens recorded."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._runners: dict[tuple[str, str], Runner] = {}
        self._recorded: dict[Path, int] = {}  # goldens written this session, with how many tokens

    def runner(self, backend: str, artifact: Path, config: LlmConfig, threads: int) -> Runner:
        key = (backend, str(artifact))
        if key not in self._runners:
            self._runners[key] = open_runner(backend, artifact, config, threads)
        return self._runners[key]

    def reference_backend(self, model: Model) -> str:
        for name, backend in LLM_BACKENDS.items():
            artifact = model.artifact(backend.suffix)
            if artifact is not None and backend.unavailable_reason() is None \
                    and not (backend.refuses and backend.refuses(artifact)):
                return name
        raise GoldenError(f"no LLM backend available here can run any artifact of {model.name} to record goldens")

    def golden(self, target: LlmTarget, config: LlmConfig, prompt: list[int]) -> TokenGolden:
        """The prompt's golden; with --edge-update-golden first (re)recorded once per session."""
        path = golden_path(self.settings.golden_dir, target.model.name, prompt)
        if self.settings.update_golden and self._recorded.get(path, 0) < target.spec.new_tokens:
            reference = self.reference_backend(target.model)
            artifact = target.model.artifact(LLM_BACKENDS[reference].suffix)
            run = generate(self.runner(reference, artifact, config, target.spec.threads), prompt, target.spec.new_tokens)
            write_golden(path, TokenGolden(prompt, run.tokens, run.first_logits, {
                "reference_backend": reference, "artifact": artifact.name, "sha256": sha256_file(artifact),
                "new_tokens": target.spec.new_tokens, "plugin_version": __version__}))
            self._recorded[path] = target.spec.new_tokens
        golden = read_golden(path, prompt)
        if len(golden.tokens) < target.spec.new_tokens:
            raise GoldenError(f"{path}: holds {len(golden.tokens)} tokens, the test asks for "
                              f"new_tokens={target.spec.new_tokens}: re-record it with --edge-update-golden")
        return golden

    def check(self, test_id: str, target: LlmTarget, rootdir: Path) -> tuple[Record, list[str]]:
        spec, artifact = target.spec, target.artifact
        config = config_of(target.model)
        where = f"{target.model.name} ({target.backend})"
        prompts = [check_prompt(p, spec.new_tokens, config, where) for p in spec.prompts]
        runner = self.runner(target.backend, artifact, config, spec.threads)
        violations: list[str] = []
        per_prompt = []
        for prompt in prompts:
            golden = self.golden(target, config, prompt)
            run = generate(runner, prompt, spec.new_tokens)
            expected = golden.tokens[:spec.new_tokens]
            agreement, first = token_agreement(expected, run.tokens)
            logits = logits_figures(golden.first_logits, run.first_logits)
            found = [m for m in [token_message(expected, run.tokens, agreement, first, spec.min_token_agreement)] if m]
            found += logits_messages(logits, spec.logits_atol, spec.logits_cosine)
            if found and golden.meta.get("sha256") not in (None, sha256_file(artifact)) and \
                    golden.meta.get("reference_backend") == target.backend:
                # Said with the failure, not counted as one: the likely cause is a changed artifact.
                found[0] += (f" (the golden was recorded from {golden.meta.get('artifact')} with sha256 "
                             f"{golden.meta['sha256'][:12]}; this artifact's is {sha256_file(artifact)[:12]})")
            violations += [f"{target.backend}: prompt {_short(prompt)}: {m}" for m in found]
            per_prompt.append({"prompt_tokens": len(prompt), "golden_tokens": expected, "tokens": run.tokens,
                               "token_agreement": agreement, "first_difference": first, **logits,
                               "reference": golden.meta.get("reference_backend")})
        block: dict[str, Any] = {"config": config.__dict__, "new_tokens": spec.new_tokens,
                                 "kv_cache": CACHE_KIND.get(target.backend), "prompts": per_prompt}
        measured: dict[str, Any] = {}
        judged: GateResult | None = None
        gated = self.settings.baseline is not None or gate.twin_of(self.settings.baseline_models, artifact) is not None
        if spec.needs_measurement or self.settings.measure or gated:
            measured, judged = self._measure(test_id, target, config, prompts[0], block)
            violations += budget_messages(target.backend, block, spec.budgets)
        record = Record(
            test=test_id, backend=target.backend,
            model=model_json(target, rootdir),
            runtime=_runtime(target.backend), plugin={"name": "pytest-edge", "version": __version__},
            precision=config.dtype, threads=spec.threads,
            input={"input_ids": {"shape": [1, len(prompts[0])], "dtype": "int64"}},
            warmup_runs=spec.warmup if measured else None, measured_runs=spec.runs if measured else None,
            load_ms=measured.get("load_ms"), peak_memory_mb=measured.get("peak_memory_mb"),
            steady_memory_mb=measured.get("steady_memory_mb"),
            accuracy={"reference": per_prompt[0]["reference"],
                      "token_agreement": min(p["token_agreement"] for p in per_prompt),
                      "max_abs_err": _worst(per_prompt, "max_abs_err", max),
                      "cosine": _worst(per_prompt, "cosine", min)},
            extra={"llm": block}, checked=True)
        if judged is not None:
            violations += gate_into(record, judged, self.settings)
        return record.conclude(violations), violations

    def _measure(self, test_id: str, target: LlmTarget, config: LlmConfig, prompt: list[int],
                 block: dict[str, Any]) -> tuple[dict, GateResult | None]:
        """The figures into ``block``; returns them and the merge gate's decision (None: no baseline)."""
        spec, artifact, settings = target.spec, target.artifact, self.settings
        twin = gate.twin_of(settings.baseline_models, artifact)
        models = [(artifact, config)] + ([(twin, gate.twin_config(twin, config))] if twin is not None else [])

        def rounds(count: int) -> list[dict[str, Any]]:
            return probe.measure_rounds(target.backend, models, prompt, spec.new_tokens, spec.warmup, spec.runs,
                                        count, spec.threads)

        measured, *twin_measured = rounds(settings.processes)
        judged = None
        judging = {"measure_again": rounds, "processes": settings.processes,
                   "max_regression": settings.max_regression, "strict": settings.strict_timing}
        if twin is not None:
            judged = gate.judge(target.backend, measured, gate.as_gated(target.backend, twin_measured[0]),
                                paired=True, source=_relative(twin, settings.rootdir), **judging)
        else:
            stored = gate.stored_record(settings.baseline, test_id, target.backend)
            if stored is not None:
                judged = gate.judge(target.backend, measured, stored, paired=False, source=test_id,
                                    **judging)
        block.update(timing_figures(len(prompt), measured["ttft_s"], measured["tpot_s"]))
        block.update(load_ms=measured["load_ms"], peak_memory_mb=measured["peak_memory_mb"],
                     steady_memory_mb=measured["steady_memory_mb"], processes=measured["processes"],
                     kv_cache_estimate_mb=config.kv_cache_bytes(len(prompt) + spec.new_tokens) / 2**20)
        if spec.needs_context_sweep:
            cap = min(spec.context_cap or config.max_context, config.max_context)
            lengths = list(spec.contexts) if spec.contexts else probe.context_lengths(64, cap)
            too_long = [n for n in lengths if n > config.max_context]
            if too_long:
                raise EdgeUsageError(f"{target.model.name}: contexts {too_long} exceed the model's maximum "
                                     f"context of {config.max_context}")
            block["context"] = probe.context_sweep(target.backend, artifact, config, lengths, spec.peak_memory_mb,
                                                   spec.memory_limit_mb)
        return measured, judged


def model_json(target: LlmTarget, rootdir: Path) -> dict[str, Any]:
    """The record's ``model``: name, artifact (relative to the rootdir) and its sha256 (None without one)."""
    artifact = target.artifact
    return {"name": target.model.name, "artifact": _relative(artifact, rootdir) if artifact else None,
            "sha256": sha256_file(artifact) if artifact and artifact.is_file() else None}


def _short(prompt: list[int]) -> str:
    return str(prompt) if len(prompt) <= 8 else f"[{', '.join(map(str, prompt[:6]))}, … ({len(prompt)} tokens)]"


def _worst(rows: list[dict[str, Any]], key: str, pick: Any) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return pick(values) if values else None


def _relative(path: Path, root: Path) -> str:
    try:
        return os.path.relpath(path, root) if Path(path).is_absolute() else str(path)
    except ValueError:
        return str(path)


def _runtime(backend: str) -> dict[str, Any] | None:
    distribution = RUNTIME_DISTRIBUTIONS.get(backend)
    try:
        return {"name": distribution, "version": importlib.metadata.version(distribution)} if distribution else None
    except importlib.metadata.PackageNotFoundError:
        return {"name": distribution, "version": None}
