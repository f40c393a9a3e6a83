"""Damaged run folders, as a red-team pass made them: each is named (file, line or key, what was expected)
in one line, with exit 1 for `run --resume` and `report`; `report --skip-bad` reports the others; nothing
damaged counts as stored. And a report into a place it cannot write as asked (a full disk, a path that is
not UTF-8): one line naming the path, the previous report kept."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.cli import main

FAST = ["--rounds", "4", "--target-time", "0.005", "--passes", "2", "--no-progress"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "good"
    assert (
        main(["run", "--layers", "conv", "--n", "8,16,32", "--d", "4", "--device", "cpu", *FAST, "--out", str(out)])
        == 0
    )
    return out


def _edit_csv(path, column, value, row=0):
    lines = path.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[1 + row].rstrip("\n").split(",")
    cells[header.index(column)] = value
    lines[1 + row] = ",".join(cells) + "\n"
    path.write_text("".join(lines))


def _json(path, change):
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


DAMAGE = {
    "a garbage line appended to points.csv": (
        lambda d: (d / "points.csv").write_text((d / "points.csv").read_text() + "garbage line\n"),
        "points.csv: damaged at line 5: status nan",
    ),
    "text in flops_counted": (
        lambda d: _edit_csv(d / "points.csv", "flops_counted", "lots"),
        "points.csv: damaged at line 2: flops_counted = 'lots', expected a finite number",
    ),
    "inf in mem_peak_bytes": (
        lambda d: _edit_csv(d / "points.csv", "mem_peak_bytes", "inf", row=1),
        "points.csv: damaged at line 3: mem_peak_bytes = inf, expected a finite number",
    ),
    "a NaN time": (
        lambda d: _edit_csv(d / "points.csv", "time_median_s", "nan"),
        "points.csv: damaged at line 2: time_median_s = nan for an ok point, expected > 0",
    ),
    "a NaN on the CPU clock an ok point was fitted on": (  # issue 46: 13
        lambda d: [_edit_csv(d / "points.csv", c, v) for c, v in (("time_clock", "cpu"), ("time_cpu_median_s", "nan"))],
        "points.csv: damaged at line 2: time_cpu_median_s = nan for an ok point, expected > 0",
    ),
    "a NaN state of an ok decode point": (  # issue 46: 13
        lambda d: [_edit_csv(d / "points.csv", c, v) for c, v in (("mode", "decode"), ("mem_state_bytes", "nan"))],
        "points.csv: damaged at line 2: mem_state_bytes = nan for an ok point, expected a number of bytes",
    ),
    "a negative time": (
        lambda d: _edit_csv(d / "points.csv", "time_median_s", "-0.001"),
        "points.csv: damaged at line 2: time_median_s = -0.001, expected a number >= 0",
    ),
    "a row cut short mid-file": (
        lambda d: (d / "points.csv").write_text(
            "".join(
                line if i != 2 else line[: len(line) // 3] + "\n"
                for i, line in enumerate((d / "points.csv").read_text().splitlines(keepends=True))
            )
        ),
        "points.csv: damaged at line 3",
    ),
    "a point stored twice": (
        lambda d: (d / "points.csv").write_text(
            (d / "points.csv").read_text() + (d / "points.csv").read_text().splitlines(keepends=True)[1]
        ),
        "stored twice",
    ),
    "meta.json is a list": (lambda d: (d / "meta.json").write_text("[]"), "meta.json: damaged, expected a JSON object"),
    "meta.json is empty": (lambda d: (d / "meta.json").write_text("{}"), "meta.json: damaged, keys run_id"),
    "a negative mem_peak_bytes": (
        lambda d: _edit_csv(d / "points.csv", "mem_peak_bytes", "-1024"),
        "points.csv: damaged at line 2: mem_peak_bytes = -1024",
    ),
    "a status that is a number in meta.json": (
        lambda d: _json(d / "meta.json", lambda m: m | {"status": 5}),
        "meta.json: damaged, status 5, expected one of running, finished, interrupted",
    ),
    "points_planned as text in meta.json": (
        lambda d: _json(d / "meta.json", lambda m: m | {"points_planned": "many"}),
        "meta.json: damaged, points_planned 'many', expected a whole number >= 0",
    ),
}


def _drop_column(path, column):
    import pandas as pd

    pd.read_csv(path).drop(columns=[column]).to_csv(path, index=False)


REPORT_ONLY = {  # issue 56: 6, each crashed `report` with a traceback
    **{
        f"points.csv without {column}": (
            lambda d, column=column: _drop_column(d / "points.csv", column),
            f"points.csv: damaged, columns {column} missing",
        )
        for column in ("time_median_s", "flops_counted", "mem_peak_bytes")
    },
    "a layer no report knows": (
        lambda d: _edit_csv(d / "points.csv", "layer", "conv2<script>"),
        "points.csv: layers this report does not know: 'conv2<script>'",
    ),
    "devices as text in meta.json": (
        lambda d: _json(d / "meta.json", lambda m: m | {"devices": "cpu"}),
        "meta.json: damaged, devices 'cpu', expected a list of objects",
    ),
    "cpu_cores as text in meta.json": (
        lambda d: _json(d / "meta.json", lambda m: m | {"cpu_cores": "two"}),
        "meta.json: damaged, cpu_cores 'two', expected a whole number >= 1",
    ),
    "negative cpu_cores in meta.json": (
        lambda d: _json(d / "meta.json", lambda m: m | {"cpu_cores": -4}),
        "meta.json: damaged, cpu_cores -4, expected a whole number >= 1",
    ),
    "a host name of 5,000 characters": (
        lambda d: _json(d / "meta.json", lambda m: m | {"hostname": "h" * 5000}),
        "expected a name of at most 255 characters",
    ),
}
RESUME_ONLY = {
    "plan.json without timing_policy": (
        lambda d: _json(d / "plan.json", lambda p: {k: v for k, v in p.items() if k != "timing_policy"}),
        "plan.json: damaged, expected an object with `specs`",
    ),
    "plan.json with a size as text": (
        lambda d: _json(d / "plan.json", lambda p: p | {"specs": [dict(p["specs"][0], n="8"), *p["specs"][1:]]}),
        "plan.json: does not match this folder's meta.json",
    ),
    "a points.csv from another grid": (
        lambda d: _edit_csv(d / "points.csv", "point_id", "0123456789ab"),
        "points.csv: damaged at line 2: point 0123456789ab is not in the folder's plan.json",
    ),
    "a plan.json from another run": (
        lambda d: _json(d / "plan.json", lambda p: p | {"specs": p["specs"][:2]}),
        "plan.json: does not match this folder's meta.json (plan_digest",
    ),
    "passes changed in plan.json": (  # issue 56: 12
        lambda d: _json(d / "plan.json", lambda p: p | {"timing_policy": dict(p["timing_policy"], passes=6)}),
        "plan.json: does not match this folder's meta.json (plan_digest",
    ),
    "a point added by hand to plan.json's extended": (  # issue 56: 12
        lambda d: _json(d / "plan.json", lambda p: p | {"extended": [dict(p["specs"][0], n=4096)]}),
        "its extended points are not the ones the run added",
    ),
}


def _damaged(finished, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(meta | {"status": "running"}))  # to be resumed
    damage(run)
    return run


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("case", [*DAMAGE, *RESUME_ONLY])
def test_resume_names_the_damage(finished, tmp_path, capsys, case):
    damage, expected = {**DAMAGE, **RESUME_ONLY}[case]
    run = _damaged(finished, tmp_path, damage)
    before = (run / "points.csv").read_bytes()
    assert main(["run", "--resume", str(run), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err  # one line, nothing else
    line = err.strip()
    assert line.startswith(f"error: {run}") and expected in line, line
    assert (run / "points.csv").read_bytes() == before  # nothing added to, or cut from, a damaged table


@pytest.fixture(scope="module")
def skipped_bad(finished, tmp_path_factory):
    """One `report --skip-bad` of every damaged copy (DAMAGE) beside a good one, a report built once for all the
    cases: (exit code, stderr, the damaged folder of each case, the good folder, the report folder)."""
    root = tmp_path_factory.mktemp("skip-bad")
    damaged = {
        case: _damaged(finished, root / f"case-{i:02d}", damage)
        for i, (case, (damage, _)) in enumerate({**DAMAGE, **REPORT_ONLY}.items())
    }
    good = root / "good"
    shutil.copytree(finished, good)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(
            ["report", "--results", *map(str, damaged.values()), str(good), "--out", str(root / "r"), "--skip-bad"]
        )
    return code, stderr.getvalue(), damaged, good, root / "r"


@pytest.mark.slow
@pytest.mark.parametrize("case", [*DAMAGE, *REPORT_ONLY])
def test_report_names_the_damage_and_skip_bad_reports_the_rest(finished, skipped_bad, tmp_path, capsys, case):
    """Alone, the damaged run fails the report with one line naming it and the damage; with --skip-bad beside a
    good run (and the other cases' damaged copies), it is named, left out, and the report is the good run's."""
    damage, expected = {**DAMAGE, **REPORT_ONLY}[case]
    what = expected.split(": ", 1)[-1].split(" at line")[0]
    run = _damaged(finished, tmp_path, damage)
    assert main(["report", "--results", str(run), "--out", str(tmp_path / "r1")]) == 1
    line = _one_error_line(capsys)
    assert str(run) in line and what in line, line
    code, err, damaged, good, report = skipped_bad  # this case's copy among the others, beside the good run
    assert code == 0, err
    named = [line for line in err.splitlines() if f"{damaged[case]}:" in line or f"{damaged[case]}/" in line]
    assert len(named) == 1 and what in named[0], err
    numbers = json.loads((report / "numbers.json").read_text())["numbers"]
    assert {v["run_id"] for v in numbers.values()} == {json.loads((good / "meta.json").read_text())["run_id"]}


@pytest.mark.slow
@pytest.mark.parametrize("lost", ["the last row", "every row"])
def test_a_finished_run_that_lost_rows_is_named_and_its_resume_measures_them_again(finished, tmp_path, capsys, lost):
    run = tmp_path / "run"
    shutil.copytree(finished, run)  # finished: meta.json says 3 points stored
    lines = (run / "points.csv").read_text().splitlines(keepends=True)
    (run / "points.csv").write_text("".join(lines[:-1]) if lost == "the last row" else "")
    assert main(["report", "--results", str(run), "--out", str(tmp_path / "r")]) == 1
    assert str(run / "points.csv") in _one_error_line(capsys)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "finished, but its points.csv holds" in err and "measuring the" in err, err
    rows = (run / "points.csv").read_text().splitlines()
    ids = [row.split(",")[rows[0].split(",").index("point_id")] for row in rows[1:]]
    assert len(ids) == 3 == len(set(ids))  # every planned point, each once
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["points_stored"] == 3
    assert main(["report", "--results", str(run), "--out", str(tmp_path / "r")]) == 0


def _mounted_tmpfs(where, size: str) -> bool:
    """A small tmpfs at `where`: a disk that really fills (root, and a kernel that lets us mount)."""
    where.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


@pytest.mark.slow
def test_a_report_into_a_full_disk_names_the_file_and_keeps_the_previous_report(finished, tmp_path, capsys):
    disk = tmp_path / "disk"
    if not _mounted_tmpfs(disk, "32m"):
        pytest.skip("a full disk needs a tmpfs of our own: mounting one needs root")
    try:
        out = disk / "reports"
        assert main(["report", "--results", str(finished), "--out", str(out), "--no-progress"]) == 0
        before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as f:  # the disk full to its last byte
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        capsys.readouterr()
        assert main(["report", "--results", str(finished), "--out", str(out), "--no-progress"]) == 1
        line = _one_error_line(capsys)
        assert line.startswith(f"error: {out}/") and "no space left on the device" in line, line
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
def test_a_report_to_a_path_that_is_not_utf8_is_written_and_named_by_its_bytes(finished, tmp_path):
    out = tmp_path / os.fsdecode(b"report\xff")  # a name from a Latin-1 system: Python keeps the byte as a surrogate
    done = subprocess.run(
        [sys.executable, "-m", "bench", "report", "--results", str(finished), "--out", str(out), "--no-progress"],
        capture_output=True,
        env=os.environ | {"PYTHONIOENCODING": "utf-8:strict"},  # what a UTF-8 locale gives a terminal
    )
    assert done.returncode == 0, done.stderr
    assert os.fsencode(out) + b"/report.md" in done.stdout and (out / "report.html").exists()
