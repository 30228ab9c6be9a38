"""Never green by accident, round 5 (issue 49): the surfaces added since round 4, probed as a hostile
user meets them, one case at a time, each in its own process under a 4 GB address-space cap and a
timeout: the run history and its creep alert, the OpenMetrics file (checked by Prometheus' own
``promtool check metrics``), ``pytest-edge history``, TensorFlow Lite Micro and its arena budget,
Ethos-U's ``allowed_cpu_ops`` and memory budgets, the product-made backend environments, and the
gate against a stored baseline whose newest figures are hostile.

    .venv/bin/python benchmarks/probe_round5.py [--only SUBSTRING] [--markdown]

Each case says what a user would expect (``error``: a non-zero exit naming what it must name;
``pass``: a benign exit 0; ``fail``: one failed test, the session not interrupted) and gets a
verdict from what happened: clear error, benign, silent green (exit 0 where an error was due),
traceback, misleading (an error that does not name what it must, or an unexpected failure),
blow-up (killed by the cap, MemoryError, or above 2 GB resident) or hang (the timeout). Prints the
table; exits 1 where any verdict is not clear error or benign.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
FIXTURES = ROOT / "fixtures"
sys.path.insert(0, str(ROOT / "tests"))  # the hostile model builders (tests/hostile_models.py)

SOURCE = ROOT  # the pytest_edge the cases import (--source: a snapshot, while others edit the checkout)
CAP_BYTES = 4_000_000_000  # address space per case
TIMEOUT_S = 120
BLOW_UP_KB = 2 * 1024 * 1024  # a resident peak above 2 GB is a blow-up whatever the exit


@dataclass
class Case:
    """One hostile input: its surface, what it is, what a user expects, how to stage it (given a fresh
    project folder, the command line to run), and what the output must name."""

    surface: str
    name: str
    expect: str  # "error", "pass", "fail"
    stage: Callable[[Path], list[str]]
    must: tuple[str, ...] = ()
    timeout: int = TIMEOUT_S
    verdict: str = ""
    said: str = ""
    extra: dict = field(default_factory=dict)


CASES: list[Case] = []


def case(surface: str, name: str, expect: str, *must: str, timeout: int = TIMEOUT_S):
    def register(stage: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
        CASES.append(Case(surface, name, expect, stage, tuple(must), timeout))
        return stage
    return register


# ------------------------------------------------------------------------------------ the project

TEST_MLP = """
import pytest
@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
def test_mlp(edge_model):
    pass
"""


def project(folder: Path, base: Path, test: str = TEST_MLP) -> None:
    """A fresh copy of the prepared project (models, goldens recorded once, pytest.ini)."""
    shutil.copytree(base, folder, dirs_exist_ok=True)
    (folder / "test_m.py").write_text(textwrap.dedent(test))


def pytest_argv(*args: str) -> list[str]:
    return [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args]


def cli(*args: str) -> list[str]:
    return [PYTHON, "-m", "pytest_edge", *args]


def prepare_base(base: Path) -> None:
    (base / "models").mkdir(parents=True)
    for name in ("tiny_mlp.onnx", "tiny_mlp.tflite", "quant_probe_int8.tflite"):
        shutil.copy(FIXTURES / name, base / "models" / name)
    (base / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n")
    (base / "test_m.py").write_text(textwrap.dedent("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert"])
        def test_mlp(edge_model):
            pass
        @pytest.mark.edge(model="quant_probe_int8", backends=["litert-ref"])
        def test_q(edge_model):
            pass
    """))
    done = subprocess.run(pytest_argv("--edge-update-golden"), cwd=base, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(SOURCE)})
    if done.returncode != 0:
        raise SystemExit(f"cannot prepare the probe's project:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (base / "test_m.py").unlink()


def a_run(folder: Path) -> dict:
    """A plausible run's report (one measured record), as a history keeps it."""
    return {"schema": "pytest-edge/report/1", "created": "2026-12-01T00:00:00Z", "machine": {"name": "ci"},
            "run": {"commit": "c0", "machine": "ci", "created": "2026-12-01T00:00:00Z"},
            "records": [{"test": "t.py::test_m[m-onnxruntime-cpu]", "model": {"name": "m"},
                         "backend": "onnxruntime-cpu", "verdict": "passed", "latency_ms": {"p50": 1.0},
                         "measured_runs": 50, "processes": [{"p50": 1.0, "runs": 50}], "peak_memory_mb": 10.0,
                         "artifact_bytes": 5000}]}


def history(folder: Path, runs: int = 4, **changes) -> Path:
    """A history folder of ``runs`` plausible runs (each a day apart)."""
    target = folder / "hist"
    target.mkdir(parents=True, exist_ok=True)
    for index in range(runs):
        run = a_run(folder)
        run["created"] = run["run"]["created"] = f"2026-12-{index + 1:02d}T00:00:00Z"
        run["run"]["commit"] = f"c{index:02d}"
        run["records"][0].update(changes)
        (target / f"2026120{index}T000000Z-c{index:02d}-ci-0000000{index}.json").write_text(json.dumps(run))
    return target


# ------------------------------------------------------------ --edge-history, --edge-max-creep

@case("history", "--edge-history=FILE (a file where the folder should be)", "error", "hist", "history")
def _(d: Path) -> list[str]:
    (d / "hist").write_text("not a folder")
    return pytest_argv("--edge-history=hist")


@case("history", "--edge-history under a folder that cannot be made (/proc/version/h)", "error", "/proc/version/h")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=/proc/version/h")


@case("history", "--edge-history=DIR holding a truncated run file, --edge-max-creep=5%", "error", "cut.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    (folder / "cut.json").write_text(json.dumps(a_run(d))[:70])
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%")


@case("history", "history holding a garbled (binary) run file, --edge-max-creep", "error", "garbled.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    (folder / "garbled.json").write_bytes(os.urandom(4096))
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%")


@case("history", "history holding a 400 MB run file (3M records), --edge-max-creep", "error", "huge.json",
      timeout=300)
def _(d: Path) -> list[str]:
    folder = history(d)
    record = json.dumps(a_run(d)["records"][0])
    with open(folder / "huge.json", "w") as handle:
        handle.write('{"schema": "pytest-edge/report/1", "records": [' + record)
        chunk = ("," + record) * 10000
        for _ in range(300):
            handle.write(chunk)
        handle.write("]}")
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%")


@case("history", "history holding a run file that is a symlink to /dev/zero", "error", "zero.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    (folder / "zero.json").symlink_to("/dev/zero")
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%")


@case("history", "history holding a run file that is a FIFO nobody writes", "error", "fifo.json", timeout=60)
def _(d: Path) -> list[str]:
    folder = history(d)
    os.mkfifo(folder / "fifo.json")
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%")


@case("history", "history holding a symlink to a run outside the folder (history show)", "error", "out.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    outside = d / "elsewhere.json"
    outside.write_text(json.dumps(a_run(d)))
    (folder / "out.json").symlink_to(outside)
    return cli("history", "show", str(folder))


@case("history", "history holding a JSON bomb (nested 100000 deep)", "error", "bomb.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    (folder / "bomb.json").write_text("[" * 100000 + "]" * 100000)
    return cli("history", "show", str(folder))


@case("history", "history holding a run whose peak memory is NaN, 1e400, -5 and a string", "error", "peak_memory_mb")
def _(d: Path) -> list[str]:
    folder = history(d)
    for index, value in enumerate(("NaN", "1e400", "-5", '"10"')):
        text = json.dumps(a_run(d)).replace('"peak_memory_mb": 10.0', f'"peak_memory_mb": {value}')
        (folder / f"z{index}.json").write_text(text)
    return cli("history", "creep", str(folder))


@case("history", "history holding a run whose P50 per process is NaN/negative/'1' (creep)", "error", "p50")
def _(d: Path) -> list[str]:
    folder = history(d, runs=3)
    text = json.dumps(a_run(d)).replace('"processes": [{"p50": 1.0', '"processes": [{"p50": "1"')
    (folder / "z.json").write_text(text)
    return cli("history", "creep", str(folder))


@case("history", "history run with records:[{}] and run block null", "error", "bad.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    (folder / "bad.json").write_text(json.dumps({"schema": "pytest-edge/report/1", "run": None, "records": [{}]}))
    return cli("history", "show", str(folder))


@case("history", "history run with a run block whose commit is a list and created a number", "error", "odd.json")
def _(d: Path) -> list[str]:
    folder = history(d)
    run = a_run(d)
    run["run"] = {"commit": ["a"], "machine": {"x": 1}, "created": 5}
    (folder / "odd.json").write_text(json.dumps(run))
    return cli("history", "show", str(folder))


@case("history", "history html of runs whose model name holds a lone surrogate", "pass")
def _(d: Path) -> list[str]:
    folder = history(d, runs=3, model={"name": "m\udcff"})
    return cli("history", "html", str(folder), "-o", str(d / "p.html"))


@case("history", "two runs appending to one history at once", "pass")
def _(d: Path) -> list[str]:
    script = ("a=( " + " ".join(pytest_argv("--edge-history=hist")) + " ); "
              '"${a[@]}" > one.log 2>&1 & "${a[@]}" > two.log 2>&1; wait; '
              f"{PYTHON} -m pytest_edge history show hist > show.log; grep -c '2 run(s)' show.log && cat one.log two.log")
    return ["bash", "-c", script]


@case("history", "--edge-max-creep=nan", "error", "--edge-max-creep")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=nan")


@case("history", "--edge-max-creep=-5%", "error", "--edge-max-creep")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=-5%")


@case("history", "--edge-max-creep=1e400%", "error", "--edge-max-creep")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=1e400%")


@case("history", "--edge-max-creep=five", "error", "--edge-max-creep")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=five")


@case("history", "--edge-creep-window=2", "error", "creep_window")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%", "--edge-creep-window=2")


@case("history", "--edge-creep-window=ten", "error", "creep_window")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%", "--edge-creep-window=ten")


@case("history", "--edge-creep-window=1e400", "error", "creep_window")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%", "--edge-creep-window=1e400")


@case("history", "--edge-creep-window=7.5", "error", "creep_window")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-max-creep=5%", "--edge-creep-window=7.5")


@case("history", "--edge-creep=never", "error", "--edge-creep")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-creep=never")


@case("history", "--edge-creep-window=5 without --edge-max-creep (it sets the page's runs per series)", "pass")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-history=hist", "--edge-creep-window=5")


# ---------------------------------------------------------------------------- pytest-edge history

@case("history CLI", "history show on a missing folder", "error", "nowhere")
def _(d: Path) -> list[str]:
    return cli("history", "show", str(d / "nowhere"))


@case("history CLI", "history show --last 0", "error", "--last")
def _(d: Path) -> list[str]:
    return cli("history", "show", str(history(d)), "--last", "0")


@case("history CLI", "history export --last -1 (would drop the first run)", "error", "--last")
def _(d: Path) -> list[str]:
    return cli("history", "export", str(history(d)), "-o", str(d / "x.json"), "--last", "-1")


@case("history CLI", "history html --window 1", "error", "--window")
def _(d: Path) -> list[str]:
    return cli("history", "html", str(history(d)), "-o", str(d / "p.html"), "--max-creep", "5%", "--window", "1")


@case("history CLI", "history creep --max-creep nan", "error", "--max-creep")
def _(d: Path) -> list[str]:
    return cli("history", "creep", str(history(d)), "--max-creep", "nan")


@case("history CLI", "history creep --max-creep -1%", "error", "--max-creep")
def _(d: Path) -> list[str]:
    return cli("history", "creep", str(history(d)), "--max-creep", "-1%")


@case("history CLI", "history creep --window 10**400 (every run: benign)", "pass")
def _(d: Path) -> list[str]:
    return cli("history", "creep", str(history(d)), "--window", "1" + "0" * 400)


@case("history CLI", "history html -o a folder", "error", "p.html")
def _(d: Path) -> list[str]:
    (d / "p.html").mkdir()
    return cli("history", "html", str(history(d)), "-o", str(d / "p.html"))


@case("history CLI", "history export -o /proc/version/x", "error", "/proc/version/x")
def _(d: Path) -> list[str]:
    return cli("history", "export", str(history(d)), "-o", "/proc/version/x")


@case("history CLI", "history import of an export whose 'runs' is 5", "error", "exp.json", "runs")
def _(d: Path) -> list[str]:
    (d / "exp.json").write_text(json.dumps({"schema": "pytest-edge/history-export/1", "runs": 5}))
    return cli("history", "import", str(d / "new"), str(d / "exp.json"))


@case("history CLI", "history import of an export whose run holds records [1] (poisons the history)", "error",
      "exp.json", "run 0")
def _(d: Path) -> list[str]:
    run = a_run(d)
    run["records"] = [1]
    (d / "exp.json").write_text(json.dumps({"schema": "pytest-edge/history-export/1", "runs": [run]}))
    return ["bash", "-c", f"{PYTHON} -m pytest_edge history import {d}/new {d}/exp.json; s=$?; "
                          f"{PYTHON} -m pytest_edge history show {d}/new || exit 3; exit $s"]


@case("history CLI", "history import of an export whose run's peak memory is NaN", "error", "exp.json",
      "peak_memory_mb")
def _(d: Path) -> list[str]:
    text = json.dumps({"schema": "pytest-edge/history-export/1", "runs": [a_run(d)]})
    (d / "exp.json").write_text(text.replace('"peak_memory_mb": 10.0', '"peak_memory_mb": NaN'))
    return cli("history", "import", str(d / "new"), str(d / "exp.json"))


@case("history CLI", "history import: path traversal in the run's commit, machine and created", "pass")
def _(d: Path) -> list[str]:
    run = a_run(d)
    run["run"] = {"commit": "../../../../tmp/evil", "machine": "../../x/../../etc/y", "created": "../../../z"}
    run["created"] = "../../../z"
    (d / "exp.json").write_text(json.dumps({"schema": "pytest-edge/history-export/1", "runs": [run]}))
    return ["bash", "-c", f"{PYTHON} -m pytest_edge history import {d}/new {d}/exp.json && test ! -e /tmp/evil && "
                          f"test $(find / -xdev -newer {d}/exp.json -name '*.json' -path '*probe5*' 2>/dev/null | "
                          f"wc -l) = 1 && ls {d}/new"]


@case("history CLI", "history import of one export twice (duplicate runs)", "pass", "2 already in")
def _(d: Path) -> list[str]:
    exported = d / "exp.json"
    subprocess.run(cli("history", "export", str(history(d, runs=2)), "-o", str(exported)), check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(SOURCE)})
    return ["bash", "-c", f"{PYTHON} -m pytest_edge history import {d}/new {exported} && "
                          f"{PYTHON} -m pytest_edge history import {d}/new {exported}; "
                          f"test $(ls {d}/new | wc -l) = 2"]


@case("history CLI", "history import: a good export then a bad file (nothing half written)", "error", "bad.json")
def _(d: Path) -> list[str]:
    exported = d / "exp.json"
    subprocess.run(cli("history", "export", str(history(d, runs=2)), "-o", str(exported)), check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(SOURCE)})
    (d / "bad.json").write_text("{")
    return ["bash", "-c", f"{PYTHON} -m pytest_edge history import {d}/new {exported} {d}/bad.json; s=$?; "
                          f"test ! -e {d}/new || test $(ls {d}/new | wc -l) = 0 || exit 0; exit $s"]


@case("history CLI", "history import into a folder that is a file", "error", "new")
def _(d: Path) -> list[str]:
    (d / "new").write_text("")
    subprocess.run(cli("history", "export", str(history(d, runs=1)), "-o", str(d / "exp.json")), check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(SOURCE)})
    return cli("history", "import", str(d / "new"), str(d / "exp.json"))


@case("history CLI", "history import of a FIFO", "error", "fifo", timeout=60)
def _(d: Path) -> list[str]:
    os.mkfifo(d / "fifo")
    return cli("history", "import", str(d / "new"), str(d / "fifo"))


# ------------------------------------------------------------------------------- --edge-openmetrics

HOSTILE_LABELS = ['q"uote', "back\\slash", "new\nline", "unicodé ✓ 模型", "{brace}=", "# EOF", "tab\there",
                  "cr\rhere", "nul\x00byte", "lone\udcffsurrogate"]


def hostile_report(folder: Path) -> Path:
    records = []
    for index, text in enumerate(HOSTILE_LABELS):
        record = a_run(folder)["records"][0]
        record.update(test=f"t.py::test[{text}]", model={"name": f"m{index}{text}"}, machine=f"host {text}")
        records.append(record)
    path = folder / "report.json"
    path.write_text(json.dumps({"schema": "pytest-edge/report/1", "records": records}))
    return path


@case("openmetrics", "report openmetrics of labels with quotes, backslashes, newlines, CR, NUL, unicode, {}, #, "
      "a lone surrogate; promtool check metrics", "pass")
def _(d: Path) -> list[str]:
    report = hostile_report(d)
    return ["bash", "-c", f"{PYTHON} -m pytest_edge report openmetrics {report} --commit 'a\"b\\c' -o {d}/m.om && "
                          f"promtool check metrics < {d}/m.om && grep -c edge_latency_p50_seconds {d}/m.om"]


@case("openmetrics", "--edge-openmetrics with hostile test ids (parametrize ids) and commit; promtool", "pass")
def _(d: Path) -> list[str]:
    ids = json.dumps(HOSTILE_LABELS[:8])
    (d / "test_m.py").write_text(textwrap.dedent(f"""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
        @pytest.mark.parametrize("k", range({len(HOSTILE_LABELS[:8])}), ids={ids})
        def test_mlp(edge_model, k):
            pass
    """))
    argv = pytest_argv("--edge-measure", "--edge-openmetrics=m.om", "--edge-history-commit=c\"1\\\n")
    return ["bash", "-c", f"{' '.join(map(repr_sh, argv))} && promtool check metrics < m.om && "
                          "grep -c edge_latency_p50_seconds m.om"]


def repr_sh(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


@case("openmetrics", "--edge-openmetrics=DIR (a folder)", "error", "m.om")
def _(d: Path) -> list[str]:
    (d / "m.om").mkdir()
    return pytest_argv("--edge-openmetrics=m.om")


@case("openmetrics", "--edge-openmetrics under /proc/version", "error", "/proc/version/m.om")
def _(d: Path) -> list[str]:
    return pytest_argv("--edge-openmetrics=/proc/version/m.om")


@case("openmetrics", "report openmetrics of a record with NaN/-1/1e308 figures: no sample of NaN or -1", "pass")
def _(d: Path) -> list[str]:
    run = a_run(d)
    run["records"][0].update(load_ms=float("nan"), first_inference_ms=-1, steady_memory_mb=1e308)
    (d / "report.json").write_text(json.dumps(run))
    return ["bash", "-c", f"{PYTHON} -m pytest_edge report openmetrics {d}/report.json -o {d}/m.om && "
                          f"promtool check metrics < {d}/m.om && ! grep -E ' -|NaN|edge_load_seconds' {d}/m.om"]


# ----------------------------------------------------------------- max_memory_growth_kb_per_run

def marker_case(keyword: str, value: str, model: str = "tiny_mlp", backends: str = '["onnxruntime-cpu"]',
                extra: str = "") -> Callable[[Path], list[str]]:
    def stage(d: Path) -> list[str]:
        (d / "test_m.py").write_text(textwrap.dedent(f"""
            import pytest
            @pytest.mark.edge(model="{model}", backends={backends}, {keyword}={value}{extra})
            def test_m(edge_model):
                pass
            def test_other():
                pass
        """))
        return pytest_argv("--edge-measure")
    return stage


for value in ("-1", "float('nan')", "True", "'5 parsecs'", "10**400"):
    case("memory growth", f"max_memory_growth_kb_per_run={value}", "fail", "max_memory_growth_kb_per_run",
         "1 passed")(marker_case("max_memory_growth_kb_per_run", value))
case("memory growth", "max_memory_growth_kb_per_run=0 (any growth fails; noise may read >0)", "pass")(
    marker_case("max_memory_growth_kb_per_run", "'1MB'"))


@case("memory growth", "max_memory_growth_kb_per_run=64 without --edge-measure (the budget measures: 0.18 KB/run)",
      "pass")
def _(d: Path) -> list[str]:
    marker_case("max_memory_growth_kb_per_run", "64")(d)
    return pytest_argv()


# ------------------------------------------------------------------------------- TFLite Micro

def tflm_case(data: Callable[[], bytes], budget: str = "") -> Callable[[Path], list[str]]:
    def stage(d: Path) -> list[str]:
        (d / "models" / "quant_probe_int8.tflite").write_bytes(data())
        return _tflm_test(d, budget)
    return stage


def _tflm_test(d: Path, budget: str) -> list[str]:
    (d / "test_m.py").write_text(textwrap.dedent(f"""
        import pytest
        @pytest.mark.edge(model="quant_probe_int8", backends=["tflite-micro"], atol=2{budget})
        def test_m(edge_model):
            pass
        def test_other():
            pass
    """))
    return pytest_argv()


def _hostile(name: str) -> Callable[[], bytes]:
    def build() -> bytes:
        import hostile_models
        return getattr(hostile_models, name)()
    return build


def _corrupt() -> bytes:
    data = bytearray((FIXTURES / "quant_probe_int8.tflite").read_bytes())
    for at in range(64, len(data), 97):
        data[at] ^= 0xA5
    return bytes(data)


for label, build in (("cut at 600 bytes", _hostile("truncated")), ("bytes flipped every 97", _corrupt),
                     ("a tensor declared [1, 2147483647]", _hostile("huge_intermediate")),
                     ("a weight buffer of 3 bytes for 512", _hostile("short_buffer")),
                     ("no operators", _hostile("no_operators")),
                     ("an input tensor index 999 of 10", _hostile("tensor_out_of_range")),
                     ("not a flatbuffer (zeros)", lambda: bytes(4096))):
    case("tflite-micro", f".tflite {label}", "fail", "quant_probe_int8.tflite", "tflite-micro", "1 passed")(
        tflm_case(build))


@case("tflite-micro", "float model (tiny_mlp.tflite) with max_arena_kb=64", "pass")
def _(d: Path) -> list[str]:
    (d / "test_m.py").write_text(textwrap.dedent("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["tflite-micro"], max_arena_kb=64)
        def test_m(edge_model):
            pass
    """))
    return pytest_argv("-rs")


for value in ("-1", "float('nan')", "True", "'lots'", "'0.5 MB'"):
    case("tflite-micro", f"max_arena_kb={value}", "fail" if value not in ("'0.5 MB'", "None") else "pass",
         *(("max_arena_kb", "1 passed") if value not in ("'0.5 MB'", "None") else ()))(
        tflm_case(lambda: (FIXTURES / "quant_probe_int8.tflite").read_bytes(), f", max_arena_kb={value}"))
case("tflite-micro", "max_arena_kb=0 (no arena fits)", "fail", "max_arena_kb", "bytes")(
    tflm_case(lambda: (FIXTURES / "quant_probe_int8.tflite").read_bytes(), ", max_arena_kb=0"))


# ------------------------------------------------------------------------------------ Ethos-U

def ethos_case(extra: str) -> Callable[[Path], list[str]]:
    def stage(d: Path) -> list[str]:
        (d / "test_m.py").write_text(textwrap.dedent(f"""
            import pytest
            @pytest.mark.edge(model="quant_probe_int8", backends=["ethos-u55-128"]{extra})
            def test_m(edge_model):
                pass
            def test_other():
                pass
        """))
        return pytest_argv()
    return stage


for value, expect, must in (("5", "fail", ("allowed_cpu_ops",)), ("'QUANTIZE'", "pass", ()),
                            ("{'QUANTIZE': 1}", "fail", ("allowed_cpu_ops",)),
                            ("['NOT_AN_OPERATOR']", "pass", ()), ("['quantize', 'QUANTIZE']", "pass", ()),
                            ("[' ']", "fail", ("allowed_cpu_ops",))):
    case("ethos-u", f"allowed_cpu_ops={value} with max_fallback=0", expect, *must, *(("1 passed",) if expect == "fail"
                                                                                   else ()))(
        ethos_case(f", max_fallback=0, allowed_cpu_ops={value}"))
def ethos_cnn_case(extra: str) -> Callable[[Path], list[str]]:
    """tiny_cnn_int8 on the U55: QUANTIZE, DEQUANTIZE and CUMSUM left on the CPU by vela."""
    def stage(d: Path) -> list[str]:
        shutil.copy(FIXTURES / "tiny_cnn_int8.tflite", d / "models" / "tiny_cnn_int8.tflite")
        ethos_case(extra)(d)
        (d / "test_m.py").write_text((d / "test_m.py").read_text().replace("quant_probe_int8", "tiny_cnn_int8"))
        return pytest_argv()
    return stage


case("ethos-u", "tiny_cnn_int8 (3 CPU ops), allowed_cpu_ops=['quantize', 'QUANTIZE', 'NOT_AN_OP'], max_fallback=0",
     "fail", "QUANTIZE x1", "NOT_AN_OP, which no CPU operator is", "CUMSUM", "1 passed")(
    ethos_cnn_case(", max_fallback=0, allowed_cpu_ops=['quantize', 'QUANTIZE', 'NOT_AN_OP']"))
case("ethos-u", "tiny_cnn_int8, allowed_cpu_ops='CUMSUM, DEQUANTIZE, QUANTIZE', max_fallback=0 (all excused)",
     "pass")(ethos_cnn_case(", max_fallback=0, allowed_cpu_ops='CUMSUM, DEQUANTIZE, QUANTIZE'"))
case("ethos-u", "allowed_cpu_ops=['QUANTIZE'] without max_fallback", "fail", "allowed_cpu_ops", "1 passed")(
    ethos_case(", allowed_cpu_ops=['QUANTIZE']"))
for keyword in ("max_sram_kb", "max_flash_kb"):
    for value, expect in (("0", "fail"), ("-1", "fail"), ("float('nan')", "fail"), ("True", "fail"),
                          ("'2GB'", "pass")):
        case("ethos-u", f"{keyword}={value}", expect, *((keyword, "1 passed") if expect == "fail" else ()))(
            ethos_case(f", {keyword}={value}"))


# ------------------------------------------------------------------------- backend environments

def env_folder(d: Path) -> Path:
    """A backend's requirements folder whose environment installs one tiny local wheel (no index)."""
    import base64
    import hashlib
    import zipfile

    wheels = d / "wheels"
    wheels.mkdir()
    wheel = wheels / "probe_tiny-1.0-py3-none-any.whl"
    files = {"probe_tiny/__init__.py": b"X = 1\n",
             "probe_tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: probe-tiny\nVersion: 1.0\n",
             "probe_tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: probe\nRoot-Is-Purelib: true\n"
                                                b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "probe_tiny-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("probe_tiny-1.0.dist-info/RECORD", record)
    folder = d / "reqs"
    folder.mkdir()
    (folder / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\nprobe-tiny==1.0\n")
    return folder


def make_script(folder: Path, root: Path) -> str:
    return (f"import sys; from pathlib import Path; from pytest_edge.devices import backend_env as b\n"
            f"try: e = b.make(Path({str(folder)!r}), Path({str(root)!r}), print, 'probe')\n"
            f"except b.EnvironmentUnmade as exc: sys.exit(f'cannot be made: {{exc}}')\n"
            f"print('made', e.folder, e.python.exists())")


@case("backend env", "env make --dir FILE (the cache folder is a file)", "error", "envs")
def _(d: Path) -> list[str]:
    (d / "envs").write_text("")
    return cli("env", "make", "rknn-rk3588", "--dir", str(d / "envs"))


@case("backend env", "env make --dir under /proc/version (cannot be made)", "error", "/proc/version")
def _(d: Path) -> list[str]:
    return cli("env", "make", "rknn-rk3588", "--dir", "/proc/version/envs")


@case("backend env", "env list --dir FILE", "pass")
def _(d: Path) -> list[str]:
    (d / "envs").write_text("")
    return cli("env", "list", "--dir", str(d / "envs"))


@case("backend env", "env make NO_SUCH_BACKEND", "error", "NO_SUCH_BACKEND")
def _(d: Path) -> list[str]:
    return cli("env", "make", "NO_SUCH_BACKEND", "--dir", str(d / "envs"))


@case("backend env", "env requirements onnxruntime-cpu (runs here)", "error", "onnxruntime-cpu")
def _(d: Path) -> list[str]:
    return cli("env", "requirements", "onnxruntime-cpu")


@case("backend env", "a make killed half-way (SIGKILL during pip), then made again", "pass", "made")
def _(d: Path) -> list[str]:
    folder, root = env_folder(d), d / "envs"
    code = make_script(folder, root)
    return ["bash", "-c", f"{PYTHON} -c {repr_sh(code)} & p=$!; "
                          f"for i in $(seq 200); do ls {root}/.tmp-*/venv/bin/pip >/dev/null 2>&1 && break; sleep 0.1; done; "
                          f"kill -9 $p; wait $p; ls -a {root}; {PYTHON} -c {repr_sh(code)} && ls -a {root} && "
                          f"test $(ls -a {root} | grep -c '^.tmp-') = 0"]


@case("backend env", "a half-made env (folder without ready.json) in the cache, then env made", "pass", "made")
def _(d: Path) -> list[str]:
    folder, root = env_folder(d), d / "envs"
    sys.path.insert(0, str(SOURCE))
    from pytest_edge.devices import backend_env

    key = backend_env.EnvSpec.of(folder).key
    (root / key / "venv" / "bin").mkdir(parents=True)
    (root / key / "venv" / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    return [PYTHON, "-c", make_script(folder, root)]


@case("backend env", "two makes of one env at once", "pass", "made")
def _(d: Path) -> list[str]:
    folder, root = env_folder(d), d / "envs"
    code = repr_sh(make_script(folder, root))
    return ["bash", "-c", f"{PYTHON} -c {code} > a.log 2>&1 & {PYTHON} -c {code} > b.log 2>&1; s=$?; wait $! || exit 1; "
                          f"cat a.log b.log; test $(grep -c '^made' a.log b.log | awk -F: '{{s+=$2}} END {{print s}}') = 2"
                          f" && test $(grep -c 'making the environment' a.log b.log | awk -F: '{{s+=$2}} END "
                          f"{{print s}}') = 1"]


@case("backend env", "a requirements.txt that is not UTF-8", "error", "requirements")
def _(d: Path) -> list[str]:
    folder = d / "reqs"
    folder.mkdir()
    (folder / "requirements.txt").write_bytes(b"\xff\xfe\x00bad")
    return [PYTHON, "-c", make_script(folder, d / "envs")]


# --------------------------------------------------------------- the gate, a hostile baseline

def gate_case(path: tuple[str, ...], value: str, backend: str = "tflite-micro",
              model: str = "quant_probe_int8") -> Callable[[Path], list[str]]:
    """A stored baseline made by a real run on ``backend``, with one figure set to ``value``
    (JSON text; ``DELETE`` removes it); the gate run against it."""
    def stage(d: Path) -> list[str]:
        (d / "test_m.py").write_text(textwrap.dedent(f"""
            import pytest
            @pytest.mark.edge(model="{model}", backends=["{backend}"], atol=2)
            def test_m(edge_model):
                pass
        """))
        subprocess.run(pytest_argv("--edge-report=base.json"), cwd=d, capture_output=True, timeout=300, check=True,
                       env={**os.environ, "PYTHONPATH": str(SOURCE)})
        report = json.loads((d / "base.json").read_text())
        block = report["records"][0]
        for key in path[:-1]:
            block = block.setdefault(key, {})
        if value == "DELETE":
            block.pop(path[-1], None)
        else:
            block[path[-1]] = "@@VALUE@@"
        (d / "base.json").write_text(json.dumps(report).replace('"@@VALUE@@"', value))
        return pytest_argv("--edge-baseline=base.json")
    return stage


for figure_path, backend, model in ((("arena", "total_bytes"), "tflite-micro", "quant_probe_int8"),
                                    (("npu", "estimated_ms"), "ethos-u55-128", "quant_probe_int8"),
                                    (("coverage", "partitions"), "onnxruntime-cpu", "tiny_mlp"),
                                    (("memory_growth_kb_per_run",), "onnxruntime-cpu", "tiny_mlp")):
    for value in ("NaN", '"48"', "true", "-1", "null", *(("0",) if figure_path[-1] == "estimated_ms" else ())):
        # a slope below 0 (memory that shrank) is a figure
        expect = "pass" if value == "null" or (value == "-1" and figure_path[0].startswith("memory")) else "error"
        case("gate baseline", f"baseline {'.'.join(figure_path)}={value} ({backend})", expect,
             *(("base.json", ".".join(figure_path)) if expect == "error" else ()))(
            gate_case(figure_path, value, backend, model))
    case("gate baseline", f"baseline without {'.'.join(figure_path)} ({backend})", "pass")(
        gate_case(figure_path, "DELETE", backend, model))
case("gate baseline", "baseline arena null where the candidate has one", "pass")(
    gate_case(("arena",), "null"))
case("gate baseline", "baseline arena = [1]", "error", "base.json", "arena")(gate_case(("arena",), "[1]"))
case("gate baseline", "baseline npu = 'x' (ethos-u)", "error", "base.json", "npu")(
    gate_case(("npu",), '"x"', "ethos-u55-128"))


# ---------------------------------------------------------------------------------- the runner

def classify(c: Case, rc: int, out: str, peak_kb: int) -> str:
    if rc == 124:
        return "hang"
    if rc in (137, -9) or "MemoryError" in out or peak_kb > BLOW_UP_KB:
        return "blow-up"
    if "Traceback (most recent call last)" in out or "INTERNALERROR" in out:
        return "traceback"
    named = all(m in out for m in c.must)
    if c.expect == "error":
        if rc == 0:
            return "silent green"
        return "clear error" if named else "misleading"
    if c.expect == "fail":
        if rc == 0:
            return "silent green"
        if "interrupted" in out or rc not in (1,):
            return "misleading"
        return "clear error" if named else "misleading"
    return "benign" if rc == 0 and named else "misleading"


def run_case(c: Case, base: Path, keep: bool) -> None:
    folder = Path(tempfile.mkdtemp(prefix="probe5-"))
    try:
        project(folder, base)
        argv = c.stage(folder)
        timing = folder / ".time"
        full = ["prlimit", f"--as={CAP_BYTES}", "timeout", "-s", "KILL", str(c.timeout), "/usr/bin/time", "-f", "%M",
                "-o", str(timing), *argv]
        started = time.monotonic()
        done = subprocess.run(full, cwd=folder, capture_output=True, text=True, errors="replace",
                              env={**os.environ, "PYTHONPATH": str(SOURCE)}, stdin=subprocess.DEVNULL)
        # timeout's KILL reads 137 or -9: a hang where it came at the limit
        rc = 124 if done.returncode in (137, -9) and time.monotonic() - started >= c.timeout - 1 else done.returncode
        out = done.stdout + done.stderr
        try:
            peak_kb = int(timing.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            peak_kb = 0
        c.verdict = classify(c, rc, out, peak_kb)
        c.extra = {"rc": rc, "peak_mb": round(peak_kb / 1024), "s": round(time.monotonic() - started, 1)}
        c.said = _said(out)
    except Exception as exc:  # the probe's own staging failed: reported as such, never as a verdict
        c.verdict, c.said = "probe error", f"{type(exc).__name__}: {exc}"
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _said(out: str) -> str:
    """The line that says most: an error line of the product, else the last non-empty line."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    for marker in ("Traceback", "MemoryError", "pytest-edge", "Error", "error", "E   "):
        hits = [line for line in lines if marker in line and not line.startswith("=")]
        if hits:
            return hits[-1][:220] if marker != "Traceback" else (lines[-1][:220])
    return lines[-1][:220] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="only cases whose surface or name holds this")
    parser.add_argument("--keep", action="store_true", help="keep each case's folder")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--source", type=Path, help="import pytest_edge from this folder (default: this checkout)")
    args = parser.parse_args()
    global SOURCE
    SOURCE = args.source or ROOT
    chosen = [c for c in CASES if not args.only or args.only in c.surface or args.only in c.name]
    with tempfile.TemporaryDirectory(prefix="probe5-base-") as base_dir:
        base = Path(base_dir) / "project"
        prepare_base(base)
        for index, c in enumerate(chosen, 1):
            run_case(c, base, args.keep)
            print(f"[{index}/{len(chosen)}] {c.verdict:13} {c.surface}: {c.name} ({c.extra})", file=sys.stderr,
                  flush=True)
    if args.markdown:
        print("| # | surface | case | expected | verdict | rc | peak MB | said |\n|---|---|---|---|---|---|---|---|")
        for index, c in enumerate(chosen, 1):
            said = c.said.replace("|", "\\|")
            print(f"| {index} | {c.surface} | {c.name.replace('|', '/')} | {c.expect} | {c.verdict} | "
                  f"{c.extra.get('rc')} | {c.extra.get('peak_mb')} | {said} |")
    else:
        for index, c in enumerate(chosen, 1):
            print(f"{index:3} {c.verdict:13} {c.surface:14} {c.name[:70]:70} {c.said[:150]}")
    counts: dict[str, int] = {}
    for c in chosen:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    print(json.dumps({"cases": len(chosen), **counts}))
    return 0 if set(counts) <= {"clear error", "benign"} else 1


if __name__ == "__main__":
    sys.exit(main())
