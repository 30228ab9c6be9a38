"""The decoder check strategy (``pytest_edge/run/decoder_check.py``, ``LlmChecker``) driven directly,
with a FAKE decoder backend for testing the check's logic (tests/fake_backend.py: a NumPy "language
model" whose next token is ``(last + 1) % 16`` with peaked logits, and a copy of it that parts at a
chosen new token): the real session's pool with its worker in this process, the real token goldens
and metrics. Because the fake's tokens are known in advance (``fake_backend.counted``), each test
states the exact position and tokens a failure must name. And the module's pure helpers directly.

Real decoders (ONNX Runtime GenAI, llama.cpp, ...) are checked end to end in tests/test_llm.py."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from fake_backend import PEAK, VOCAB, counted, registered, write_decoder

from pytest_edge.core.generation_figures import TokenPosition
from pytest_edge.core.record import GenerationRecord, Record
from pytest_edge.core.settings import Settings
from pytest_edge.errors import BackendError, GoldenError
from pytest_edge.llm.marker import parse_llm_marker
from pytest_edge.llm.metrics import TeacherForced, teacher_forced, top_logprobs
from pytest_edge.run.decoder_check import LlmChecker, _overall, _short
from pytest_edge.run.decoder_golden import file_digests
from pytest_edge.run.decoder_plan import LlmTarget, config_of, resolve_llm_model
from pytest_edge.run.session import EdgeSession

PROMPTS = [[1, 2, 3], [14]]  # the second wraps around the vocabulary: 15, 0, 1, ...
NEW = 6


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """The fake backends registered, and ``models/ref.counter`` (a decoder that never parts)."""
    with registered(tmp_path / "plugins"):
        write_decoder(tmp_path / "models", "ref")
        yield tmp_path


@pytest.fixture
def edge(project: Path) -> Iterator[EdgeSession]:
    """A session recording goldens (--edge-update-golden); a test turns it off to read them."""
    session = EdgeSession(Settings(golden_dir=project / "golden", rootdir=project, isolated=False,
                                   model_dirs=[project / "models"], update_golden=True))
    try:
        yield session
    finally:
        session.close()


def target(edge: EdgeSession, name: str, backend: str = "fake-counter", reference: str | None = None,
           **marker: Any) -> LlmTarget:
    """``@pytest.mark.edge_llm(model=name, prompts=PROMPTS, new_tokens=NEW, **marker)`` on ``backend``."""
    folder = edge.settings.rootdir / "models"
    spec = parse_llm_marker((), {"model": name, "prompts": PROMPTS, "new_tokens": NEW, **marker})

    def model(stem: str) -> Any:
        return edge.models.claim(resolve_llm_model(stem, [folder], [folder]))

    return LlmTarget(spec, model(name), backend, reference=model(reference) if reference else None)


def check(edge: EdgeSession, llm: LlmTarget) -> tuple[Record, list[str]]:
    return edge.decoders.check("tests/test_llm.py::test_llm", llm, lambda step: None)


def record_goldens(edge: EdgeSession, **marker: Any) -> None:
    """``ref``'s goldens recorded (its own check, which passes), then reading only."""
    assert check(edge, target(edge, "ref", **marker))[1] == []
    edge.settings.update_golden = False


def test_equal_tokens_pass_with_a_typed_record(edge: EdgeSession) -> None:
    """The reference's own check records and passes; the record is a ``Record`` whose decoder part is
    a ``GenerationRecord`` holding the golden's and this run's tokens, which are the fake's known
    ones, with perfect agreement figures."""
    record, violations = check(edge, target(edge, "ref"))
    assert violations == [] and isinstance(violations, list)
    assert isinstance(record, Record) and isinstance(record.generation, GenerationRecord)
    assert record.checked and record.backend == "fake-counter"
    for prompt, row in zip(PROMPTS, record.generation.prompts):
        assert list(row.tokens) == list(row.golden_tokens) == counted(prompt, NEW)
        assert row.token_agreement == 1.0 and row.first_difference is None
    assert record.accuracy is not None
    assert record.accuracy.token_agreement == 1.0 and record.accuracy.top1_agreement == 1.0
    assert record.accuracy.max_abs_err == 0.0 and record.accuracy.reference == "fake-counter"
    assert record.generation.teacher_forced is not None
    assert record.generation.teacher_forced.positions == NEW * len(PROMPTS)
    assert record.budget_findings == []


def test_an_export_that_decodes_the_same_passes_against_the_reference(edge: EdgeSession, project: Path) -> None:
    """Another artifact (``reference=ref``) that decodes the same tokens passes against ref's goldens."""
    record_goldens(edge)
    write_decoder(project / "models", "same")
    record, violations = check(edge, target(edge, "same", reference="ref"))
    assert violations == [] and record.accuracy is not None and record.accuracy.token_agreement == 1.0


@pytest.mark.parametrize("k", [1, 3, 5])
def test_a_decoder_that_parts_at_position_k_fails_naming_position_k(edge: EdgeSession, project: Path, k: int) -> None:
    """A decoder that parts from the golden at new token ``k``: one violation per prompt naming the
    prompt, the position ``k``, the golden's and the obtained token there and both sequences (where
    its obtained tokens were written appended); the teacher-forced figures put the first top-1
    difference at prompt 0, position ``k`` (one position per prompt differs)."""
    record_goldens(edge)
    write_decoder(project / "models", "cand", part_at=k)
    record, violations = check(edge, target(edge, "cand", reference="ref"))
    assert len(violations) == len(PROMPTS)
    for prompt, message in zip(PROMPTS, violations):
        golden, got = counted(prompt, NEW), counted(prompt, NEW, part_at=k)
        assert golden[:k] == got[:k] and golden[k] != got[k]  # the fake parts where it says
        assert message.startswith(
            f"fake-counter: prompt {prompt}: token agreement {k / NEW:.3f} < 1: first difference at new token {k} "
            f"(golden {golden[k]}, got {got[k]}); golden {golden}, got {got}; obtained tokens written to ")
    assert record.generation is not None
    assert [row.first_difference for row in record.generation.prompts] == [k, k]
    forced = record.generation.teacher_forced
    assert forced is not None and forced.first_top1_difference == TokenPosition(prompt=0, position=k)
    assert forced.top1_agreement == pytest.approx(1 - 2 / (NEW * 2))
    assert record.accuracy is not None and record.accuracy.token_agreement == pytest.approx(k / NEW)
    # Before k the logits were the golden's: the first step's are identical.
    assert record.accuracy.max_abs_err == 0.0


def test_parting_at_the_first_token_also_fails_the_first_step_logits(edge: EdgeSession, project: Path) -> None:
    """Parting at new token 0 moves the first step's peak: besides the token message, the logits
    figures fail logits_atol with the exact |Δ| (2 x PEAK) and the cosine of two shifted peaks."""
    record_goldens(edge)
    write_decoder(project / "models", "cand", part_at=0)
    record, violations = check(edge, target(edge, "cand", reference="ref"))
    first = [v for v in violations if v.startswith(f"fake-counter: prompt {PROMPTS[0]}: ")]
    assert "first difference at new token 0 " in first[0]
    assert first[1].startswith(f"fake-counter: prompt {PROMPTS[0]}: first-step logits max |Δ| {2 * PEAK:g} > "
                               "logits_atol 0.001")
    assert record.accuracy is not None and record.accuracy.max_abs_err == 2 * PEAK
    # two vectors of +PEAK at one id and -PEAK elsewhere, the ids one apart: (VOCAB - 4) / VOCAB
    assert record.accuracy.cosine == pytest.approx((VOCAB - 4) / VOCAB)


def test_a_runtime_without_logits_has_its_tokens_checked_and_its_logits_said_not_measured(
        edge: EdgeSession, project: Path) -> None:
    """On a runtime whose API gives no logits (``why_no_logits``) the tokens are still compared (equal:
    no token violation; parting: named), the logits figures are null with the reason, and a
    logits_cosine asked for is a violation saying it was not measured: never passed in silence."""
    record_goldens(edge)
    write_decoder(project / "models", "cand", part_at=2)
    _, parted = check(edge, target(edge, "cand", backend="fake-counter-text", reference="ref"))
    assert [m.split("; ")[0] for m in parted] == [
        f"fake-counter-text: prompt {p}: token agreement {2 / NEW:.3f} < 1: first difference at new token 2 "
        f"(golden {counted(p, NEW)[2]}, got {counted(p, NEW, part_at=2)[2]})" for p in PROMPTS]

    record, violations = check(edge, target(edge, "ref", backend="fake-counter-text"))
    assert violations == []
    assert record.generation is not None
    assert all(row.not_measured == "a fake whose API gives tokens only" and row.cosine is None
               for row in record.generation.prompts)
    forced = record.generation.teacher_forced
    assert forced is not None and forced.top1_agreement is None
    assert "a fake whose API gives tokens only" in (forced.not_measured or "")

    _, violations = check(edge, target(edge, "ref", backend="fake-counter-text", logits_cosine=0.99))
    assert len(violations) == len(PROMPTS)
    for prompt, message in zip(PROMPTS, violations):
        assert message.startswith(f"fake-counter-text: prompt {prompt}: first-step logits cosine not measured "
                                  "(logits_cosine=0.99): a fake whose API gives tokens only; obtained tokens written")


def test_a_golden_shorter_than_new_tokens_is_an_error_naming_both_counts(edge: EdgeSession) -> None:
    """Goldens of 4 tokens cannot judge 6 new tokens: a GoldenError saying so, not a partial compare."""
    edge.settings.update_golden = True
    check(edge, target(edge, "ref", new_tokens=4))
    edge.settings.update_golden = False
    with pytest.raises(GoldenError, match="holds 4 tokens, the test asks for new_tokens=6: re-record it"):
        check(edge, target(edge, "ref"))


def test_a_golden_of_a_changed_artifact_is_stale(edge: EdgeSession, project: Path) -> None:
    """The reference artifact edited after its goldens were recorded: a GoldenError naming it."""
    record_goldens(edge)
    (project / "models" / "ref.counter").write_text('{"part_at": null, "edited": true}')
    fresh = EdgeSession(edge.settings)  # a later session: nothing recorded in it
    try:
        with pytest.raises(GoldenError, match=r"ref\.counter"):
            fresh.decoders.check("t", target(fresh, "ref"), lambda step: None)
    finally:
        fresh.close()


def test_logits_of_another_vocabulary_than_the_configuration_are_a_backend_error(edge: EdgeSession,
                                                                                 project: Path) -> None:
    """``teacher_force`` holds the runtime to the configuration: a decoder giving 16 logits where the
    configuration says 32 is a BackendError naming the artifact, the backend and both shapes."""
    artifact = write_decoder(project / "models", "wide")
    (project / "models" / "wide.json").write_text(
        (project / "models" / "wide.json").read_text().replace(f'"vocab_size": {VOCAB}', '"vocab_size": 32'))
    model = resolve_llm_model("wide", [project / "models"], [project / "models"])
    checker = LlmChecker(edge.settings, edge.pool)
    with pytest.raises(BackendError, match=rf"wide\.counter \(fake-counter\): teacher-forced logits of shape "
                                           rf"\[2, {VOCAB}\], expected \[2, 32\]"):
        checker.teacher_force("fake-counter", artifact, config_of(model, artifact), 1, [1], [2, 3])


# ------------------------------------------------------------------ pure helpers


def test_short_shows_a_short_prompt_whole_and_a_long_one_by_its_head_and_length() -> None:
    """Messages name a prompt: eight tokens or fewer in full, a longer one by six tokens and its length."""
    assert _short([1, 2, 3, 4, 5, 6, 7, 8]) == "[1, 2, 3, 4, 5, 6, 7, 8]"
    assert _short(list(range(9))) == "[0, 1, 2, 3, 4, 5, … (9 tokens)]"


def _forced(golden: list[int], chosen: list[int], kept: bool = False) -> TeacherForced:
    """Teacher-forced figures of a backend choosing ``chosen`` where the golden holds ``golden``."""
    logits = np.full((len(chosen), VOCAB), -PEAK, np.float32)
    logits[np.arange(len(chosen)), chosen] = PEAK
    reference = np.full((len(golden), VOCAB), -PEAK, np.float32)
    reference[np.arange(len(golden)), golden] = PEAK
    return teacher_forced(golden, top_logprobs(reference) if kept else None, logits)


def test_overall_names_the_first_top1_difference_by_prompt_and_position() -> None:
    """Over every prompt's positions joined, the first difference (index 4 of 5) is said as prompt 1,
    position 1, and the worst KL divergence where it lies; top-1 agreement 4 of 5."""
    found = _overall([_forced([1, 2, 3], [1, 2, 3], kept=True), _forced([4, 5], [4, 9], kept=True)], [])
    assert found.positions == 5 and found.top1_agreement == pytest.approx(0.8)
    assert found.first_top1_difference == TokenPosition(prompt=1, position=1)
    assert found.max_kld_at == TokenPosition(prompt=1, position=1)
    assert found.kld is not None and found.kld.maximum > 1.0 and found.not_measured is None


def test_overall_of_agreeing_prompts_names_no_difference() -> None:
    found = _overall([_forced([1, 2], [1, 2]), _forced([3], [3])], [])
    assert found.first_top1_difference is None and found.top1_agreement == 1.0 and found.kld is None


def test_overall_says_a_golden_without_distributions_leaves_the_divergence_unmeasured() -> None:
    """A golden recorded without log-probabilities: the KL divergence is not measured, said naming it."""
    found = _overall([_forced([1, 2], [1, 2])], ["golden/ref/llm/prompt-1.npz"])
    assert found.kld is None and found.not_measured is not None
    assert found.not_measured.startswith("not measured: the golden golden/ref/llm/prompt-1.npz keeps no "
                                         "log-probabilities")
    assert "--edge-update-golden" in found.not_measured


def test_file_digests_hash_each_file_of_the_artifact(project: Path) -> None:
    """A token golden's ``files``: the artifact's own sha256 under its name."""
    artifact = project / "models" / "ref.counter"
    digests = file_digests(artifact)
    assert digests[artifact.name] == hashlib.sha256(artifact.read_bytes()).hexdigest()
