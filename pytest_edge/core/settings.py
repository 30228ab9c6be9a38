"""Session-wide settings: every option's value as the session uses it, read by :func:`from_config`
from the command line and the ini file (the command line wins), for pytest and for the
``pytest-edge`` command alike. The options themselves, their flags and defaults: :mod:`.options`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

# Imported by every pytest session the plugin is installed in, edge tests or not: only what the
# option table and its defaults need; the readers of a value (a report, a device, a marker's
# names) are imported where they read.
from .acceptance import ACCEPT_FILE, Acceptance, read_acceptances
from .options import DEFAULTS, MAX_REGRESSION, OPTIONS, Option  # noqa: F401 - the options' names here too
from ..errors import EdgeError
from ..accuracy import DEFAULT_SEED
from ..units import parse_ms, parse_names, parse_percent
from ..devices.kinds import DeviceKind, device_kind
from ..devices.labgrid import DEFAULT_COMMAND, DEFAULT_COORDINATOR, FarmRequest, FarmSettings


if TYPE_CHECKING:
    import pytest

    from .record import Record


class StoredReport(Protocol):
    """--edge-baseline's report as the gate reads it: its typed records. The plugin reads the file
    once at configure into a report.json_report.Report, which the pages show too; core/ may not
    import report/, so this names what judging/ needs of it."""

    @property
    def records(self) -> Sequence[Record]: ...




@dataclass
class Settings:
    golden_dir: Path
    rootdir: Path
    reference_backend: str = DEFAULTS["edge_reference_backend"]
    update_golden: bool = False
    isolated: bool = True
    backends: list[str] | None = None
    require: list[str] = field(default_factory=list)
    atol: float = float(DEFAULTS["edge_atol"])
    rtol: float = float(DEFAULTS["edge_rtol"])
    warmup: int = int(DEFAULTS["edge_warmup"])
    runs: int = int(DEFAULTS["edge_runs"])
    threads: int = int(DEFAULTS["edge_threads"])
    seed: int = DEFAULT_SEED
    measure: bool = False
    baseline: StoredReport | None = None  # --edge-baseline's report, read by the plugin at configure
    baseline_path: Path | None = None  # the stored report ``baseline`` was read from
    max_regression: float = parse_percent(DEFAULTS["edge_max_regression"])
    # A/B mode gates P99 only when asked, with its own threshold (None: P99 reported, not gated).
    p99_regression: float | None = None
    model_dirs: list[Path] = field(default_factory=list)
    timeout_s: float = float(DEFAULTS["edge_timeout"])
    # Fresh worker processes per measurement, and the least time the timed runs of each take.
    processes: int = int(DEFAULTS["edge_processes"])
    fork: str = DEFAULTS["edge_fork"]  # auto, on, off: measuring processes forked by a zygote or spawned
    min_time_s: float = parse_ms(DEFAULTS["edge_min_time"]) / 1000
    # A/B mode: a folder with the baseline's artifacts (at their paths under the models' key folders).
    baseline_models: Path | None = None
    # Counted mode (--edge-count=instructions): instructions per inference under callgrind, gated
    # at count_threshold; None: wall-clock time.
    count: str | None = None
    count_threshold: float = 0.01
    count_runs: int = 10
    count_processes: int = 2
    # A stored-baseline regression seen while the machine was busy fails instead of warning.
    strict_timing: bool = False
    # A backend worker restarted after dying between requests fails the test instead of warning.
    strict_restarts: bool = False
    report: str = ""  # --edge-report, relative to the rootdir
    html: str = ""  # --edge-html, relative to the rootdir
    summary: str = ""  # --edge-summary, relative to the rootdir (an absolute path stays one)
    openmetrics: str = ""  # --edge-openmetrics, relative to the rootdir
    history: str = ""  # --edge-history: a folder, relative to the rootdir
    history_commit: str = ""  # --edge-history-commit; "": read from git
    max_creep: float | None = None  # --edge-max-creep; None: no creep alert
    creep_window: int = int(DEFAULTS["edge_creep_window"])
    creep_fail: bool = False  # --edge-creep=fail
    # name -> command that starts a worker on the device, speaking the protocol over stdin/stdout
    devices: dict[str, str] = field(default_factory=dict)
    device_cache: Path = field(default_factory=lambda: _default_cache())  # where qemu:* devices are provisioned
    farm: FarmSettings = field(default_factory=FarmSettings)  # labgrid:* devices
    emulated_timing: str = "off"  # off | record | judge
    # Changes the merge gate accepts (edge-accept.toml; read only where a gate runs).
    accept_file: Path | None = None
    acceptances: list[Acceptance] = field(default_factory=list)
    # edge_compile_options: a compile-time target's name -> its compiler's options (docs/npu.md).
    compile_options: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def gating(self) -> bool:
        """A merge gate runs in this session: an A/B folder or a stored report was given (the one
        place this is decided; judging.baseline.choose_baseline decides against what)."""
        return self.baseline is not None or self.baseline_models is not None


def _default_cache() -> Path:
    from ..devices.qemu import default_cache

    return default_cache()


def parse_devices(lines: list[str]) -> dict[str, str]:
    """``NAME = COMMAND`` (ini) or ``NAME=COMMAND`` (--edge-device), one device each."""
    from ..devices.qemu import parse_kind

    devices = {}
    for line in lines:
        name, sep, command = line.partition("=")
        name, command = name.strip(), command.strip()
        if not sep or not name or not command or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"edge_devices: {line!r} is not NAME = COMMAND (a name of letters, digits, - and _)")
        if name == "local":
            raise ValueError("edge_devices: 'local' names this machine; choose another name")
        kind = device_kind(command)
        if kind is DeviceKind.QEMU:
            parse_kind(command)  # an unknown kind is a usage error now, not a skip later
        if kind is DeviceKind.LABGRID:
            FarmRequest.parse(command)  # a malformed place or tag, likewise
        devices[name] = command
    return devices


def parse_compile_options(lines: list[str]) -> dict[str, dict[str, str]]:
    """``TARGET = KEY=VALUE KEY=VALUE`` per line (edge_compile_options); which keys a target takes
    is its compiler's to say (a BackendError naming them at its first compile)."""
    options: dict[str, dict[str, str]] = {}
    for line in lines:
        target, sep, rest = line.partition("=")
        pairs = [pair.partition("=") for pair in rest.split()]
        if not sep or not target.strip() or not pairs or any(not key or not eq or not value for key, eq, value in pairs):
            raise ValueError(f"edge_compile_options: {line!r} is not TARGET = KEY=VALUE ... (docs/npu.md)")
        given = options.setdefault(target.strip(), {})
        for key, _, value in pairs:
            if key in given:
                raise ValueError(f"edge_compile_options: {target.strip()} sets {key} twice ({given[key]!r}, then "
                                 f"{value!r}): give each key once (docs/npu.md)")
            given[key] = value
    return options


def _seconds(value: str, key: str) -> float:
    try:
        seconds = float(str(value).strip().removesuffix("s"))
    except ValueError:
        raise ValueError(f"{key} = {value!r}: expected a number of seconds") from None
    if not seconds >= 0 or math.isinf(seconds):
        raise ValueError(f"{key} = {value!r}: expected a finite number of seconds >= 0")
    return seconds


def _emulated_timing(value: str) -> str:
    choices = ("off", "record", "judge")
    if str(value).strip() not in choices:
        raise ValueError(f"edge_emulated_timing = {value!r}: expected one of {', '.join(choices)}")
    return str(value).strip()


def _value(config: "pytest.Config", ini: str) -> Any:
    cli = config.getoption(ini, default=None)
    if isinstance(cli, bool):
        return cli or config.getini(ini)
    return cli if cli is not None else config.getini(ini)


def _number(key: str, value: Any, kind: type) -> Any:
    """An ini value (or its option) as ``kind``, finite, an error naming the setting otherwise."""
    try:
        number = kind(str(value).strip())
    except ValueError:
        raise ValueError(f"{key}: {value!r} is not {'an integer' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(number):
        raise ValueError(f"{key}: {value!r} must be a finite number")
    return number


def from_config(config: "pytest.Config") -> Settings:
    """The session's settings from the command line and the project's ini file (CLI wins).
    Raises EdgeError naming the option for a value that cannot be."""
    root = Path(config.rootpath)
    isolation = _value(config, "edge_isolation")
    if isolation not in ("process", "none"):
        raise EdgeError(f"--edge-isolation: {isolation!r} is not 'process' or 'none'")
    fork = _value(config, "edge_fork")
    if fork not in ("auto", "on", "off"):
        raise EdgeError(f"--edge-fork: {fork!r} is not 'auto', 'on' or 'off'")
    try:
        baseline_path = _value(config, "edge_baseline")  # read by the plugin, whose layer has the report's reader
        numbers = {k: _number(k, config.getini(k), float) for k in ("edge_atol", "edge_rtol", "edge_timeout")}
        counts = {k: _number(k, config.getini(k), int) for k in ("edge_warmup", "edge_runs", "edge_threads", "edge_seed")}
        processes = _number("edge_processes", _value(config, "edge_processes"), int)
        if processes < 1:
            raise ValueError(f"edge_processes: {processes} must be at least 1")
        count = str(_value(config, "edge_count") or "off").strip().lower()
        if count not in ("off", "instructions"):
            raise ValueError(f"--edge-count: {count!r} is not 'instructions' or 'off'")
        count_runs = _number("edge_count_runs", config.getini("edge_count_runs"), int)
        count_processes = _number("edge_count_processes", config.getini("edge_count_processes"), int)
        if count_runs < 1 or count_processes < 1:
            raise ValueError(f"edge_count_runs ({count_runs}) and edge_count_processes ({count_processes}) must be "
                             "at least 1")
        creep = str(_value(config, "edge_creep") or "warn").strip().lower()
        if creep not in ("warn", "fail"):
            raise ValueError(f"--edge-creep: {creep!r} is not 'warn' or 'fail'")
        creep_window = _number("edge_creep_window", _value(config, "edge_creep_window"), int)
        if creep_window < 3:
            raise ValueError(f"edge_creep_window: {creep_window} must be at least 3 (a first and a last third)")
        max_creep = (parse_percent(_value(config, "edge_max_creep"), "--edge-max-creep")
                     if _value(config, "edge_max_creep") else None)
        if max_creep is not None and not _value(config, "edge_history"):
            raise ValueError("--edge-max-creep judges the runs of a history: give it --edge-history=DIR (or "
                             "edge_history)")
        baseline_models = _value(config, "edge_baseline_models")
        if baseline_models and not (root / baseline_models).is_dir():
            raise ValueError(f"--edge-baseline-models: {root / baseline_models} is not a folder")
        accept_file = root / (config.getini("edge_accept_file") or ACCEPT_FILE)
        # Read where a gate runs (a misread file must not pass a gate); elsewhere it is not consulted.
        acceptances = read_acceptances(accept_file) if baseline_path or baseline_models else []
        return Settings(
            golden_dir=root / _value(config, "edge_golden_dir"),
            rootdir=root,
            reference_backend=_value(config, "edge_reference_backend"),
            update_golden=config.getoption("--edge-update-golden"),
            isolated=isolation == "process",
            backends=parse_names(_value(config, "edge_backends"), "--edge-backends") or None,
            require=parse_names(_value(config, "edge_require"), "--edge-require") or [],
            atol=numbers["edge_atol"], rtol=numbers["edge_rtol"], timeout_s=numbers["edge_timeout"],
            warmup=counts["edge_warmup"], runs=counts["edge_runs"], threads=counts["edge_threads"],
            seed=counts["edge_seed"],
            measure=bool(_value(config, "edge_measure")),
            baseline_path=root / baseline_path if baseline_path else None, max_regression=parse_percent(_value(config, "edge_max_regression")),
            p99_regression=(parse_percent(_value(config, "edge_gate_p99"), "--edge-gate-p99")
                            if _value(config, "edge_gate_p99") else None),
            model_dirs=[Path(p) for p in config.getini("edge_model_dirs")],
            processes=processes, fork=fork, min_time_s=parse_ms(_value(config, "edge_min_time"), "edge_min_time") / 1000,
            baseline_models=root / baseline_models if baseline_models else None,
            count=None if count == "off" else count, count_runs=count_runs, count_processes=count_processes,
            count_threshold=parse_percent(_value(config, "edge_count_threshold"), "--edge-count-threshold"),
            strict_timing=bool(_value(config, "edge_strict_timing")),
            strict_restarts=bool(_value(config, "edge_strict_restarts")),
            report=_value(config, "edge_report") or "",
            html=_value(config, "edge_html") or "",
            summary=_value(config, "edge_summary") or "",
            openmetrics=_value(config, "edge_openmetrics") or "",
            history=_value(config, "edge_history") or "",
            history_commit=str(_value(config, "edge_history_commit") or "").strip(),
            max_creep=max_creep, creep_window=creep_window, creep_fail=creep == "fail",
            devices=parse_devices([*config.getini("edge_devices"), *(config.getoption("edge_device") or [])]),
            device_cache=root / Path(config.getini("edge_device_cache")).expanduser() if config.getini("edge_device_cache")
            else _default_cache(),
            emulated_timing=_emulated_timing(config.getini("edge_emulated_timing")),
            farm=FarmSettings(
                coordinator=(config.getini("edge_labgrid_coordinator") or os.environ.get("LG_COORDINATOR")
                             or DEFAULT_COORDINATOR).strip(),
                wait_s=_seconds(config.getini("edge_labgrid_wait"), "edge_labgrid_wait"),
                command=config.getini("edge_labgrid_command") or DEFAULT_COMMAND),
            accept_file=accept_file, acceptances=acceptances,
            compile_options=parse_compile_options(config.getini("edge_compile_options")),
        )
    except ValueError as exc:
        raise EdgeError(str(exc)) from exc
