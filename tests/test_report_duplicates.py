"""Points that reach the report twice are read once or refused, never pooled or counted twice: a folder named
twice, a folder and the run inside it, a backup copy of a run in another folder, and a points.csv that holds
one point twice (a damaged run: exit 1 naming it, or left out under --skip-bad)."""

import json
import re
import shutil

import pandas as pd
import pytest
from test_report import _write_run

from bench.cli import main
from bench.errors import RunFailed
from bench.storage import check_points

pytestmark = pytest.mark.slow  # each test builds whole reports

THERE = {"cpu_model": "AMD EPYC 7763 64-Core Processor", "cpu_cores": 64, "hostname": "server"}
POINTS_PER_SWEEP = 5  # _write_run: lstm and attention, each at n = 64 ... 1024


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    _write_run(root, "r1", new_format=True)
    return root


PROGRESS = re.compile(r"report: \d+ figures so far, [\d:]+ elapsed$")


def _report(capsys, out, *args) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["report", "--out", str(out), *map(str, args)])
    lines = capsys.readouterr().err.strip().splitlines()
    return code, [line for line in lines if not PROGRESS.match(line)]  # a slow machine's progress lines aside


def _shown(out) -> tuple[set[str], set[int]]:
    """The runs behind the report's numbers, and how many points each fitted sweep holds."""
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    fits = pd.read_csv(out / "fits.csv")
    return {v["run_id"] for v in numbers.values()}, set(fits["sweep_points"])


def _set_meta(run, **fields):
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(meta | fields))


def test_a_folder_named_twice_is_read_once(results, tmp_path, capsys):
    code, err = _report(capsys, tmp_path / "out", "--results", results, results)
    assert code == 0 and err == []
    assert _shown(tmp_path / "out") == ({"r1"}, {POINTS_PER_SWEEP})


def test_a_folder_and_the_run_inside_it_are_read_once(results, tmp_path, capsys):
    code, err = _report(capsys, tmp_path / "out", "--results", results, results / "r1")
    assert code == 0 and err == []
    assert _shown(tmp_path / "out") == ({"r1"}, {POINTS_PER_SWEEP})


def test_a_backup_copy_of_a_run_is_read_once_and_named(results, tmp_path, capsys):
    shutil.copytree(results / "r1", results / "backup" / "r1")  # same run id, machine and points
    code, err = _report(capsys, tmp_path / "out", "--results", results)
    assert code == 0
    assert len(err) == 1 and str(results / "backup" / "r1") in err[0] and "copy of run r1" in err[0], err
    assert _shown(tmp_path / "out") == ({"r1"}, {POINTS_PER_SWEEP})  # not pooled, not a second run "r1@..."
    md = (tmp_path / "out" / "report.md").read_text()
    assert "r1@" not in md and "Older runs" not in md


def test_of_two_copies_that_differ_the_fuller_one_is_read(results, tmp_path, capsys):
    partial = results / "a-partial" / "r1"  # found first; copied while the run was still going
    shutil.copytree(results / "r1", partial)
    points = pd.read_csv(partial / "points.csv")
    points[points["layer"] == "lstm"].head(3).to_csv(partial / "points.csv", index=False)
    code, err = _report(capsys, tmp_path / "out", "--results", results)
    assert code == 0 and len(err) == 1 and f"read once, from {results / 'r1'}" in err[0], err
    assert err[0].startswith(f"note: {partial} is a copy of run r1") and "10 rows, 3 in" in err[0]
    runs, sizes = _shown(tmp_path / "out")
    assert runs == {"r1"} and sizes == {POINTS_PER_SWEEP}
    assert "attention" in set(pd.read_csv(tmp_path / "out" / "fits.csv")["layer"])


def test_two_runs_with_one_id_on_one_machine_are_not_taken_for_copies(tmp_path, capsys):
    _write_run(tmp_path / "x", "same", new_format=True)
    _set_meta(_write_run(tmp_path / "y", "same", new_format=True), started_utc="2026-02-01T00:00:00+00:00")
    code, err = _report(capsys, tmp_path / "out", "--results", tmp_path / "x", tmp_path / "y")
    assert code == 0 and not any("copy" in line for line in err), err
    runs, sizes = _shown(tmp_path / "out")
    assert len(runs) == 1 and runs != {"same"} and sizes == {POINTS_PER_SWEEP}  # the newer, never both pooled
    assert (
        "runs same (10 points), same@unknown-unknown-host (10 points) combined point by point; 10 of same's points "
        "measured again later, the newer kept (" in (tmp_path / "out" / "report.md").read_text()
    )


def _two_machines(results):
    """results/r1 of this machine and results/r2 of another, each complete."""
    _set_meta(_write_run(results, "r2", new_format=True), **THERE)
    return results / "r2"


@pytest.mark.parametrize("with_ids", [True, False])
def test_a_point_stored_twice_is_a_damaged_run_and_skip_bad_reports_the_others(results, tmp_path, capsys, with_ids):
    r2 = _two_machines(results)
    points = pd.read_csv(r2 / "points.csv")
    if not with_ids:
        points["point_id"] = None  # an older format: the point is known by its sizes, device and dtype
    pd.concat([points, points.iloc[[7]]]).to_csv(r2 / "points.csv", index=False)  # attention n=256, again
    code, err = _report(capsys, tmp_path / "r1", "--results", results)
    assert code == 1 and len(err) == 1, err
    assert str(r2 / "points.csv") in err[0] and "--skip-bad" in err[0], err
    assert re.search(r"stored (twice|more than once)", err[0]) and re.search(r"\blines? (9, )?12\b", err[0]), err
    if with_ids:
        assert "point attention256" in err[0]
    else:  # named by what it is
        assert "attention on cpu float32, batch=1 n=256 d=32 heads=4" in err[0], err
    assert not (tmp_path / "r1").exists()  # nothing written

    code, err = _report(capsys, tmp_path / "r2", "--results", results, "--skip-bad")
    assert code == 0 and len(err) == 1 and err[0].startswith(f"skipping damaged run {r2}:"), err
    assert _shown(tmp_path / "r2") == ({"r1"}, {POINTS_PER_SWEEP})


def test_a_run_in_the_older_format_without_point_ids_and_no_repeats_is_fine(results, tmp_path, capsys):
    r2 = _two_machines(results)
    points = pd.read_csv(r2 / "points.csv")
    points.assign(point_id=None).to_csv(r2 / "points.csv", index=False)
    code, err = _report(capsys, tmp_path / "out", "--results", results)
    assert code == 0 and err == []
    runs, sizes = _shown(tmp_path / "out")
    assert runs == {"r1", "r2"} and sizes == {POINTS_PER_SWEEP}


SPEC = {"layer": "conv", "device": "cpu", "dtype": "float32", "batch": 1, "d": 8, "k": 3}


@pytest.mark.parametrize(
    ("rows", "damaged"),
    [
        ([("a", 64), ("b", 128)], False),
        ([("a", 64), ("a", 128)], True),  # one id twice, whatever the sizes say
        ([(None, 64), (None, 64)], True),  # no ids: the same sizes twice
        ([("a", 64), (None, 64)], True),  # a row without an id repeats a named one
        ([(None, 64), (None, 128), ("c", 256)], False),
        ([("a", 64), ("b", 64)], False),  # distinct ids name distinct points (the id hashes the whole spec)
    ],
)
def test_check_points_finds_a_point_stored_twice(tmp_path, rows, damaged):
    points = pd.DataFrame([SPEC | {"n": n, "point_id": pid, "status": "ok"} for pid, n in rows])
    if damaged:
        with pytest.raises(RunFailed, match="stored twice"):
            check_points(points, tmp_path / "points.csv")
    else:
        check_points(points, tmp_path / "points.csv")
