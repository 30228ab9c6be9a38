"""The calibration cases of a target that quantizes at load (``pytest_edge/run/calibration.py``): the
marker's ``calibration=`` (an .npz of one case, or a folder of them, confined to the project), else
every case of the test's golden; each promise of the module's docstrings, bad input included (every
bad set is a usage error naming the file and the backend). The last tests load through the real
session on a FAKE backend for testing the calibration's path (tests/fake_backend.py's
``fake-double-int8``, which says in its runtime details what it was calibrated on)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from fake_backend import registered, write_doubling

from pytest_edge import codec
from pytest_edge.backends.base import CalibrationCase
from pytest_edge.core.marker import parse_marker
from pytest_edge.core.plan import Plan
from pytest_edge.core.settings import Settings
from pytest_edge.errors import EdgeUsageError
from pytest_edge.run import calibration
from pytest_edge.run.calibration import Calibration, calibration_for, user_calibration
from pytest_edge.run.session import EdgeSession

BACKEND = "rknn-rk3588-int8"  # any name: the messages say it


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project root with its tests' folder, where calibration= is relative to."""
    (tmp_path / "tests").mkdir()
    return tmp_path


def case(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(4).astype(np.float32), "mask": np.arange(3, dtype=np.int64) + seed}


def calibrate(spec: str, root: Path) -> Calibration:
    return user_calibration(spec, root / "tests", root, BACKEND)


# ------------------------------------------------------------------ calibration= as given


def test_an_npz_file_is_one_case_of_the_inputs_by_name(root: Path) -> None:
    """``np.savez(path, x=..., mask=...)``: one case whose inputs are those arrays by name, exactly;
    its origin is the file, its source says the marker's spec and the path."""
    path = root / "tests" / "cal.npz"
    np.savez(path, **case(1))
    found = calibrate("cal.npz", root)
    (only,) = found.cases
    inputs = only.inputs
    assert sorted(inputs) == ["mask", "x"]
    for name, array in case(1).items():
        np.testing.assert_array_equal(inputs[name], array)
        assert inputs[name].dtype == array.dtype
    assert only.origin == str(path) and found.source == f"calibration='cal.npz': {path}"


def test_a_folder_is_its_npz_files_in_name_order_and_nothing_else(root: Path) -> None:
    """A folder: each .npz a case, in name order (not creation order); other files are not cases."""
    folder = root / "tests" / "cal"
    folder.mkdir()
    for name, seed in (("b.npz", 2), ("a.npz", 1), ("c.npz", 3)):
        np.savez(folder / name, **case(seed))
    (folder / "README.txt").write_text("not a case")
    found = calibrate("cal", root)
    assert [Path(c.origin).name for c in found.cases] == ["a.npz", "b.npz", "c.npz"]
    assert [int(c.inputs["mask"][0]) for c in found.cases] == [1, 2, 3]
    assert found.source == f"calibration='cal': {folder} (3 .npz file(s))"


def test_a_path_inside_the_project_may_leave_the_tests_folder(root: Path) -> None:
    """Relative to the test's folder, anywhere inside the root (``../data/cal.npz``)."""
    (root / "data").mkdir()
    np.savez(root / "data" / "cal.npz", x=np.ones(2, np.float32))
    assert len(calibrate("../data/cal.npz", root).cases) == 1


@pytest.mark.parametrize("where", ["absolute", "dotdot", "link"])
def test_a_set_outside_the_project_is_refused_and_not_read(root: Path, tmp_path_factory: pytest.TempPathFactory,
                                                           where: str) -> None:
    """An absolute path elsewhere, ``../`` out of the root, a link inside that leads out: refused
    before anything is read, naming the backend, the spec and the root."""
    outside = tmp_path_factory.mktemp("elsewhere") / "cal.npz"
    outside.write_bytes(b"never read")  # would be a read error if it were read
    spec = {"absolute": str(outside), "dotdot": os.path.relpath(outside, root / "tests"), "link": "link.npz"}[where]
    (root / "tests" / "link.npz").symlink_to(outside)
    with pytest.raises(EdgeUsageError) as raised:
        calibrate(spec, root)
    message = str(raised.value)
    assert message.startswith(f"{BACKEND}: calibration={spec!r} leads to ")
    assert f"outside the project's root ({root.resolve()}): refused, nothing there is read" in message


def test_a_missing_set_is_named(root: Path) -> None:
    with pytest.raises(EdgeUsageError, match=rf"^{BACKEND}: calibration='nope.npz': \S+nope\.npz does not exist"):
        calibrate("nope.npz", root)


def test_a_folder_without_npz_files_is_named(root: Path) -> None:
    (root / "tests" / "cal").mkdir()
    (root / "tests" / "cal" / "a.npy").write_bytes(b"")
    with pytest.raises(EdgeUsageError, match=rf"^{BACKEND}: calibration='cal': no \.npz file in \S+cal "
                                             r"\(save each case with np\.savez"):
        calibrate("cal", root)


def _npy_named_npz(path: Path) -> None:
    with open(path, "wb") as handle:
        np.save(handle, np.ones(3, np.float32))


def _object_array(path: Path) -> None:
    np.savez(path, x=np.array([{"a": 1}], dtype=object))  # readable only with pickle, which is refused


BAD_FILES = {
    "not a zip": (lambda path: path.write_bytes(b"\x00garbage"), "cannot read calibration file {file}: "),
    "one array": (_npy_named_npz, "cannot read calibration file {file}: it holds one array, not an .npz archive"),
    "no array": (lambda path: np.savez(path), "calibration file {file} holds no array"),
    "pickled": (_object_array, "cannot read calibration file {file}: "),
}




@pytest.mark.parametrize("bad", list(BAD_FILES))
def test_a_bad_file_in_a_folder_is_a_usage_error_naming_that_file(root: Path, bad: str) -> None:
    """One bad file among good ones: a usage error naming the backend and that file (not the folder)."""
    folder = root / "tests" / "cal"
    folder.mkdir()
    np.savez(folder / "a.npz", **case(1))
    write, said = BAD_FILES[bad]
    write(folder / "b.npz")
    np.savez(folder / "c.npz", **case(3))
    with pytest.raises(EdgeUsageError) as raised:
        calibrate("cal", root)
    assert str(raised.value).startswith(f"{BACKEND}: " + said.format(file=folder / "b.npz"))


def test_a_set_beyond_the_limit_is_refused_naming_the_file_that_crossed_it(root: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """More bytes of arrays than one set may hold: refused at the file that crossed the limit."""
    monkeypatch.setattr(calibration, "MAX_CALIBRATION_BYTES", 2**20)
    folder = root / "tests" / "cal"
    folder.mkdir()
    for name in ("a.npz", "b.npz"):
        np.savez(folder / name, x=np.zeros(2**20 // 4 * 3 // 4, np.float32))  # 0.75 MiB each
    with pytest.raises(EdgeUsageError, match=rf"calibration='cal' holds more than 1 MiB of arrays "
                                             rf"\(at {folder / 'b.npz'}\); calibrate on a subsample"):
        calibrate("cal", root)


# ------------------------------------------------------------------ Calibration itself


def test_identity_tells_calibrations_apart_by_source_and_bytes() -> None:
    """The session's cache of loads keys on ``identity``: the same source and bytes give the same one;
    one changed value or another source another (the dataclass's equality ignores the arrays)."""
    one = Calibration("s", (CalibrationCase("o", case(1)),))
    assert one.identity == Calibration("s", (CalibrationCase("o", case(1)),)).identity
    changed = case(1)
    changed["x"][0] += 1
    assert Calibration("s", (CalibrationCase("o", changed),)).identity != one.identity
    assert Calibration("t", (CalibrationCase("o", case(1)),)).identity != one.identity
    assert len(one.identity) == 16


def test_to_json_is_the_load_requests_cases_by_origin() -> None:
    made = codec.to_json(Calibration("s", (CalibrationCase("a", case(1)), CalibrationCase("b", case(2)))))
    assert made["source"] == "s" and [c["origin"] for c in made["cases"]] == ["a", "b"]
    np.testing.assert_array_equal(made["cases"][1]["inputs"]["x"], case(2)["x"])


# ------------------------------------------------------------------ from a plan, through the session


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    with registered(tmp_path / "plugins"):
        write_doubling(tmp_path / "models", "m")
        yield tmp_path


@pytest.fixture
def edge(project: Path) -> Iterator[EdgeSession]:
    session = EdgeSession(Settings(golden_dir=project / "golden", rootdir=project, isolated=False,
                                   model_dirs=[project / "models"], reference_backend="fake-double"))
    try:
        yield session
    finally:
        session.close()


INPUTS = [{"x": np.full(4, 1.0, np.float32)}, {"x": np.full(4, 2.0, np.float32)}]


def plan_of(edge: EdgeSession, backend: str = "fake-double-int8", **marker: Any) -> Plan:
    spec = parse_marker((), {"model": "m", "inputs": INPUTS, **marker})
    return edge.plan(edge.resolve("m", edge.settings.rootdir), backend, spec, edge.settings.rootdir)


def test_without_a_golden_or_calibration_there_is_none_yet(edge: EdgeSession) -> None:
    """No golden recorded and no calibration=: None (the backend calibrates on its first run)."""
    assert calibration_for(plan_of(edge), edge.golden, edge.settings.rootdir) is None


def test_the_goldens_every_case_is_the_calibration(edge: EdgeSession) -> None:
    """With a golden of two inputs= cases, those two cases, their origins the golden's folder."""
    plan = plan_of(edge)
    golden = edge.golden.refresh(plan)
    found = calibration_for(plan, edge.golden, edge.settings.rootdir)
    assert found is not None
    assert found.source == f"the golden's 2 case(s) ({golden.folder})"
    assert [c.origin for c in found.cases] == [f"{golden.folder} case 0", f"{golden.folder} case 1"]
    assert [float(c.inputs["x"][0]) for c in found.cases] == [1.0, 2.0]


def test_calibration_is_given_to_the_load_and_keys_it(edge: EdgeSession, project: Path) -> None:
    """Through the session's load, the target is given the golden's cases; with calibration= the
    folder's instead, as another load (its identity is part of the load's key)."""
    edge.golden.refresh(plan_of(edge))
    from_golden = edge.load(plan_of(edge)).runtime.details["calibration"]
    assert from_golden["source"].startswith("the golden's 2 case(s)")
    assert from_golden["sums"] == [4.0, 8.0]

    (project / "cal").mkdir()
    np.savez(project / "cal" / "one.npz", x=np.full(4, 3.0, np.float32))
    given = edge.load(plan_of(edge, calibration="cal")).runtime.details["calibration"]
    assert given["origins"] == [str(project / "cal" / "one.npz")] and given["sums"] == [12.0]
    assert len([key for key in edge.loaded if "|fake-double-int8|" in key]) == 2


def test_a_marker_calibration_overrides_the_golden(edge: EdgeSession, project: Path) -> None:
    edge.golden.refresh(plan_of(edge))
    np.savez(project / "one.npz", x=np.zeros(4, np.float32))
    found = calibration_for(plan_of(edge, calibration="one.npz"), edge.golden, edge.settings.rootdir)
    assert found is not None and [c.origin for c in found.cases] == [str(project / "one.npz")]
