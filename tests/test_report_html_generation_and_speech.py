"""report/html_generation.py and report/html_speech.py: the HTML page's decoder and speech sections,
from records built as a finished check builds them: the tables' cells in their columns, the charts
drawn (TTFT/TPOT distributions, memory against context, real-time factor bars, each window's
latency), a figure a runtime does not give drawn as "not measured", and hostile names escaped."""

from __future__ import annotations

import re
from dataclasses import replace

from pytest_edge.core.generation_figures import ContextLength, ContextSweep
from pytest_edge.core.record import GenerationRecord, Record, SpeechFile, SpeechRecord, SpeechWindow
from pytest_edge.core.speech_record import RecordSpeechConfig
from pytest_edge.llm.metrics import timing_figures
from pytest_edge.report.generation import HEADERS as GENERATION_HEADERS
from pytest_edge.report.html_generation import generation_charts, generation_section
from pytest_edge.report.html_speech import speech_charts, speech_section
from pytest_edge.report.speech import HEADERS as SPEECH_HEADERS
from pytest_edge.report.table import DASH

HOSTILE = "<script>alert(1)</script>"
TENSOR = Record.from_json(Record("tests/test_m.py::test_m[net-cpu]", {"name": "net"}, "cpu", latency_ms={"p50": 1.0},
                                 accuracy={}, checked=True).conclude([]).to_json())


def decoder(backend: str = "llama.cpp", test: str = "test_short", *, new_tokens: int = 3, swept: bool = True) -> Record:
    tpot_s = [0.002, 0.003] if new_tokens > 1 else []
    figures = timing_figures(6, [0.010, 0.011, 0.012], tpot_s, [0.005] * 3, new_tokens)
    figures = replace(figures, load_ms=20.0, peak_memory_mb=6.0, kv_cache_estimate_mb=0.0075)
    context = ContextSweep(tuple(ContextLength(n, "ok", 5.0 + n / 64, n / 2048) for n in (64, 128, 256)), 256, None,
                           False) if swept else None
    block = GenerationRecord(new_tokens=new_tokens, kv_cache="runtime", measured=figures, context=context)
    record = Record(f"tests/test_llm.py::{test}[tiny_llm-{backend}]", {"name": "tiny_llm"}, backend,
                    accuracy={"token_agreement": 1.0}, generation=block, checked=True)
    return Record.from_json(record.conclude([]).to_json())  # as the report holds it, read back


def speech(backend: str = "whisper.cpp", files: list[SpeechFile] | None = None, test: str = "test_asr") -> Record:
    block = SpeechRecord(config=RecordSpeechConfig(), new_tokens=32, reference="onnxruntime-cpu", transcript_decoding="tokenizer",
                         files=files if files is not None else [audio_file()])
    record = Record(f"tests/test_speech.py::{test}[whisper-{backend}]", {"name": "whisper"}, backend, accuracy={},
                    speech=block, checked=True)
    return Record.from_json(record.conclude([]).to_json())


def audio_file(name: str = "hello.wav", *, rtf: float = 0.05, first_token_ms: float | None = 55.0,
               windows: list[SpeechWindow] | None = None) -> SpeechFile:
    return SpeechFile(audio=name, audio_s=2.0, golden_tokens=[1], tokens=[1], golden_transcript="hi", transcript="hi",
                      first_difference=None, wer=0.0, cer=0.0, real_time_factor=rtf, features_ms=1.0, encoder_ms=40.0,
                      first_token_ms=first_token_ms, decode_tokens_per_s=None, windows=windows or [])


def window(start_s: float, total_ms: float) -> SpeechWindow:
    return SpeechWindow(start_s=start_s, audio_s=30.0, tokens=10, first_difference=None, total_ms=total_ms,
                        encoder_ms=None, first_token_ms=None, real_time_factor=total_ms / 30000)


def rows(lines: list[str]) -> list[list[str]]:
    return [re.findall(r"<td>(.*?)</td>", line) for line in lines if line.startswith("<tr><td>")]


# ------------------------------------------------------------------ decoders


def test_no_decoder_no_section() -> None:
    assert generation_section([TENSOR]) == [] and generation_charts([TENSOR]) == []


def test_generation_section_has_a_row_per_measured_decoder_and_its_charts() -> None:
    lines = generation_section([TENSOR, decoder("llama.cpp"), decoder("executorch")])
    assert lines[0] == '<section id="llm"><h2>LLM generation</h2>' and lines[-1] == "</section>"
    table = rows(lines)
    assert [row[2] for row in table] == ["executorch", "llama.cpp"]
    cells = dict(zip(GENERATION_HEADERS, table[0]))
    assert (cells["TTFT P50 ms"], cells["TPOT P50 ms"], cells["longest stable context"]) == ("11.000", "2.500", "256")
    page = "".join(lines)
    for title in ("TTFT distribution", "TPOT distribution", "Memory against context"):
        assert f"<h3>{title}</h3><svg" in page
    # one solid (peak) and one dashed (estimate) curve per decoder
    memory = page[page.index("Memory against context"):]
    assert len(re.findall("<polyline ", memory[:memory.index("</svg>")])) == 4


def test_a_decoder_with_one_new_token_has_no_tpot_chart_and_a_dash() -> None:
    lines = generation_section([decoder(new_tokens=1, swept=False)])
    assert dict(zip(GENERATION_HEADERS, rows(lines)[0]))["TPOT P50 ms"] == DASH
    page = "".join(lines)
    assert "TTFT distribution" in page and "TPOT distribution" not in page and "Memory against context" not in page


def test_generation_section_escapes_a_hostile_test_name() -> None:
    page = "".join(generation_section([decoder(test=HOSTILE)]))
    assert "<script>" not in page and "&lt;script&gt;" in page


# ------------------------------------------------------------------ speech


def test_no_speech_check_no_section() -> None:
    assert speech_section([TENSOR, decoder()]) == [] and speech_charts([TENSOR]) == []


def test_speech_section_has_a_row_per_audio_file_and_its_bar_charts() -> None:
    lines = speech_section([speech("whisper.cpp", [audio_file("b.wav"), audio_file("a.wav", rtf=0.5)])])
    assert lines[0] == '<section id="speech"><h2>Speech recognition</h2>'
    table = rows(lines)
    assert [dict(zip(SPEECH_HEADERS, row))["audio"] for row in table] == ["a.wav", "b.wav"]
    assert dict(zip(SPEECH_HEADERS, table[0]))["real-time factor"] == "0.5000"
    page = "".join(lines)
    for title in ("Real-time factor (processing time / audio duration)", "Encoder time", "Time to first token"):
        assert f"<h3>{title}</h3><svg" in page
    assert "test_asr · whisper.cpp a.wav: 0.500 x" in page  # the bar's tooltip: check, audio, value, unit


def test_a_runtime_without_a_first_token_time_is_drawn_not_measured() -> None:
    """CTranslate2 generates in one call: no time to first token, drawn as such, not a zero bar."""
    page = "".join(speech_section([speech("ctranslate2", [audio_file(first_token_ms=None)]),
                                   speech("whisper.cpp")]))
    first_token = page[page.index("Time to first token"):]
    first_token = first_token[:first_token.index("</svg>")]
    assert "hello.wav: not measured" in first_token
    assert len(re.findall("<rect ", first_token)) == 1  # whisper.cpp's bar alone
    assert dict(zip(SPEECH_HEADERS, rows(speech_section([speech("ctranslate2", [audio_file(first_token_ms=None)])]))[0]))[
        "first token ms"] == DASH


def test_each_windows_latency_is_a_line_for_audio_longer_than_a_window() -> None:
    long = audio_file("long.wav", windows=[window(0.0, 400.0), window(30.0, 380.0), window(60.0, 120.0)])
    page = "".join(speech_section([speech(files=[long, audio_file("short.wav")])]))
    chart = page[page.index("<h3>Latency of each window</h3>"):]
    chart = chart[:chart.index("</svg>")]
    assert len(re.findall("<polyline ", chart)) == 1 and len(re.findall("<circle ", chart)) == 3
    assert "window start, s; y: ms" in chart
    assert "Latency of each window" not in "".join(speech_section([speech(files=[audio_file("short.wav")])]))


def test_speech_section_escapes_hostile_audio_and_backend_names() -> None:
    page = "".join(speech_section([speech(f"cpu{HOSTILE}", [audio_file(HOSTILE)])]))
    assert "<script>" not in page and "&lt;script&gt;" in page
