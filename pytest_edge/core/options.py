"""Every option of pytest-edge: its ini key, its command-line flag, its help and its default. The
one home of defaults: the plugin registers options from :data:`OPTIONS`, and
:mod:`.settings` reads them (the command line wins over the ini file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Imported by every pytest session the plugin is installed in, edge tests or not: only the names
# the table's defaults and help need.
from .acceptance import ACCEPT_FILE
from ..accuracy import DEFAULT_SEED
from ..devices.labgrid import DEFAULT_COMMAND

MAX_REGRESSION = "10%"  # the merge gate's default threshold (edge_max_regression; the report commands' --max-regression)


@dataclass(frozen=True)
class Option:
    ini: str
    help: str
    default: Any
    flag: str | None = None  # the command-line flag; None: ini only
    kind: str = "string"  # pytest ini type: string, bool, paths

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"


OPTIONS = [
    Option("edge_backends", "only these backends (comma-separated)", "", "--edge-backends"),
    Option("edge_require", "fail, not skip, when these backends are unavailable", "", "--edge-require"),
    Option("edge_isolation", "'process' (default): each backend in its own worker process; 'none': "
           "in-process, for pdb", "process", "--edge-isolation"),
    Option("edge_report", "write the JSON conformance report here", "", "--edge-report"),
    Option("edge_html", "write the report as one self-contained HTML page here", "", "--edge-html"),
    Option("edge_summary", "write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)", "", "--edge-summary"),
    Option("edge_openmetrics", "write the run's figures as OpenMetrics text here (Prometheus, node_exporter's "
           "textfile collector; docs/monitoring.md)", "", "--edge-openmetrics"),
    Option("edge_history", "append the run's records to this history folder, one file per run (docs/monitoring.md)",
           "", "--edge-history"),
    Option("edge_history_commit", "the commit the run is kept under in the history and the metrics (default: "
           "git rev-parse HEAD in the rootdir, where it is a checkout)", "", "--edge-history-commit"),
    Option("edge_max_creep", "creep alert: a figure grown by more than this over the history's last runs, e.g. 5% "
           "(judged as the merge gate judges; off by default)", "", "--edge-max-creep"),
    Option("edge_creep_window", "runs of the history the creep alert judges, this one included", "10",
           "--edge-creep-window"),
    Option("edge_creep", "'warn' (default): a creep is a warning line; 'fail': it fails the run", "warn",
           "--edge-creep"),
    Option("edge_baseline", "a stored report to compare latency, memory and coverage with", "",
           "--edge-baseline"),
    Option("edge_max_regression", "allowed regression against the baseline, e.g. 10%", MAX_REGRESSION,
           "--edge-max-regression"),
    Option("edge_gate_p99", "A/B mode: also gate P99 latency, with this allowed regression (e.g. 25%; "
           "off by default: a tail moves more than a median between fresh processes)", "", "--edge-gate-p99"),
    Option("edge_baseline_models", "A/B mode: a folder with the baseline's artifacts (each at its model's path "
           "under its edge_model_dirs folder, else the rootdir), measured alternately with this run's in the "
           "same job", "", "--edge-baseline-models"),
    Option("edge_processes", "fresh worker processes per measurement", "3", "--edge-processes"),
    Option("edge_fork", "how fresh measuring processes start: 'off' (default): spawned, a new interpreter "
           "each; 'auto': forked by a zygote per backend that imported the runtime once, where the OS "
           "can (Linux), spawned when a merge gate runs (--edge-baseline, --edge-baseline-models); "
           "'on': forked, or an error; devices always spawn", "off", "--edge-fork"),
    Option("edge_count", "'instructions': count the work of the runs under Valgrind's callgrind instead of "
           "timing them (deterministic; the gates use it); 'off' (default): wall-clock time", "off",
           "--edge-count"),
    Option("edge_count_threshold", "counted mode: allowed growth of instructions per inference against the "
           "baseline, e.g. 1%", "1%", "--edge-count-threshold"),
    Option("edge_count_runs", "counted mode: counted runs per process (the count is per inference)", "10"),
    Option("edge_count_processes", "counted mode: fresh processes per artifact (counts agree between processes; "
           "two show that they do)", "2"),
    Option("edge_min_time", "least time the timed runs of each process take, e.g. 0.25s", "0.25s",
           "--edge-min-time"),
    Option("edge_reference_backend", "backend that records golden outputs (default: the available one the "
           "backends rank first, onnxruntime-cpu with the built-ins)", "", "--edge-reference-backend"),
    Option("edge_golden_dir", "folder of golden outputs (relative to the rootdir)", "golden", "--edge-golden-dir"),
    Option("edge_measure", "time and measure memory on every backend, even without budgets", False,
           "--edge-measure", "bool"),
    Option("edge_strict_timing", "a latency regression against a stored baseline fails even when the "
           "machine was busy (default: inconclusive, a warning)", False, "--edge-strict-timing", "bool"),
    Option("edge_strict_restarts", "a backend worker that died between requests (the OOM killer, a kill) "
           "fails the test it was restarted in (default: a warning)", False, "--edge-strict-restarts", "bool"),
    Option("edge_model_dirs", "folders searched for models by stem", [], kind="paths"),
    Option("edge_devices", "devices, one per line: NAME = COMMAND that starts `python -m pytest_edge.worker "
           "--stdio` there (ssh, adb shell, ...), or a device kind (qemu:aarch64, an emulated ARM64 machine "
           "provisioned on first use); their backends are BACKEND@NAME", [], kind="linelist"),
    Option("edge_labgrid_coordinator", "labgrid coordinator of labgrid: devices, HOST:PORT (default: "
           "$LG_COORDINATOR, else 127.0.0.1:20408)", ""),
    Option("edge_labgrid_wait", "seconds a labgrid: device waits for a free place before its tests are "
           "skipped (failed with --edge-require)", "300"),
    Option("edge_labgrid_command", "command that starts the worker on a labgrid place's NetworkService; "
           "{address} {port} {username} {place} are filled in", DEFAULT_COMMAND),
    Option("edge_device_cache", "folder of provisioned emulated devices (default: ~/.cache/pytest-edge/devices, "
           "shared between projects)", ""),
    Option("edge_accept_file", "changes the merge gate accepts for named models (written by `pytest-edge "
           "accept`; docs/gate.md)", ACCEPT_FILE),
    Option("edge_emulated_timing", "timing and memory on emulated devices: 'off' (default: not measured, an "
           "emulator's figures are not the target's), 'record' (measured, not judged), 'judge' (budgets and the "
           "baseline gate too)", "off"),
    Option("edge_compile_options", "options of compile-time targets' compilers, one target per line: TARGET = "
           "KEY=VALUE ... (each target's keys: docs/npu.md); a target not named compiles with its compiler's "
           "defaults", [], kind="linelist"),
    Option("edge_atol", "default absolute tolerance", "1e-4"),
    Option("edge_rtol", "default relative tolerance", "1e-4"),
    Option("edge_warmup", "warm-up runs discarded before timing", "5"),
    Option("edge_runs", "least timed runs per process", "50"),
    Option("edge_threads", "threads given to each runtime that has the setting", "1"),
    Option("edge_seed", "seed of the inputs drawn from a signature", str(DEFAULT_SEED)),
    Option("edge_timeout", "seconds a backend may take for one request before its worker is killed", "600"),
]
DEFAULTS = {o.ini: o.default for o in OPTIONS}  # by ini key: the Settings fields' defaults
