"""report/generation.py and report/speech.py: the figures of a decoder's ``llm`` block and of a speech
check's ``speech`` block as both pages and the terminal show them, read from records built as a
finished check builds them (``Record`` with its ``GenerationRecord`` / ``SpeechRecord``, timed
figures from llm.metrics.timing_figures), written to JSON as the report holds them and read back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_edge.core.generation_figures import ContextLength, ContextStop, ContextSweep, GenerationProcessFigures
from pytest_edge.core.generation_record import RecordLlmConfig
from pytest_edge.core.speech_record import RecordSpeechConfig
from pytest_edge.core.record import GenerationRecord, Record, SpeechFile, SpeechRecord, SpeechWindow, Verdict
from pytest_edge.llm.metrics import timing_figures
from pytest_edge.report import generation, speech
from pytest_edge.report.generation import (QUALITY, context_points, decoder_gate_figures, distribution,
                                           generation_lines, generation_of, generation_rows, is_decoder, measured,
                                           median_ms, quality_cells)
from pytest_edge.report.speech import speech_of, speech_rows
from pytest_edge.report.table import DASH

TENSOR = Record.from_json(Record("tests/test_m.py::test_m[net-onnxruntime-cpu]",
                                 {"name": "net", "artifact": "models/net.onnx", "sha256": "0" * 64}, "onnxruntime-cpu",
                                 latency_ms={"p50": 1.0}, accuracy={"max_abs_err": 0.0}, checked=True
                                 ).conclude([]).to_json())


def decoder_record(backend: str = "onnxruntime-genai", test: str = "test_short", *, new_tokens: int = 3,
                   ttft_s: tuple[float, ...] = (0.010, 0.011, 0.012), swept: tuple[int, ...] | None = (64, 128, 256),
                   stable: bool = True, violations: tuple[str, ...] = (), model: str = "tiny_llm") -> Record:
    """A measured decoder record: its timing figures as the decoder check computes them from the
    worker's samples (TPOT samples: one per token after the first, so none for ``new_tokens=1``),
    load and memory, the context sweep's points (the first one failed where not ``stable``)."""
    tpot_s = [0.002, 0.003] * (new_tokens - 1) if new_tokens > 1 else []
    figures = replace(timing_figures(6, list(ttft_s), tpot_s, [0.005] * len(ttft_s), new_tokens),
                      load_ms=20.04, peak_memory_mb=6.25, kv_cache_estimate_mb=0.0075,
                      processes=(GenerationProcessFigures(11.0, 2.5 if tpot_s else None),))
    context = None
    if swept is not None:
        points = tuple(ContextLength(n, "ok" if stable else "killed", 5.0 + n / 64, n / 2048) for n in swept)
        context = ContextSweep(points, max(swept) if stable and swept else None,
                               None if stable else ContextStop(swept[0], "killed"), not stable)
    block = GenerationRecord(config=RecordLlmConfig(vocab_size=32, n_layers=2), new_tokens=new_tokens, kv_cache="runtime",
                             measured=figures, context=context)
    record = Record(f"tests/test_llm.py::{test}[{model}-{backend}]",
                    {"name": model, "artifact": f"models/{model}.onnx", "sha256": "1" * 64}, backend,
                    accuracy={"reference": "onnxruntime-cpu", "token_agreement": 0.875, "top1_agreement": 1.0,
                              "kld_mean": 2.3e-4, "max_abs_err": 1e-3, "cosine": 0.9999},
                    peak_memory_mb=6.25, artifact_bytes=4096, generation=block, checked=True)
    return Record.from_json(record.conclude(list(violations)).to_json())


def unmeasured_decoder_record() -> Record:
    """A decoder checked for its tokens only (no measurement asked): a block with no timed figures."""
    block = GenerationRecord(new_tokens=3, kv_cache="runtime")
    record = Record("tests/test_llm.py::test_tokens[tiny_llm-llama.cpp]", {"name": "tiny_llm"}, "llama.cpp",
                    accuracy={"token_agreement": 1.0}, generation=block, checked=True)
    return Record.from_json(record.conclude([]).to_json())


# ------------------------------------------------------------------ generation


def test_the_reports_find_the_decoder_block_of_a_decoder_record_only() -> None:
    record = decoder_record()
    assert generation_of(record) is record.generation and is_decoder(record)
    assert generation_of(TENSOR) is None and not is_decoder(TENSOR) and measured(TENSOR) is None
    assert generation_of(Record.from_json({**TENSOR.to_json(), "llm": ["not", "a", "block"]})) is None  # hand-edited
    assert is_decoder(unmeasured_decoder_record()) and measured(unmeasured_decoder_record()) is None


def test_generation_rows_put_each_figure_in_its_column() -> None:
    [row] = generation_rows([TENSOR, unmeasured_decoder_record(), decoder_record()])
    cells = dict(zip(generation.HEADERS, row))
    assert cells == {"test": "tests/test_llm.py::test_short[tiny_llm-onnxruntime-genai]", "model": "tiny_llm",
                     "backend": "onnxruntime-genai", "prompt tokens": "6", "TTFT P50 ms": "11.000",
                     "TPOT P50 ms": "2.500", "prefill tokens/s": "548", "decode tokens/s": "400", "load ms": "20.0",
                     "peak MB": "6.2", "KV estimate MB": "0.0075", "longest stable context": "256",
                     "verdict": "passed"}


def test_a_figure_not_measured_is_a_dash_never_zero() -> None:
    """One new token: no TPOT and no decode speed; no sweep: no longest context; a failed sweep's too."""
    [row] = generation_rows([decoder_record(new_tokens=1, swept=None)])
    cells = dict(zip(generation.HEADERS, row))
    assert cells["TPOT P50 ms"] == cells["decode tokens/s"] == cells["longest stable context"] == DASH
    [row] = generation_rows([decoder_record(stable=False)])
    assert dict(zip(generation.HEADERS, row))["longest stable context"] == DASH
    hand_edited = decoder_record().to_json()
    hand_edited["llm"]["peak_memory_mb"] = float("nan")  # a report is untrusted input: no finite number, no figure
    cells = dict(zip(generation.HEADERS, generation_rows([Record.from_json(hand_edited)])[0]))
    assert cells["peak MB"] == DASH
    hand_edited["llm"]["load_ms"] = "fast"  # no number at all: the record's reader refuses it
    with pytest.raises(ValueError, match="load_ms"):
        Record.from_json(hand_edited)


def test_generation_rows_are_ordered_by_model_backend_test() -> None:
    rows = generation_rows([decoder_record("llama.cpp", "test_b"), decoder_record("llama.cpp", "test_a"),
                            decoder_record("executorch", "test_z"), decoder_record("llama.cpp", "test_a", model="a_llm")])
    assert [(r[1], r[2], r[0].split("::")[1].split("[")[0]) for r in rows] == [
        ("a_llm", "llama.cpp", "test_a"), ("tiny_llm", "executorch", "test_z"), ("tiny_llm", "llama.cpp", "test_a"),
        ("tiny_llm", "llama.cpp", "test_b")]


def test_distribution_gives_the_percentiles_in_ms_and_the_marks() -> None:
    ttft = distribution(decoder_record(), "ttft")
    assert ttft is not None and len(ttft.quantiles) == 101
    assert ttft.quantiles[0] == 10.0 and ttft.quantiles[-1] == 12.0
    assert ttft.marks == {"p50": 11.0, "p90": pytest.approx(11.8)}
    assert median_ms(decoder_record(), "ttft") == 11.0 and median_ms(decoder_record(), "tpot") == 2.5
    # One new token: no TPOT sample, so no TPOT distribution (not one of zeros).
    assert distribution(decoder_record(new_tokens=1), "tpot") is None
    assert median_ms(decoder_record(new_tokens=1), "tpot") is None
    assert distribution(TENSOR, "ttft") is None


def test_context_points_are_shortest_first_with_none_where_not_measured() -> None:
    data = decoder_record(swept=(256, 64, 128)).to_json()
    data["llm"]["context"]["points"][0]["peak_memory_mb"] = None  # the 256-token point was not measured
    points = context_points(Record.from_json(data))
    assert [p.tokens for p in points] == [64, 128, 256]
    assert points[2].peak_memory_mb is None and points[2].kv_cache_estimate_mb == 0.125
    assert points[0].peak_memory_mb == 6.0 and points[0].status == "ok"
    assert context_points(TENSOR) == [] and context_points(decoder_record(swept=None)) == []


def test_quality_cells_are_the_accuracy_figures_in_order_dashes_where_not_measured() -> None:
    assert [key for _, key, _ in QUALITY] == ["token_agreement", "top1_agreement", "kld_mean"]
    assert quality_cells(decoder_record()) == ["0.875", "1.000", "2.30e-04"]
    assert quality_cells(unmeasured_decoder_record()) == ["1.000", DASH, DASH]
    assert quality_cells(Record("t", {"name": "m"}, "cpu")) == [DASH, DASH, DASH]


def test_decoder_gate_figures_are_what_the_merge_gate_reads_of_a_decoder_record() -> None:
    figures = decoder_gate_figures(decoder_record(), source="here")
    assert figures is not None and (figures.backend, figures.source) == ("onnxruntime-genai", "here")
    assert [p.timed for p in figures.processes] == [{"ttft_p50_ms": 11.0, "tpot_p50_ms": 2.5}]
    assert (figures.peak_memory_mb, figures.artifact_bytes, figures.artifact) == (6.25, 4096, "models/tiny_llm.onnx")
    assert not figures.timing_not_judged and figures.pooled_ms == {}
    assert decoder_gate_figures(TENSOR) is None


def test_generation_lines_say_the_figures_of_each_measured_decoder() -> None:
    lines = generation_lines([TENSOR, unmeasured_decoder_record(), decoder_record()])
    assert lines == ["tests/test_llm.py::test_short[tiny_llm-onnxruntime-genai]: TTFT P50 11.000 ms (6 tokens), "
                     "TPOT P50 2.500 ms, decode 400 ± 0 tokens/s, longest stable context 256"]


def test_generation_lines_of_a_decoder_with_one_new_token_or_no_stable_context() -> None:
    """One new token has no TPOT (its P50 is null): a dash, not a TypeError that loses the terminal
    summary; a sweep none of whose lengths ran: no stable context, a dash, not "None"."""
    [line] = generation_lines([decoder_record(new_tokens=1, swept=None)])
    assert line == ("tests/test_llm.py::test_short[tiny_llm-onnxruntime-genai]: TTFT P50 11.000 ms (6 tokens), "
                    f"TPOT P50 {DASH}, decode {DASH} tokens/s")
    [line] = generation_lines([decoder_record(stable=False)])
    assert line.endswith(f"longest stable context {DASH}") and "None" not in line


# ------------------------------------------------------------------ speech


def speech_record(backend: str = "whisper.cpp", test: str = "test_asr", *, files: list[SpeechFile] | None = None,
                  model: str = "whisper-tiny", verdict_violations: tuple[str, ...] = ()) -> Record:
    block = SpeechRecord(config=RecordSpeechConfig(unknown={"language": "en"}), new_tokens=32, reference="onnxruntime-cpu",
                         transcript_decoding="tokenizer", files=files if files is not None else [speech_file()])
    record = Record(f"tests/test_speech.py::{test}[{model}-{backend}]", {"name": model, "artifact": None, "sha256": None},
                    backend, accuracy={"reference": "onnxruntime-cpu"}, speech=block, checked=True)
    return Record.from_json(record.conclude(list(verdict_violations)).to_json())


def speech_file(audio: str = "hello.wav", *, first_difference: int | None = None, encoder_ms: float | None = 41.234,
                first_token_ms: float | None = 55.5, decode_tokens_per_s: float | None = 812.4,
                windows: list[SpeechWindow] | None = None) -> SpeechFile:
    return SpeechFile(audio=audio, audio_s=2.5, golden_tokens=[1, 2, 3], tokens=[1, 2, 4], golden_transcript="hello",
                      transcript="hello", first_difference=first_difference, wer=0.25, cer=0.0625,
                      real_time_factor=0.04321, features_ms=3.0, encoder_ms=encoder_ms, first_token_ms=first_token_ms,
                      decode_tokens_per_s=decode_tokens_per_s, windows=windows or [])


def window(start_s: float, total_ms: float) -> SpeechWindow:
    return SpeechWindow(start_s=start_s, audio_s=30.0, tokens=12, first_difference=None, total_ms=total_ms,
                        encoder_ms=None, first_token_ms=None, real_time_factor=total_ms / 30000)


def test_speech_of_reads_a_speech_block_only() -> None:
    record = speech_record()
    assert speech_of(record) is record.speech
    assert speech_of(TENSOR) is None and speech_of(Record.from_json({**TENSOR.to_json(), "speech": "text"})) is None


def test_speech_rows_put_each_files_figures_in_their_columns() -> None:
    [row] = speech_rows([TENSOR, speech_record()])
    assert dict(zip(speech.HEADERS, row)) == {
        "test": "tests/test_speech.py::test_asr[whisper-tiny-whisper.cpp]", "model": "whisper-tiny",
        "backend": "whisper.cpp", "audio": "hello.wav", "audio s": "2.50", "tokens": "equal", "WER": "0.250",
        "CER": "0.062", "real-time factor": "0.0432", "encoder ms": "41.23", "first token ms": "55.50",
        "decode tokens/s": "812", "window ms": DASH, "verdict": "passed"}


def test_speech_rows_say_where_tokens_part_and_dash_what_a_runtime_does_not_time() -> None:
    """CTranslate2 generates in one call (no first token time), sherpa-onnx runs encoder and decoder
    in one (no encoder time): dashes, never 0."""
    files = [speech_file(first_difference=3, encoder_ms=None, first_token_ms=None, decode_tokens_per_s=None)]
    cells = dict(zip(speech.HEADERS, speech_rows([speech_record(files=files)])[0]))
    assert cells["tokens"] == "differ at 3"
    assert cells["encoder ms"] == cells["first token ms"] == cells["decode tokens/s"] == DASH
    broken = speech_record().to_json()
    broken["speech"]["files"][0].update(wer=float("inf"), audio_s=float("nan"))  # a hand-edited report
    cells = dict(zip(speech.HEADERS, speech_rows([Record.from_json(broken)])[0]))
    assert cells["WER"] == cells["audio s"] == DASH


def test_speech_rows_give_each_windows_latency_in_order() -> None:
    files = [speech_file("long.wav", windows=[window(0.0, 412.1), window(30.0, 388.02), window(60.0, 90.5)])]
    cells = dict(zip(speech.HEADERS, speech_rows([speech_record(files=files)])[0]))
    assert cells["window ms"] == "412.10 / 388.02 / 90.50"
    one = [speech_file("short.wav", windows=[window(0.0, 412.1)])]
    assert dict(zip(speech.HEADERS, speech_rows([speech_record(files=one)])[0]))["window ms"] == DASH


def test_speech_rows_are_ordered_by_model_backend_test_audio() -> None:
    records = [speech_record("whisper.cpp", files=[speech_file("b.wav"), speech_file("a.wav")]),
               speech_record("ctranslate2"), speech_record("whisper.cpp", model="a-model")]
    rows = speech_rows(records)
    assert [(r[1], r[2], r[3]) for r in rows] == [("a-model", "whisper.cpp", "hello.wav"),
                                                  ("whisper-tiny", "ctranslate2", "hello.wav"),
                                                  ("whisper-tiny", "whisper.cpp", "a.wav"),
                                                  ("whisper-tiny", "whisper.cpp", "b.wav")]


def test_speech_rows_show_a_failed_checks_verdict() -> None:
    [row] = speech_rows([speech_record(verdict_violations=("whisper.cpp: WER 0.25 > 0.1",))])
    assert row[-1] == Verdict.FAILED
