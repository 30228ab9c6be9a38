"""A decoder test's goldens (docs/llm.md): which backend records them (the first available one that
exposes logits), where they are read (the model's key, or its stem's old folder), recorded once a
session with ``--edge-update-golden`` (greedy tokens, first-step logits, and the reference's
teacher-forced top-k over its own continuation), refused where stale against the artifact that made
them, and what a failing check writes beside them (the obtained tokens). The decoder check
(run/decoder_check.py) asks; generation itself is the check's, in the backend's worker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .. import __version__
from ..backends import decoder_backends, get_backend
from ..backends.decoder import Generation
from ..backends.decoder_config import LlmConfig
from ..errors import GoldenError
from ..files import relative_path, sha256_file
from ..golden.layout import changed_files
from ..golden.obtained import write_obtained_tokens
from ..golden.sets import check_owner, decoder_folder
from ..golden.store import GoldenStore
from ..golden.tokens import (ObtainedTokensMeta, TokenGolden, TokenGoldenMeta, TopLogprobs, golden_files, golden_path,
                             read_golden, recorded_files, write_golden)
from ..llm.marker import LlmSpec
from ..llm.metrics import TeacherForced, top_logprobs
from ..core.models import Model, ModelKeys
from ..core.settings import Settings
from .decoder_plan import LlmTarget, config_of, spec_context

# (backend, artifact, config, threads, prompt, new tokens, at least) -> the greedy generation
Generate = Callable[[str, Path, LlmConfig, int, Sequence[int], int, int], Generation]
# (backend, artifact, config, threads, prompt, tokens, at least) -> the logits at each position of tokens
TeacherForce = Callable[[str, Path, LlmConfig, int, Sequence[int], Sequence[int], int], np.ndarray]


@dataclass(frozen=True)
class ProducedTokens:
    """What one prompt produced, kept for the obtained files of a failure."""
    golden: TokenGolden[TokenGoldenMeta]
    run: Generation
    forced_top: list[int] | None  # the backend's top token at each position, teacher-forced (None: no logits)
    distributions: TopLogprobs | None  # its top-k there, as the golden keeps them: for a failing prompt only
    last_message: int | None  # where in the violations its last message is (None: the prompt passed)


class DecoderGoldens:
    """Session-wide: the goldens recorded this session (with how many tokens) and the staleness
    verdicts, hashed once per artifact and record. ``generate`` and ``teacher_force`` run the
    reference backend where a golden is recorded."""

    def __init__(self, settings: Settings, keys: ModelKeys, generate: Generate, teacher_force: TeacherForce) -> None:
        self.settings = settings
        self.keys = keys
        self.generate = generate
        self.teacher_force = teacher_force
        self._recorded: dict[Path, int] = {}  # goldens written this session, with how many tokens
        self._stale: dict[tuple[Path, tuple[tuple[str, str], ...]], str | None] = {}  # _stale_reason's, once each

    def reference_backend(self, model: Model) -> str:
        for name, backend in decoder_backends().items():
            artifact = model.artifact(backend.suffix)
            decoders = backend.decoders
            if artifact is not None and decoders is not None and backend.unavailable_reason() is None \
                    and decoders.why_no_logits is None and not decoders.refuses(artifact):
                return name
        raise GoldenError(f"no LLM backend available here can run any artifact of {model.key} to record goldens"
                          " (a golden keeps logits, which some runtimes do not expose: judge such an export against "
                          "another export of the network with reference=)")

    def folder(self, model: Model) -> str:
        """Where ``model``'s goldens are read: its key, or its stem's old folder (golden.sets.decoder_folder)."""
        return decoder_folder(GoldenStore(self.settings.golden_dir), model, self.keys)

    def golden(self, target: LlmTarget, config: LlmConfig, prompt: list[int]) -> TokenGolden[TokenGoldenMeta]:
        """The prompt's golden; with --edge-update-golden first (re)recorded once per session. With
        ``reference=``, the reference model's, recorded from its own artifact and configuration."""
        owner = target.golden_model
        path = golden_path(self.settings.golden_dir, owner.key, prompt)
        if self.settings.update_golden and self._recorded.get(path, 0) < target.spec.new_tokens:
            reference = self.reference_backend(owner)
            artifact = owner.artifact(get_backend(reference).suffix)
            if path.is_file():
                try:
                    recorded = read_golden(path, prompt).meta
                except GoldenError:  # unreadable: the refresh replaces it
                    recorded = None
                # A token golden names the artifact that made it as a tensor golden's reference does.
                check_owner(path.parent, recorded.path if recorded else None, owner, self.settings.rootdir)
            own_config = config_of(owner, artifact)  # the reference artifact's own, as it runs
            run = self.generate(reference, artifact, own_config, target.spec.threads, prompt, target.spec.new_tokens,
                                spec_context(target.spec))
            # The reference's distribution at each generated position, teacher-forced over its own
            # greedy tokens (the same steps as generation): the top-k and the rest's mass.
            distributions = top_logprobs(self.teacher_force(reference, artifact, own_config, target.spec.threads,
                                                            prompt, run.tokens, spec_context(target.spec)))
            write_golden(path, TokenGolden(prompt, run.tokens, run.first_logits, TokenGoldenMeta(
                reference_backend=reference, artifact=artifact.name, sha256=sha256_file(artifact),
                path=relative_path(artifact, self.settings.rootdir), model=owner.key,
                files=file_digests(artifact), new_tokens=target.spec.new_tokens,
                plugin_version=__version__, top_k=int(distributions.ids.shape[1])), distributions))
            self._recorded[path] = target.spec.new_tokens
        else:
            path = golden_path(self.settings.golden_dir, self.folder(owner), prompt)
        golden = read_golden(path, prompt)
        if path not in self._recorded:  # one just recorded speaks for the artifact as it is
            stale = self._stale_reason(owner, golden, path)
            if stale:
                raise GoldenError(stale)
        if len(golden.tokens) < target.spec.new_tokens:
            raise GoldenError(f"{path}: holds {len(golden.tokens)} tokens, the test asks for "
                              f"new_tokens={target.spec.new_tokens}: re-record it with --edge-update-golden")
        outside = [int(t) for t in golden.tokens if not 0 <= int(t) < config.vocab_size]
        if outside:  # fed back teacher-forced, it reached the runtime's embedding as an index error
            raise GoldenError(f"{path}: a corrupt LLM golden: token id {outside[0]} is outside the model's vocabulary "
                              f"[0, {config.vocab_size}); re-record it with --edge-update-golden")
        return golden

    def _stale_reason(self, owner: Model, golden: TokenGolden[TokenGoldenMeta], path: Path) -> str | None:
        """Why ``golden`` no longer speaks for the artifact it was recorded from (``owner``'s, the
        reference model's with ``reference=``), by the tensor goldens' rule: each of its files must be
        as recorded (golden.layout.changed_files). Hashed once a session per artifact and record."""
        producer = next((a for a in owner.artifacts.values() if a.name == golden.meta.artifact), None)
        if producer is None:  # not among the model's artifacts any more: nothing here to be stale against
            return None
        recorded = recorded_files(golden.meta)
        key = (producer, tuple(sorted(recorded.items())))
        if key not in self._stale:
            change = next(iter(changed_files(recorded, golden_files(producer))), None)
            self._stale[key] = change.reason(owner.key, producer, path) if change else None
        return self._stale[key]

    def write_obtained(self, target: LlmTarget, spec: LlmSpec, obtained: Sequence[ProducedTokens], no_logits: str | None,
                        forced: Sequence[TeacherForced], violations: list[str], all_prompts: bool) -> None:
        """What the backend generated for each failing prompt (every prompt where the teacher-forced
        figures, which are over all of them, failed), beside its golden in the golden's format
        (golden.obtained), each path said with its prompt's last message (the teacher-forced one's
        for the others): a note, not a check of its own."""
        folder = self.folder(target.golden_model)
        who = target.backend if target.reference is None else f"{target.model.name}.{target.backend}"
        rootdir, written = self.settings.rootdir, []
        for index, produced in enumerate(obtained):
            at, run = produced.last_message, produced.run
            if at is None and not all_prompts:
                continue
            # The golden's format holds top-k over the generated tokens: kept where they are as many.
            distributions = produced.distributions if produced.distributions is not None and \
                produced.distributions.ids.shape[0] == len(run.tokens) else None
            meta = ObtainedTokensMeta(model=target.model.key, new_tokens=spec.new_tokens, plugin_version=__version__,
                                      teacher_forced=forced[index].figures() if index < len(forced) else None,
                                      teacher_forced_top=produced.forced_top, logits_not_measured=no_logits)
            first = np.zeros(0, np.float32) if run.first_logits is None else np.asarray(run.first_logits, np.float32)
            path = write_obtained_tokens(rootdir, folder, who, golden_path(self.settings.golden_dir, folder, run.prompt),
                                         TokenGolden(run.prompt, run.tokens, first, meta, distributions))
            written.append(path)
            if at is not None:
                violations[at] += f"; obtained tokens written to {path} (compare: pytest-edge golden diff {folder})"
        if all_prompts:
            violations[-1] += (f"; obtained tokens of every prompt written to {written[0].parent} (compare: "
                               f"pytest-edge golden diff {folder})")


def file_digests(artifact: Path) -> dict[str, str]:
    """{name: sha256} of every file of the artifact (external data, a GenAI folder's configuration)."""
    return {name: sha256_file(path) for name, path in golden_files(artifact).items()}
