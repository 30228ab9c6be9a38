"""errors.error_line: the line of a runtime's or a tool's output that says its error, quoted in the
messages of a crashed worker and of a failed compiler."""

from __future__ import annotations

from pytest_edge.errors import error_line, said_error

# whisper.cpp aborting on an f32 GGML file (its converter's use-f32): ggml prints its assertion, then a
# debugger's backtrace, so the last lines are the debugger's.
GGML_ABORT = """whisper_init_from_file_with_params_no_state: loading model from 'ggml-model.bin'
/tmp/pip-req-build/whisper.cpp/ggml/src/ggml-cpu/ops.cpp:6260: GGML_ASSERT(src0->type == GGML_TYPE_F16) failed
#0  0x00007f16 in __GI___wait4 (pid=12, stat_loc=0x0, options=0, usage=0x0) at ../sysdeps/unix/sysv/linux/wait4.c:30
#46 0x0000558e in _start ()
[Inferior 1 (process 11894) detached]
"""


def test_an_assertion_above_a_backtrace_is_the_error() -> None:
    assert error_line(GGML_ABORT) == ("/tmp/pip-req-build/whisper.cpp/ggml/src/ggml-cpu/ops.cpp:6260: "
                                      "GGML_ASSERT(src0->type == GGML_TYPE_F16) failed")
    assert said_error("python3: main.c:4: main: Assertion `n > 0' failed.") is not None


def test_without_an_error_line_the_last_line_is_said_and_nothing_is_found() -> None:
    assert said_error("loading\n[Inferior 1 detached]\n") is None
    assert error_line("loading\n[Inferior 1 detached]\n") == "[Inferior 1 detached]"
    assert error_line("") == "it printed nothing"
    assert error_line("ValueError: " + "x" * 3000).endswith("(1012 more characters)")
