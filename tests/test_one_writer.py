"""What a red-team pass broke, reproduced: two writers of one run folder, a point that gets its process
killed every time (the kernel's OOM killer, stood in for by a SIGKILL the point sends itself), a full disk,
and resumes of finished or hand-edited folders."""

import contextlib
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from forked import ForkedBench
from stand_ins import CEILINGS_STUB, FAKE_BANDWIDTH, FAKE_LATENCY, FAKE_PEAK, wait_until_handling

from bench import deaths, folder, schema, storage
from bench.cli import main
from bench.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--rounds", "4", "--target-time", "0.005", "--passes", "2", "--no-progress"]
GRID = ["--layers", "conv", "--n", "8,16,32", "--d", "4", "--device", "cpu", *FAST]


# The runs here test the folder, not the ceilings (the peak and the triad, seconds a run on 2 cores): stand-ins.
@pytest.fixture(autouse=True)
def _fake_peak(monkeypatch):
    import bench.run  # noqa: PLC0415

    monkeypatch.setattr(bench.peak, "compute_peak", lambda device, dtype: dict(FAKE_PEAK, dtype=str(dtype)))
    monkeypatch.setattr(bench.peak, "memory_bandwidth", lambda device, swept=None: dict(FAKE_BANDWIDTH))
    monkeypatch.setattr(bench.peak, "op_latency", lambda device: dict(FAKE_LATENCY))


def _bench(*args: str, kill_at: str | None = None, delay_s: float = 0, real: bool = False):
    """`python -m bench ARGS` in a child process (tests/forked.py, forked from this one; with real, a new
    interpreter); with kill_at "layer:n", the child kills itself with SIGKILL
    when it starts measuring that point, as the OOM killer would; with delay_s, each pass over a point takes
    that much longer (so that a second process surely meets it at work)."""
    code = CEILINGS_STUB
    if delay_s:
        code += textwrap.dedent(
            f"""
            import time
            import bench.run as run
            slow = run.measure_pass
            def slowly(*args, **kwargs):
                time.sleep({delay_s})
                return slow(*args, **kwargs)
            run.measure_pass = slowly
            """
        )
    if kill_at:
        layer, n = kill_at.split(":")
        code += textwrap.dedent(
            f"""
            import os, signal
            import bench.run as run
            measure = run.measure_pass
            def dying(spec, *args, **kwargs):
                if (spec.layer, spec.n) == ({layer!r}, {int(n)}):
                    os.kill(os.getpid(), signal.SIGKILL)
                return measure(spec, *args, **kwargs)
            run.measure_pass = dying
            """
        )
    if not real:
        return ForkedBench(*args, setup=code)
    # as bench/__main__.py: a signal while importing ends the child at once
    start = "import sys\nfrom bench.interrupts import exit_at_once\nexit_at_once()\nfrom bench.cli import main\n"
    return subprocess.Popen(
        [sys.executable, "-c", start + code + f"sys.exit(main({list(args)!r}))\n"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ids(run_dir: Path) -> list[str]:
    return list(pd.read_csv(run_dir / "points.csv")["point_id"])


def _plan_ids(run_dir: Path) -> list[str]:
    from bench.spec import PointSpec  # noqa: PLC0415

    return [PointSpec(**s).point_id for s in json.loads((run_dir / "plan.json").read_text())["specs"]]


# ------------------------------------------------------------------------------------------ one writer
def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    lock = folder.hold(tmp_path)
    with pytest.raises(BadInput, match=rf"{tmp_path}: another process is writing this run folder \(pid {os.getpid()}"):
        folder.hold(tmp_path)
    lock.release()
    folder.hold(tmp_path).release()  # released: the next writer gets it


def test_a_killed_holder_leaves_no_lock(tmp_path):
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from bench import folder; import time; lock = folder.hold(__import__('pathlib').Path({str(tmp_path)!r})); print('held', flush=True); time.sleep(60)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "held"
    with pytest.raises(BadInput, match=f"pid {child.pid}"):
        folder.hold(tmp_path)
    child.kill()
    child.wait()
    folder.hold(tmp_path).release()  # the kernel dropped the dead process's lock


@pytest.mark.slow
def test_two_resumes_at_once_one_proceeds_the_other_is_refused(tmp_path):
    out = tmp_path / "run"
    assert main(["run", *GRID, "--out", str(out)]) == 0
    rows = (out / "points.csv").read_text().splitlines(keepends=True)
    (out / "points.csv").write_text("".join(rows[:2]))  # as if killed after its first point
    first_id = _ids(out)[0]
    records = (out / "timings.jsonl").read_text().splitlines(keepends=True)
    (out / "timings.jsonl").write_text("".join(r for r in records if json.loads(r)["point_id"] == first_id))
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps(meta | {"status": "running"}))

    first = _bench("run", "--resume", str(out), "--no-progress", delay_s=0.3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the first holds the folder
        owner = out / folder.OWNER_NAME
        if owner.exists() and json.loads(owner.read_text())["pid"] == first.pid:
            break
        time.sleep(0.05)
    second = _bench("run", "--resume", str(out), "--no-progress")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert f"another process is writing this run folder (pid {first.pid}" in err and str(out) in err
    assert first.wait(timeout=300) == 0
    assert sorted(_ids(out)) == sorted(_plan_ids(out))  # every point once


@pytest.mark.slow
def test_four_runs_into_one_folder_one_run_three_refusals(tmp_path):
    out = tmp_path / "same"
    children = [
        _bench("run", "--layers", "conv", "--n", "8,16", "--d", "4", "--out", str(out), *FAST) for _ in range(4)
    ]
    errors = [child.communicate(timeout=300)[1] for child in children]
    codes = [child.returncode for child in children]
    assert sorted(codes) == [0, 2, 2, 2], errors
    for code, err in zip(codes, errors):
        if code == 2:
            assert str(out) in err and ("another process is writing" in err or "not empty" in err), err
    assert sorted(_ids(out)) == sorted(_plan_ids(out))


# --------------------------------------------------------------------------------------- process deaths
@pytest.mark.slow
def test_a_point_that_kills_its_process_is_recorded_as_killed_and_the_run_finishes(tmp_path):
    """Without a sign that memory killed it (a tiny point, no OOM counted), a point is given up after
    deaths.KILLED_AFTER_UNEXPLAINED deaths, its reasons in errors.log."""
    out = tmp_path / "run"
    first = _bench("run", *GRID, "--out", str(out), kill_at="conv:16")
    _, err = first.communicate(timeout=300)
    assert first.returncode == -9, err  # killed, as by the OOM killer: no row, meta.json `running`
    resumes = []
    for _ in range(deaths.KILLED_AFTER_UNEXPLAINED):
        child = _bench("run", "--resume", str(out), "--no-progress", kill_at="conv:16")
        _, err = child.communicate(timeout=300)
        resumes.append(child.returncode)
        if child.returncode == 0:
            break
    assert resumes == [-9, -9, -9, 0], resumes  # the fourth resume finds four deaths and goes on
    assert "killed from outside, no sign that memory was the cause" in err
    log = (out / "errors.log").read_text()
    assert "conv" in log and "given up, stored killed" in log and log.count("died in pass 0") == 4, log
    points = pd.read_csv(out / "points.csv").set_index("n")
    assert points.loc[16, "status"] == "killed"
    # visited before it once n=16 had died (a point that died goes last): measured, so kept
    assert points.loc[32, "status"] == "ok"
    assert points.loc[8, "status"] == "ok"
    assert sorted(_ids(out)) == sorted(_plan_ids(out))
    assert json.loads((out / "meta.json").read_text())["status"] == "finished"


def _memory_cgroup(name: str, limit_bytes: int) -> Path | None:
    """A cgroup v1 memory cgroup under this process's own, holding at most `limit_bytes`; None where none can be made
    (not root, cgroup v2 alone, or a kernel that says no)."""
    try:
        line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in ln)
        group = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/") / name
        group.mkdir()
    except (OSError, StopIteration):
        return None
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):  # no swap to hide in: over the limit is a kill
            (group / "memory.swappiness").write_text("0")
    except OSError:
        group.rmdir()
        return None
    return group


@pytest.mark.slow
def test_the_kernels_oom_killer_is_named_as_the_cause(tmp_path):
    """The real OOM killer: the run in a memory cgroup of 1.2 GB, where the largest point (attention_math at
    n = 4096, batch 4, 4 heads: 1 GiB of scores alone) cannot fit. Each resume is killed by the kernel until the
    point, with the kernel's OOM count as evidence, is stored `killed` for memory; the others are measured."""
    group = _memory_cgroup(f"bench-oom-{os.getpid()}", 1200 * 2**20)
    if group is None:
        pytest.skip("needs a cgroup v1 memory controller this test may write (root): none here")
    out = tmp_path / "run"
    grid = ["--layers", "attention_math", "--n", "128,256,4096", "--d", "32", "--heads", "4", "--batch", "4"]
    args = ["run", *grid, "--device", "cpu", *FAST, "--yes", "--out", str(out)]
    codes = []
    try:
        for _ in range(deaths.KILLED_AFTER_MEMORY + 1):
            child = subprocess.Popen(
                [sys.executable, "-m", "bench", *args],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
            )
            _, err = child.communicate(timeout=300)
            codes.append(child.returncode)
            if child.returncode == 0:
                break
            args = ["run", "--resume", str(out), "--no-progress"]
        oom_killed = int(re.search(r"^oom_kill (\d+)$", (group / "memory.oom_control").read_text(), re.M).group(1))
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()
    assert codes == [-9, -9, 0], (codes, err)  # two kills by the kernel, then the point is given up
    assert oom_killed == 2
    points = pd.read_csv(out / "points.csv").set_index("n")
    assert list(points.loc[[128, 256], "status"]) == ["ok", "ok"]
    assert points.loc[4096, "status"] == "killed"
    assert "memory the likely cause: the kernel counted" in points.loc[4096, "error"], points.loc[4096, "error"]
    assert "given up, stored killed" in (out / "errors.log").read_text()


def _kill_when_started(child: subprocess.Popen, out: Path, point_id: str, sig=signal.SIGKILL) -> None:
    """Send `sig` to `child` once it has started a pass over `point_id` (its line in started.jsonl)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        started = folder.read_started(out) if (out / "started.jsonl").exists() else []
        if any(e.get("point_id") == point_id and e.get("pid") == child.pid for e in started):
            child.send_signal(sig)
            break
        time.sleep(0.01)
    child.communicate(timeout=120)


@pytest.mark.slow
def test_a_point_killed_twice_from_outside_is_measured_again(tmp_path):
    """A user's SIGKILL, twice, while the same point is measured (each pass slowed so that it lands there): no sign
    of memory, so the point is not given up; the resume after the first death measures it last in its pass."""
    out = tmp_path / "run"
    child = _bench("run", *GRID, "--out", str(out), delay_s=0.3)
    _kill_when_started(child, out, victim := _plan_ids_when_planned(out)[0])
    assert child.returncode == -9
    resume = _bench("run", "--resume", str(out), "--no-progress", delay_s=0.3)
    _kill_when_started(resume, out, victim)
    assert resume.returncode == -9
    order = [e["point_id"] for e in folder.read_started(out) if e.get("pid") == resume.pid]
    assert order[-1] == victim and len(order) == 3  # the others first, then the point that had died
    last = _bench("run", "--resume", str(out), "--no-progress")
    _, err = last.communicate(timeout=300)
    assert last.returncode == 0, err
    points = pd.read_csv(out / "points.csv").set_index("point_id")
    assert (points["status"] == "ok").all() and sorted(points.index) == sorted(_plan_ids(out))
    assert not (out / "errors.log").exists()


def _plan_ids_when_planned(out: Path) -> list[str]:
    deadline = time.monotonic() + 120
    while not (out / "meta.json").exists() and time.monotonic() < deadline:  # plan.json is written before it
        time.sleep(0.01)
    return _plan_ids(out)


@pytest.mark.slow
def test_twenty_random_kills_and_resumes_leave_every_point_once_and_ok(tmp_path):
    """20 SIGKILL, SIGTERM or SIGINT at seeded random moments of one 9-point run, each followed by --resume; the last
    resume runs to the end: every point `ok`, each once in points.csv. A few kills land while the child starts
    (imports, once its first lines handle signals), the others while it measures (each pass slowed by 0.15 s so that the run outlasts them)."""
    rng = random.Random(31)
    out = tmp_path / "run"
    grid = ["--layers", "conv,lstm,gru", "--n", "8,16,32", "--d", "4", "--device", "cpu", *FAST]
    codes, measuring = [], 0
    for kill in range(21):
        if (out / "meta.json").exists():
            args = ["run", "--resume", str(out), "--no-progress"]
        else:  # killed before meta.json: a new run, as a user would start it again
            shutil.rmtree(out, ignore_errors=True)
            args = ["run", *grid, "--out", str(out)]
        starting = kill < 20 and rng.random() < 0.3  # a kill while the child starts: a new interpreter
        child = _bench(*args, delay_s=0.15, real=starting)
        if kill < 20:
            if starting:
                wait_until_handling(child)
                time.sleep(rng.uniform(0.0, 1.2))
            else:
                measuring += _wait_until_measuring(child, out)
                time.sleep(rng.uniform(0.0, 0.5))
            child.send_signal(rng.choice([signal.SIGKILL, signal.SIGTERM, signal.SIGINT]))
        _, err = child.communicate(timeout=300)
        codes.append(child.returncode)
        assert "Traceback" not in err, err
        assert child.returncode in (0, -signal.SIGKILL, 130, 143), (child.returncode, err)
    assert codes[-1] == 0, codes
    assert measuring >= 10, measuring  # most kills met the run at work
    points = pd.read_csv(out / "points.csv")
    assert len(points) == 9 and sorted(points["point_id"]) == sorted(_plan_ids(out))
    assert (points["status"] == "ok").all(), points[["layer", "n", "status", "error"]]
    assert json.loads((out / "meta.json").read_text())["status"] == "finished"


def _wait_until_measuring(child: subprocess.Popen, out: Path) -> bool:
    """Whether `child` started a pass (its line in started.jsonl) before it ended."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if (out / "started.jsonl").exists() and any(e.get("pid") == child.pid for e in folder.read_started(out)):
            return True
        time.sleep(0.02)
    return False


def test_an_interrupted_pass_is_no_death(tmp_path, monkeypatch):
    """Ctrl-C (or a SIGTERM) while measuring: the process says it stopped, so its last start is not counted."""
    import bench.run as run  # noqa: PLC0415

    calls = []

    def interrupted(spec, *args, **kwargs):
        calls.append(spec)
        raise KeyboardInterrupt

    out = tmp_path / "run"
    monkeypatch.setattr(run, "measure_pass", interrupted)
    for _ in range(3):
        args = ["run", *GRID, "--out", str(out)] if not calls else ["run", "--resume", str(out), "--no-progress"]
        assert main(args) == 130
    started = folder.read_started(out)
    assert [e.get("stopped", False) for e in started] == [False, True] * 3
    assert not (out / "points.csv").exists()  # nothing recorded as killed


# ------------------------------------------------------------------------------------------- full disk
@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd (Linux)")
def test_a_full_disk_names_the_folder_and_how_to_resume(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real = os.fsync

    def filling(fd):  # the disk is full when points.csv is written
        if os.readlink(f"/proc/self/fd/{fd}").endswith("points.csv"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(storage.os, "fsync", filling)
    assert main(["run", *GRID, "--out", str(out)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith(f"error: {out / 'points.csv'}: no space left") and f"--resume {out}" in line
    assert json.loads((out / "meta.json").read_text())["status"] != "finished"
    assert not list(out.glob("*.tmp"))


def test_finished_is_written_last(tmp_path, monkeypatch):
    """The disk fills at the last write, meta.json's `finished`: the folder does not say finished."""
    out = tmp_path / "run"
    real = storage.write_json

    def filling(path, obj):
        if path.name == "meta.json" and obj.get("status") == "finished":
            raise storage.DiskFull(f"{path}: no space left")
        real(path, obj)

    monkeypatch.setattr(storage, "write_json", filling)
    assert main(["run", *GRID, "--out", str(out)]) == 1
    assert json.loads((out / "meta.json").read_text())["status"] != "finished"
    assert (out / "pytest-benchmark.json").exists()  # written before meta.json's `finished`


# ------------------------------------------------------------------------------------- odd resumes
@pytest.mark.slow
def test_resume_of_a_finished_run_changes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *GRID, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name not in folder.WRITER_FILES}
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    assert "finished already" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name not in folder.WRITER_FILES} == before


def test_a_whole_last_row_without_its_newline_is_kept(tmp_path):
    path, run = tmp_path / "points.csv", folder.RunFolder(tmp_path)
    row = {c: None for c in schema.names()} | {"layer": "conv", "n": 8, "d": 4, "batch": 1, "status": "ok"}
    run.append_point(row | {"point_id": "a", "finished_utc": storage.utc_now()})
    path.write_text(path.read_text().rstrip("\n"))  # a hand edit drops the final newline
    run.append_point(row | {"point_id": "b", "finished_utc": storage.utc_now()})
    assert list(pd.read_csv(path)["point_id"]) == ["a", "b"]
    path.write_text(path.read_text() + "conv,cpu,float32,1,8,4,,,,,0.1,")  # a row cut off mid-write
    run.append_point(row | {"point_id": "c", "finished_utc": storage.utc_now()})
    assert list(pd.read_csv(path)["point_id"]) == ["a", "b", "c"]


def test_a_file_with_no_whole_line_is_damaged_not_emptied(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("garbage without a newline")
    with pytest.raises(storage.RunFailed, match="no whole line"):
        storage.repair_tail(path)
    assert path.read_text() == "garbage without a newline"


def test_a_point_is_never_appended_twice(tmp_path):
    row = {"layer": "conv", "n": 8, "d": 4, "batch": 1, "status": "ok", "point_id": "a"}
    folder.RunFolder(tmp_path).append_point(row | {"finished_utc": storage.utc_now()})
    with pytest.raises(storage.RunFailed, match="point a .* is already stored"):
        folder.RunFolder(tmp_path).append_point(row | {"finished_utc": storage.utc_now()})


@pytest.mark.slow
def test_sigterm_in_the_first_moments_leaves_interrupted(tmp_path):
    """A scheduler's SIGTERM as soon as the folder exists (the compute peak, or still making the folder):
    meta.json says `interrupted`, never `running`."""
    out = tmp_path / "run"
    child = _bench("run", *GRID, "--out", str(out))
    deadline = time.monotonic() + 60
    while not (out / "meta.json").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(15)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 143, err  # 128 + SIGTERM
    assert json.loads((out / "meta.json").read_text())["status"] == "interrupted"
    assert f"--resume {out}" in err or "interrupted" in err


def test_a_refused_out_is_left_as_it_was(tmp_path, capsys):
    """A run refused a folder of someone's files writes no lock or owner file into it (issue 56: 9)."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    assert main(["run", "--layers", "conv", "--n", "64", "--d", "8", "--out", str(folder)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
