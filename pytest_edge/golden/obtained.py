"""What a mismatching backend produced, against the golden: ``pytest-edge golden diff MODEL``.

A check that finds a mismatch writes the backend's outputs to
``<rootdir>/.edge/obtained/<model>/<backend>-case_NNN.npz`` (outside the committed golden folder);
this reads them back and prints, per backend, case and output, the error statistics and the worst
elements, so a user diffs files instead of reading numbers out of a failure message.

A decoder (``edge_llm``) check that fails writes, per failing prompt, what the backend generated in
its golden's own format (golden.tokens: the prompt, the greedy tokens, the first step's logits and,
where the golden keeps them, the top-k log-probabilities at each position of the golden's
continuation, teacher-forced) to ``.edge/obtained/<model>/llm/<backend>-prompt-<hash>.npz``;
``golden diff`` shows per prompt the token agreement, the first differing position with both
tokens, the first step's logits and the teacher-forced top-1 agreement.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from ..accuracy.compare import Tolerance, compare_output
from ..accuracy.metrics import cosine, max_abs_diff, token_agreement
from ..errors import GoldenError
from ..files import atomic_write, relative_path, sha256_file
from ..core.plan import Plan
from .layout import DEFAULT_SET, LLM_DIR, LLM_SET, Golden, npz_bytes
from .store import GoldenStore
from .tokens import (ObtainedTokensMeta, TokenGolden, TokenGoldenMeta, TopLogprobs, prompt_key, read_golden,
                     read_obtained, write_golden)

_NAME = re.compile(r"(?P<backend>.+)-case_(?P<case>\d{3,})\.npz")
_PROMPT_NAME = re.compile(r"(?P<backend>.+)-(?P<golden>prompt-[0-9a-f]{16}\.npz)")


def obtained_dir(rootdir: Path, model: str, key: str = DEFAULT_SET) -> Path:
    """Where a mismatching backend's outputs go: beside the golden, outside the committed folder
    (one subfolder per input set, as in the golden folder)."""
    folder = rootdir / ".edge" / "obtained" / model
    if key == LLM_SET:
        return folder / LLM_DIR
    return folder if key == DEFAULT_SET else folder / f"inputs-{key}"


def write_obtained(rootdir: Path, plan: Plan, index: int, golden: Golden, outputs: Sequence[np.ndarray],
                   out_order: Sequence[int]) -> Path:
    """Write one case's outputs beside the golden they missed (pytest-regressions' ``.obtained``
    files); the path relative to ``rootdir``. With reference= that is the reference model's golden,
    and the file is named after the tested model too, so it neither overwrites the reference model's
    own obtained files nor goes unseen by ``pytest-edge golden diff <reference>``."""
    folder = obtained_dir(rootdir, golden.model, golden.key)
    folder.mkdir(parents=True, exist_ok=True)
    who = plan.backend if plan.reference is None else f"{plan.model.name}.{plan.backend}"
    path = folder / f"{who}-case_{index:03d}.npz"
    arrays = {f"outputs/{ref.name}": np.asarray(outputs[pos]) for ref, pos in zip(golden.outputs_spec, out_order)}
    atomic_write(path, npz_bytes(arrays))
    return Path(relative_path(path, rootdir))


def diff_lines(store: GoldenStore, model: str, obtained_dir: Path, worst: int = 3,
               key: str = DEFAULT_SET) -> list[str]:
    """Lines of the report; GoldenError if the golden cannot be read, [] if nothing was obtained."""
    golden = store.load(model, key)
    lines = []
    for path in sorted(obtained_dir.glob("*.npz")) if obtained_dir.is_dir() else []:
        match = _NAME.fullmatch(path.name)
        if match is None:
            continue
        backend, index = match["backend"], int(match["case"])
        if index >= len(golden.cases):
            lines.append(f"{backend} case {index}: the golden has {len(golden.cases)} case(s) now; stale file {path}")
            continue
        with np.load(path, allow_pickle=False) as data:
            outputs = {key.split("/", 1)[1]: data[key] for key in data.files if key.startswith("outputs/")}
        for name, expected in golden.cases[index].outputs.items():
            actual = outputs.get(name)
            if actual is None or actual.shape != expected.shape:
                lines.append(f"{backend} case {index} {name}: shape {None if actual is None else actual.shape} "
                             f"against the golden's {expected.shape}")
                continue
            c = compare_output(name, expected, actual, Tolerance(atol=0.0, rtol=0.0))
            delta = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
            lines.append(f"{backend} case {index} {name}: max |Δ| {c.max_abs_err:.3g}, mean |Δ| "
                         f"{float(delta.mean()):.3g}, max rel {c.max_rel_err:.3g}, cosine "
                         f"{'—' if c.cosine is None else format(c.cosine, '.6f')}, SNR "
                         f"{'—' if c.snr_db is None else format(c.snr_db, '.1f')} dB")
            flat = np.argsort(delta, axis=None)[::-1][:worst]
            for position in flat:
                at = tuple(int(i) for i in np.unravel_index(position, delta.shape))
                # 9 significant digits tell any two float32 apart (NumPy 2's repr adds "np.float32(...)").
                lines.append(f"    at {list(at)}: golden {float(expected[at]):.9g}, {backend} {float(actual[at]):.9g}")
    return lines


def write_obtained_tokens(rootdir: Path, model: str, who: str, golden_file: Path,
                          obtained: TokenGolden[ObtainedTokensMeta]) -> Path:
    """Write what ``who`` (a backend; ``<tested model>.<backend>`` with reference=) generated for one
    prompt beside the decoder golden it missed (``golden_file``, of the golden folder ``model``), in
    the golden's own format; the path relative to ``rootdir``. The golden's sha256 goes with it, so
    ``golden diff`` can tell a golden recorded since."""
    path = obtained_dir(rootdir, model, LLM_SET) / f"{who}-prompt-{prompt_key(obtained.prompt)}.npz"
    meta = replace(obtained.meta, backend=who, golden=relative_path(golden_file, rootdir),
                   golden_sha256=sha256_file(golden_file))
    write_golden(path, TokenGolden(obtained.prompt, obtained.tokens, obtained.first_logits, meta,
                                   obtained.distributions))
    return Path(relative_path(path, rootdir))


def token_diff_lines(store: GoldenStore, model: str, obtained: Path) -> list[str]:
    """Lines of the report for a decoder's obtained files (``obtained``: its ``llm`` folder), per
    backend and prompt: the free-running token agreement and the first differing position with both
    tokens, the first step's logits, the teacher-forced top-1 agreement; [] if nothing was obtained."""
    lines: list[str] = []
    for path in sorted(obtained.glob("*.npz")) if obtained.is_dir() else []:
        match = _PROMPT_NAME.fullmatch(path.name)
        if match is None:
            continue
        backend, golden_file = match["backend"], store.folder(model, LLM_SET) / match["golden"]
        try:
            got = read_obtained(path)
            if not golden_file.is_file():
                lines.append(f"{backend} prompt {_short(got.prompt)}: no golden {golden_file} for that prompt now; "
                             f"stale file {path}")
                continue
            golden = read_golden(golden_file, got.prompt)
        except GoldenError as exc:  # one unreadable file is its line, the others still shown
            lines.append(f"{backend} {match['golden']}: {exc}")
            continue
        lines += _prompt_lines(backend, got, golden, golden_file)
    return lines


def _prompt_lines(backend: str, got: TokenGolden[ObtainedTokensMeta], golden: TokenGolden[TokenGoldenMeta],
                  golden_file: Path) -> list[str]:
    new_tokens = got.meta.new_tokens if got.meta.new_tokens is not None else len(got.tokens)
    expected = golden.tokens[:new_tokens]
    agreement, first = token_agreement(expected, got.tokens)
    n = max(len(expected), len(got.tokens))
    head = (f"{backend} prompt {_short(got.prompt)}: token agreement {agreement:.3f} ({round(agreement * n)} of "
            f"{n} new tokens)")
    if first is not None:
        head += (f", first difference at new token {first}: golden {_at(expected, first)}, "
                 f"{backend} {_at(got.tokens, first)}")
    lines = [head]
    if got.meta.golden_sha256 not in (None, sha256_file(golden_file)):
        lines.append(f"    the golden {golden_file.name} was recorded again since: run the test again to compare with it")
    width = max(len("golden"), len(backend))
    lines += [f"    {'golden':<{width}} {list(expected)}", f"    {backend:<{width}} {list(got.tokens)}"]
    if got.first_logits.size == 0:
        lines.append(f"    first-step logits: not measured ({got.meta.logits_not_measured or 'none kept'})")
    elif got.first_logits.shape != golden.first_logits.shape:
        lines.append(f"    first-step logits: shape {list(got.first_logits.shape)} against the golden's "
                     f"{list(golden.first_logits.shape)}")
    else:
        lines.append(f"    first-step logits: max |Δ| {max_abs_diff(golden.first_logits, got.first_logits):.3g}, cosine "
                     f"{cosine(golden.first_logits, got.first_logits):.6f}, top token golden "
                     f"{int(np.argmax(golden.first_logits))}, {backend} {int(np.argmax(got.first_logits))}")
    top = got.meta.teacher_forced_top
    if top is not None:
        # Position j's top token, the backend having been fed the golden's first j tokens: against the golden's j-th.
        forced, at = token_agreement(expected, top)
        positions = max(len(top), len(expected))
        line = (f"    teacher-forced over the golden's tokens: top-1 agreement {forced:.3f} "
                f"({round(forced * positions)} of {positions})")
        if at is not None:
            line += f", first difference at new token {at}: golden {_at(expected, at)}, {backend}'s top {_at(top, at)}"
        kld = got.meta.teacher_forced.kld if got.meta.teacher_forced is not None else None
        if kld is not None:
            line += f"; KL divergence mean {kld.mean:.3g}, max {kld.maximum:.3g} nats"
        lines.append(line)
        if at is not None and got.distributions is not None and golden.distributions is not None \
                and at < min(len(got.distributions.ids), len(golden.distributions.ids)):
            lines.append(f"    at new token {at}, golden's most likely: {_likely(golden.distributions, at)}; "
                         f"{backend}'s: {_likely(got.distributions, at)}")
    return lines


def _likely(distributions: TopLogprobs, position: int, count: int = 3) -> str:
    """The ``count`` most likely tokens at ``position`` with their probabilities."""
    ids, logprobs = distributions.ids[position][:count], distributions.logprobs[position][:count]
    return ", ".join(f"{int(i)} (p {float(np.exp(p)):.3f})" for i, p in zip(ids, logprobs))


def _at(tokens: Sequence[int], index: int) -> str:
    return str(tokens[index]) if index < len(tokens) else "none (shorter)"


def _short(prompt: Sequence[int]) -> str:
    prompt = list(prompt)
    return str(prompt) if len(prompt) <= 8 else f"[{', '.join(map(str, prompt[:6]))}, … ({len(prompt)} tokens)]"
