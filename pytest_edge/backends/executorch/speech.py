"""ExecuTorch's speech capability: a Whisper model through optimum-executorch, the field's exporter
for ExecuTorch Whisper (``optimum-cli export executorch --task automatic-speech-recognition
--recipe xnnpack``), in the export folder's ``executorch/model.pte``, beside the export's
``config.json``, ``generation_config.json`` and ``preprocessor_config.json``. Run through
``executorch.runtime`` (the product does not need optimum-executorch) as optimum-executorch's own
Python runtime drives it (``ExecuTorchModelForSpeechSeq2Seq`` of optimum/executorch/modeling.py):

- ``encoder(input_features [1, mel bins, frames]) -> hidden states [1, 1500, d_model]``, once;
- ``text_decoder(decoder_input_ids [1, 1], encoder_hidden_states, cache_position [1]) -> logits
  [1, 1, vocab]``, one token per call, ``cache_position`` counting from 0: its self-attention keys
  and values live in the program's mutable buffers (a static cache of ``get_max_seq_len``
  positions), so a new transcription restarts at position 0 and the causal mask hides what the
  last one left beyond it.

optimum-executorch's own ``generate`` feeds only the start token and takes the plain argmax; here
the forced start (start-of-transcript, language, task, no-timestamps) is fed a token a call, and
each next token is picked with ``generation_config.json``'s suppression (``speech.greedy_pick``),
as every runtime here decodes. The .pte holds no preprocessor method: the features are our NumPy
log-mel (``speech_features.log_mel``), as the ONNX Runtime reference computes them.

The configuration is checked against what the .pte itself holds, read from its flatbuffer without
the runtime (program.py): its methods, the encoder's input (mel bins, frames), the decoder's
inputs and its logits' vocabulary, and the exporter's constant methods (``get_vocab_size``,
``get_eos_id``, ``decoder_start_token_id``, ``get_max_seq_len``, the cache's length)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BackendError
from ..speech import SpeechConfig, Stopwatch, Transcription, greedy_decode, one_window
from ..speech_features import log_mel
from . import SPEECH_FILE

if TYPE_CHECKING:
    from .program import TensorValue

BACKEND = "executorch"
ENCODER, DECODER = "encoder", "text_decoder"
# The exporter's constant methods this recognizer reads, and what each must equal in the export's
# configuration (SpeechConfig's attribute; the cache length is checked on its own).
METADATA = {"get_vocab_size": "vocab_size", "get_eos_id": "eos_token_id",
            "decoder_start_token_id": "decoder_start_token_id"}
MAX_SEQ_LEN = "get_max_seq_len"  # the decoder's static self-attention cache, in positions
FLOAT32, INT64 = 6, 4  # ExecuTorch ScalarType codes
# What program_figures says of one method: a constant method's value (get_vocab_size ...), else its
# (inputs, outputs), None for a value that is no tensor.
MethodFigure = int | bool | tuple[list["TensorValue | None"], list["TensorValue | None"]]


def program_figures(path: Path) -> dict[str, MethodFigure]:
    """What ``path`` (a .pte) says of itself without the runtime: each method's input and output
    sizes and each constant method's value. A BackendError naming the file where it is no program."""
    from .program import UNREADABLE, read_plans
    from .runtime import program_bytes, pte_problem

    try:
        data, size = program_bytes(path)
    except OSError as exc:
        raise BackendError(f"{path} ({BACKEND}): cannot read: {exc}") from None
    problem = pte_problem(data, path, size)  # bad identifier bytes abort the runtime itself
    if problem:
        raise BackendError(f"{problem} ({BACKEND})")
    try:
        plans = read_plans(data)
    except UNREADABLE as exc:
        raise BackendError(f"{path} ({BACKEND}): cannot load: {_runtime_reason(path) or exc}") from None
    found: dict[str, MethodFigure] = {}
    for plan in plans:
        constant = plan.constant()
        if constant is not None:
            found[plan.name] = constant
        else:
            found[plan.name] = ([plan.tensor(i) for i in plan.inputs], [plan.tensor(i) for i in plan.outputs])
    return found


def _runtime_reason(path: Path) -> str | None:
    """Why ExecuTorch's runtime itself refuses the program at ``path`` (its error, its code named),
    for a file our flatbuffer reader cannot read either: the runtime's word, not the reader's. None
    where the runtime loads it."""
    from executorch.runtime import Runtime  # noqa: F401 - the runtime before the program loads

    from .runtime import explain_error, load_program

    data = path.read_bytes()
    try:
        load_program(data, path)
    except (RuntimeError, OSError, ValueError) as exc:
        return explain_error(str(exc))
    return None


class ExecuTorchRecognizer:
    def __init__(self, folder: Path, threads: int) -> None:
        self.config = SpeechConfig.opened_by(folder, BACKEND)
        self.path = folder / SPEECH_FILE
        if not self.path.is_file():
            raise BackendError(f"{self.path} ({BACKEND}): missing (optimum-executorch's Whisper export writes "
                               "model.pte: optimum-cli export executorch --task automatic-speech-recognition)")
        self.context = self._check(program_figures(self.path))
        self._load(threads)

    def _check(self, figures: dict[str, MethodFigure]) -> int:
        """The export's configuration against the program's own methods and constants; the
        decoder's context in positions (the shorter of its cache and config.json's
        max_target_positions, the position embeddings' length)."""
        config, path = self.config, self.path
        for method in (ENCODER, DECODER):
            if not isinstance(figures.get(method), tuple):
                raise BackendError(f"{path} ({BACKEND}): no {method} method (methods: {', '.join(sorted(figures))}); "
                                   "not optimum-executorch's Whisper export")
        encoder_inputs = figures[ENCODER][0]
        features = encoder_inputs[0] if len(encoder_inputs) == 1 else None
        if features is None or features.scalar_type != FLOAT32 or len(features.sizes) != 3:
            raise BackendError(f"{path} ({BACKEND}): its encoder does not take one float32 [1, mel bins, frames] "
                               f"input: {figures[ENCODER][0]}")
        if features.sizes[1] != config.num_mel_bins:
            raise BackendError(f"{path} ({BACKEND}): its encoder takes {features.sizes[1]} mel bins, config.json's "
                               f"num_mel_bins is {config.num_mel_bins}")
        if features.sizes[2] != config.features.frames:
            raise BackendError(f"{path} ({BACKEND}): its encoder takes {features.sizes[2]} frames, "
                               f"preprocessor_config.json makes {config.features.frames}")
        inputs, outputs = figures[DECODER]
        if len(inputs) != 3 or None in inputs or [t.scalar_type for t in inputs] != [INT64, FLOAT32, INT64] \
                or len(outputs) != 1 or outputs[0] is None:
            raise BackendError(f"{path} ({BACKEND}): its text_decoder is not (decoder_input_ids int64, "
                               f"encoder_hidden_states float32, cache_position int64) -> logits: {inputs} -> {outputs}")
        vocab = outputs[0].sizes[-1]
        if vocab != config.vocab_size:
            raise BackendError(f"{path} ({BACKEND}): its text_decoder's logits are over {vocab} ids, config.json's "
                               f"vocab_size is {config.vocab_size}")
        for method, attribute in METADATA.items():
            value = figures.get(method)
            if value is not None and int(value) != getattr(config, attribute):
                source = "config.json" if attribute == "vocab_size" else "generation_config.json"
                raise BackendError(f"{path} ({BACKEND}): its {method} is {int(value)}, {source}'s {attribute} is "
                                   f"{getattr(config, attribute)}")
        cache = figures.get(MAX_SEQ_LEN)
        if cache is None:
            raise BackendError(f"{path} ({BACKEND}): no {MAX_SEQ_LEN} method: the decoder's cache length is unknown")
        if int(cache) <= len(config.prompt):
            raise BackendError(f"{path} ({BACKEND}): its {MAX_SEQ_LEN} is {int(cache)} positions, too few for the "
                               f"forced start of {len(config.prompt)} tokens (generation_config.json) and one more")
        return min(int(cache), config.max_target_positions)

    def _load(self, threads: int) -> None:
        from executorch.runtime import Runtime  # noqa: F401 - the runtime before the program loads

        from .runtime import explain_error, load_failure_hint, load_program

        if threads:
            from executorch.extension.pybindings import portable_lib

            portable_lib._unsafe_reset_threadpool(threads)
        self._data = self.path.read_bytes()  # the program points into these bytes: keep them alive
        try:
            self.program = load_program(self._data, self.path)
            self.encoder = self.program.load_method(ENCODER)
            self.decoder = self.program.load_method(DECODER)
        except (RuntimeError, OSError, ValueError) as exc:
            raise BackendError(f"{self.path} ({BACKEND}): cannot load: {explain_error(str(exc))}"
                               f"{load_failure_hint(self._data, self.path)}") from None

    def _encode(self, features: np.ndarray) -> Any:
        import torch

        try:
            hidden = self.encoder.execute([torch.from_numpy(np.ascontiguousarray(features, np.float32))])[0]
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"{self.path} ({BACKEND}): the encoder failed: {explain(exc)}") from None
        # The output lies in the encoder's planned memory: a copy the decoder's calls can hold.
        return hidden.clone()

    def _step(self, token: int, hidden: Any, position: int) -> np.ndarray:
        """The decoder's logits [vocab] after ``token`` at ``position`` (its cache holds the ones before)."""
        import torch

        try:
            logits = self.decoder.execute([torch.tensor([[token]], dtype=torch.long), hidden,
                                           torch.tensor([position], dtype=torch.long)])[0]
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"{self.path} ({BACKEND}): the text_decoder failed at position {position}: "
                               f"{explain(exc)}") from None
        return logits.reshape(-1).float().numpy().copy()

    def _prompt(self, hidden: Any) -> np.ndarray:
        """The forced start fed a token a call from position 0; the last one's logits."""
        logits = np.empty(0, np.float32)
        for position, token in enumerate(self.config.prompt):
            logits = self._step(token, hidden, position)
        return logits

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        config = self.config
        audio_s = one_window(audio, config, BACKEND)
        clock = Stopwatch()
        features = log_mel(audio, config.features)
        features_ms = clock.lap()
        hidden = self._encode(features)
        encoder_ms = clock.lap()
        prompt_logits = self._prompt(hidden)

        def next_logits(step: int, tokens: list[int]) -> np.ndarray | None:
            if step == 0:
                return prompt_logits
            position = len(config.prompt) + len(tokens) - 1  # the last token's place in the cache
            if position >= self.context:  # as onnxruntime-cpu: the decoder's context is full
                return None
            return self._step(tokens[-1], hidden, position)

        tokens, ended, first_token_ms, decode_s = greedy_decode(next_logits, config, new_tokens, clock)
        return Transcription(tokens, ended, audio_s, features_ms, encoder_ms, first_token_ms, decode_s, clock.total())

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray:
        """Logits [len(tokens), vocab]: the forced start, then ``tokens`` (but the last) fed one a
        call, row j the logits after the start and ``tokens[:j]``."""
        config = self.config
        if len(config.prompt) + len(tokens) - 1 > self.context:
            raise BackendError(f"{self.path} ({BACKEND}): {len(tokens)} tokens after the forced start exceed the "
                               f"decoder's context of {self.context}")
        hidden = self._encode(log_mel(audio, config.features))
        rows = [self._prompt(hidden)]
        for offset, token in enumerate(tokens[:-1]):
            rows.append(self._step(token, hidden, len(config.prompt) + offset))
        return np.stack(rows)


def explain(exc: Exception) -> str:
    from .runtime import explain_error

    return explain_error(str(exc))
