"""Ctrl-C (SIGINT) and SIGTERM at any moment of `python -m bench run`, start-up included: exit 130 or 143, one
line on stderr about it and no traceback, and a run folder that exists says `interrupted`."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from forked import ForkedBench
from stand_ins import bench_argv, setup, wait_until_handling

from bench.spec import PointSpec

ROOT = Path(__file__).resolve().parent.parent
RUN = ["run", "--layers", "conv", "--n", "8,16,32", "--d", "4", "--device", "cpu", "--no-progress"]
FAST = ["--rounds", "4", "--target-time", "0.005", "--passes", "2"]
SIGNALS = {"SIGINT": (signal.SIGINT, 130), "SIGTERM": (signal.SIGTERM, 143)}


def _bench(*args: str, stand_in_ceilings: bool = False) -> subprocess.Popen:
    """`python -m bench ARGS`; with stand_in_ceilings, the ceilings at its start and end are stand-ins
    (tests/stand_ins.py) and each pass is 0.2 s longer: a signal sent once it measures meets it measuring."""
    argv = bench_argv(*args, pass_delay_s=0.2) if stand_in_ceilings else [sys.executable, "-m", "bench", *args]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _ended_by(child: subprocess.Popen, name: str) -> str:
    """Sends the signal, checks the exit code and the one line about it; returns stderr."""
    signum, code = SIGNALS[name]
    child.send_signal(signum)
    _, err = child.communicate(timeout=120)
    assert child.returncode == code, (child.returncode, err)
    assert "Traceback" not in err and "Error" not in err, err
    assert len([line for line in err.splitlines() if "interrupted" in line]) == 1, err
    return err


@pytest.mark.parametrize("after_s", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_a_signal_while_starting_is_one_line_and_its_exit_code(tmp_path, name, after_s):
    """While torch, numpy and pytest import: nothing is stored yet, the program ends at once."""
    out = tmp_path / "run"
    child = _bench(*RUN, *FAST, "--out", str(out))
    wait_until_handling(child)  # before, the signal lands in the interpreter's own start-up (a loaded machine's 0.1 s)
    time.sleep(after_s)
    err = _ended_by(child, name)
    assert len(err.splitlines()) == 1, err
    assert not (out / "meta.json").exists() or json.loads((out / "meta.json").read_text())["status"] == "interrupted"


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["folder made", "measuring"])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_a_signal_once_the_folder_exists_leaves_it_interrupted(tmp_path, name, moment):
    """Once meta.json exists (the real ceilings of the run's start are measured then), or once it measures."""
    out = tmp_path / "run"
    child = _bench(*RUN, *FAST, "--out", str(out), stand_in_ceilings=moment == "measuring")
    _wait_for(out / ("meta.json" if moment == "folder made" else "started.jsonl"))
    err = _ended_by(child, name)
    assert json.loads((out / "meta.json").read_text())["status"] == "interrupted", err


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIGNALS))
def test_a_signal_during_a_resume_leaves_it_interrupted(tmp_path, name):
    """The resume of a run killed outright (meta.json `running`), interrupted as soon as it holds the folder."""
    out = tmp_path / "run"
    first = ForkedBench(
        *RUN, "--rounds", "4", "--target-time", "0.05", "--passes", "4", "--out", str(out), setup=setup()
    )
    _wait_for(out / "started.jsonl")
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=120)
    assert json.loads((out / "meta.json").read_text())["status"] == "running"
    (out / ".writer.json").unlink()  # written again by the resume once it holds the folder
    resume = _bench("run", "--resume", str(out), "--no-progress")
    _wait_for(out / ".writer.json")
    _ended_by(resume, name)
    assert json.loads((out / "meta.json").read_text())["status"] == "interrupted"


def test_a_signal_while_the_resume_takes_the_folder_leaves_it_interrupted(tmp_path, monkeypatch):
    """The moment between the resume taking the folder's lock and reading its meta.json."""
    import bench.folder  # noqa: PLC0415
    from bench.cli import main  # noqa: PLC0415

    out = tmp_path / "run"
    assert main([*RUN, *FAST, "--out", str(out)]) == 0
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps(meta | {"status": "running"}))  # as a run killed outright leaves it
    read_meta = bench.folder.read_meta

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return read_meta(*args, **kwargs)

    monkeypatch.setattr(bench.folder, "read_meta", signalled)
    assert main(["run", "--resume", str(out), "--no-progress"]) == 130
    assert json.loads((out / "meta.json").read_text())["status"] == "interrupted"


def test_a_signal_that_comes_while_deferred_is_raised_on_leaving_whichever_thread_took_it():
    """The signal sent to the process while a thread started before (as torch's are) does not block it."""
    from bench import interrupts  # noqa: PLC0415

    inside, sent = threading.Event(), threading.Event()

    def send():
        inside.wait()
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    sender = threading.Thread(target=send)
    sender.start()
    done = []
    with interrupts.as_exceptions(), pytest.raises(interrupts.Interrupted):
        with interrupts.deferred():
            inside.set()
            sent.wait(timeout=10)
            time.sleep(0.05)  # room for the handler to run, had it been let
            done.append("the deferred block ran to its end")
    sender.join()
    assert done == ["the deferred block ran to its end"]


def test_an_interrupt_between_the_plan_and_meta_json_leaves_no_half_made_folder(tmp_path, monkeypatch):
    """Ctrl-C after plan.json and before meta.json left a folder neither --resume nor --out took (issue 46: 1)."""
    from bench.cli import main
    from bench.folder import RunFolder

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(RunFolder, "begin", interrupted)
        assert main([*RUN, *FAST, "--yes", "--out", str(out)]) == 130
    assert [p.name for p in out.iterdir()] == []  # plan.json and the writer's files gone
    assert main([*RUN, *FAST, "--yes", "--out", str(out)]) == 0  # the folder is taken again
    assert json.loads((out / "meta.json").read_text())["status"] == "finished"


SIGINT_LOOP, AT_ONCE = 20, 5  # runs, and how many of them go at a time (most of a run's time is sleep)


def _forked(*args: str) -> ForkedBench:
    return ForkedBench(*args, setup=setup(), fresh=False)


def _interrupt_at(outs: list[Path], moments: list[float]) -> None:
    """`run` into each of `outs` at once, each sent SIGINT `moments[i]` s after its start: exit 130 with the one line
    about it, or 0 where it finished before."""
    children = [_forked(*RUN, *FAST, "--no-extend", "--out", str(out)) for out in outs]
    started = time.monotonic()
    for moment, child in sorted(zip(moments, children), key=lambda pair: pair[0]):
        time.sleep(max(0.0, started + moment - time.monotonic()))
        child.send_signal(signal.SIGINT)
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode in (0, 130) and "Traceback" not in err, (child.returncode, err)
        assert child.returncode == 0 or len([line for line in err.splitlines() if "interrupted" in line]) == 1, err


def _resume_or_what_it_names(outs: list[Path]) -> None:
    """`run --resume` each; where one refuses, its one line names `--out FOLDER` and the run's command there works."""
    resumes = [_forked("run", "--resume", str(out), "--no-progress") for out in outs]
    again = []
    for out, resume in zip(outs, resumes):
        _, err = resume.communicate(timeout=120)
        if resume.returncode != 0:
            assert resume.returncode == 2 and len(err.splitlines()) == 1 and f"--out {out}" in err, err
            again.append(_forked(*RUN, *FAST, "--no-extend", "--out", str(out)))
    for child in again:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err


@pytest.mark.slow
def test_sigints_at_random_moments_then_resume_leave_every_folder_finished_with_each_point_once(tmp_path):
    """Issue 46's must-show: SIGINT_LOOP runs, each sent SIGINT at a moment drawn (seeded) from 0 to 2 s after it
    starts, then `--resume` or the fallback its refusal names: every folder finished, every planned point once."""
    import bench.peak  # noqa: F401, PLC0415  (the forked children find it imported: no second of imports each)
    import bench.run  # noqa: F401, PLC0415

    draw = random.Random(46)
    outs = [tmp_path / f"run{i}" for i in range(SIGINT_LOOP)]
    for first in range(0, SIGINT_LOOP, AT_ONCE):
        wave = outs[first : first + AT_ONCE]
        _interrupt_at(wave, [draw.uniform(0, 2) for _ in wave])
        _resume_or_what_it_names(wave)
    for out in outs:
        assert json.loads((out / "meta.json").read_text())["status"] == "finished", out
        planned = [PointSpec(**spec).point_id for spec in json.loads((out / "plan.json").read_text())["specs"]]
        stored = pd.read_csv(out / "points.csv")["point_id"]
        assert len(planned) == 3 and sorted(stored) == sorted(planned), (out, list(stored))
