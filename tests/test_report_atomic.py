"""`report` replaces its output folder whole (bench/report/publish.py): killed at any moment, the folder holds
the old report whole or the new one whole, and a file the report did not write is never removed.

Three layers of checks: each publication case by hand (a user's files, the manifest, a folder of an older
version without one, leftovers of killed reports); every kill point of a publication, one by one (a forked
child that dies just before its n-th change to the filesystem, for n = 1, 2, ... until it finishes); and the
real command, SIGKILLed at seeded random moments (slow)."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from random import Random

import pandas as pd
import pytest

from bench.errors import BadInput
from bench.report import publish
from bench.report.publish import MANIFEST, staged

ROOT = Path(__file__).resolve().parent.parent
USER = {"figures/mine.png": b"a user's own figure", "notes.txt": b"a user's notes"}


# --------------------------------------------------------------------------- reports written by hand
def _fake(tag: str, figures: list[str]) -> dict[str, bytes]:
    """A report's files: report.html and report.md link the figures; numbers.json has keys of `tag`."""
    links = "".join(f'<img src="figures/{f}">' for f in figures)
    return {
        "report.html": f"<html>{tag}{links}</html>".encode(),
        "report.md": ("\n".join(f"![{f}](figures/{f})" for f in figures) + f"\n{tag}\n").encode(),
        "numbers.json": json.dumps({"numbers": {f"{tag}.{f}": 1 for f in figures}}).encode(),
        "fits.csv": f"layer,metric\n{tag},time\n".encode(),
        **{f"figures/{f}": f"png of {f} from {tag}".encode() for f in figures},
    }


A = _fake("A", ["common.png", "only_a.png", "also_a.png"])
B = _fake("B", ["common.png", "only_b.png"])  # common.png: the same name, other content


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for rel, content in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(content)


def _publish(out: Path, files: dict[str, bytes]) -> None:
    with staged(out) as stage:
        _write(stage, files)


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _report_in(out: Path, user: dict[str, bytes], *candidates: dict[str, bytes]) -> int:
    """Which of `candidates` `out` holds whole (its index), checking on the way that every figure its
    report.html links exists, that numbers.json parses and that the manifest lists exactly its files, and
    that the user's files are there as the user wrote them."""
    files = _files(out)
    for rel, content in user.items():
        assert files.pop(rel, None) == content, f"{rel}, a user's file, is gone or changed"
    manifest = json.loads(files.pop(MANIFEST))["files"]
    assert manifest == {rel: _sha(content) for rel, content in files.items()}, "the manifest does not match"
    for link in re.findall(r'src="(figures/[^"]+)"', files["report.html"].decode()):
        assert link in files, f"report.html links {link}, which is missing"
    json.loads(files["numbers.json"])
    for index, candidate in enumerate(candidates):
        if files == candidate:
            return index
    raise AssertionError(f"{out} holds neither report whole: {sorted(files)}")


def _leftovers(out: Path) -> list[str]:
    beside = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}{publish.TMP_TAG}")]
    inside = [p.name for p in out.iterdir() if p.name.startswith(publish.TMP_TAG)] if out.is_dir() else []
    return beside + inside


@pytest.fixture
def out(tmp_path):
    """An output folder holding report A and a user's files."""
    folder = tmp_path / "reports"
    _publish(folder, A)
    _write(folder, USER)
    return folder


# ----------------------------------------------------------------------------------------- by hand
def test_the_new_report_replaces_only_the_old_reports_files(out):
    _write(out, {"sub/deep.txt": b"deep"})
    (out / "empty").mkdir()
    (out / "link.txt").symlink_to("notes.txt")
    (out / "figures" / "also_a.png").write_bytes(b"edited by the user")  # not the report's any more
    _publish(out, B)
    user = USER | {"sub/deep.txt": b"deep", "link.txt": b"a user's notes", "figures/also_a.png": b"edited by the user"}
    assert _report_in(out, user, B) == 0  # only_a.png (the old report's, unchanged) is gone
    assert (out / "empty").is_dir() and os.readlink(out / "link.txt") == "notes.txt"
    assert _leftovers(out) == []


def test_a_new_output_folder_and_a_linked_one(tmp_path):
    _publish(tmp_path / "new" / "reports", B)
    assert _report_in(tmp_path / "new" / "reports", {}, B) == 0
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to("target")
    _publish(tmp_path / "link", A)
    _publish(tmp_path / "link", B)
    assert (tmp_path / "link").is_symlink() and _report_in(tmp_path / "target", {}, B) == 0
    assert _leftovers(tmp_path / "target") == []


def test_a_folder_written_before_manifests(tmp_path):
    """The old report's own files are then the fixed ones and the figures its report links."""
    out = tmp_path / "reports"
    _write(out, A | USER | {"figures/unlinked.png": b"not linked by the report"})
    _publish(out, B)
    assert _report_in(out, USER | {"figures/unlinked.png": b"not linked by the report"}, B) == 0


def test_a_failed_build_leaves_the_old_report_and_nothing_else(out):
    with pytest.raises(ZeroDivisionError), staged(out) as stage:
        _write(stage, B)
        1 / 0  # noqa: B018
    assert _report_in(out, USER, A) == 0 and _leftovers(out) == []


def test_an_output_path_that_is_a_file_is_bad_input(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="not a folder"):
        _publish(tmp_path / "file", A)


@pytest.mark.parametrize("why", ["no exchange", "cwd inside"])
def test_in_place_where_the_folder_cannot_be_switched(out, monkeypatch, capsys, why):
    if why == "no exchange":
        monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    else:
        monkeypatch.chdir(out / "figures")
    _publish(out, B)
    assert _report_in(out, USER, B) == 0 and _leftovers(out) == []
    assert "replaced file by file" in capsys.readouterr().err


@pytest.mark.parametrize("switch", [True, False])
def test_an_edited_manifest_cannot_make_the_report_remove_a_file_outside_its_folder(out, monkeypatch, switch):
    if not switch:
        monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    outside = out.parent / "outside.txt"
    outside.write_text("keep")
    publish._write_manifest(out, {"../outside.txt": None, str(outside): None} | {rel: _sha(c) for rel, c in A.items()})
    _publish(out, B)
    assert outside.read_text() == "keep" and _report_in(out, USER, B) == 0


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_leftovers_of_killed_reports_are_cleared_and_a_users_file_in_them_put_back(out):
    dead = _dead_pid()
    unpublished = out.parent / f".reports{publish.TMP_TAG}{dead}-00000001"  # killed while building
    _write(unpublished, B | {publish.MARKER: b""})
    swapped_out = out.parent / f".reports{publish.TMP_TAG}{dead}-00000002"  # killed just after the switch
    _write(swapped_out, A | {"late.txt": b"written by the user during the build"})
    publish._write_manifest(swapped_out, {rel: _sha(c) for rel, c in A.items()})
    inside = out / f"{publish.TMP_TAG}{dead}-00000003"  # killed while publishing in place
    _write(inside, B | {publish.MARKER: b""})
    reused = out.parent / f".reports{publish.TMP_TAG}{os.getppid()}-00000004"  # its pid now names a later process
    _write(reused, {publish.MARKER: b""})
    os.utime(reused, (1e9, 1e9))
    running = out.parent / f".reports{publish.TMP_TAG}{os.getppid()}-00000005"  # a report still running
    _write(running, {publish.MARKER: b""})
    other = [out.parent / f".other{publish.TMP_TAG}{dead}-00000006", out.parent / f".reports{publish.TMP_TAG}x"]
    for folder in other:
        _write(folder, {publish.MARKER: b""})
    publish.remove_stale(out)
    assert not unpublished.exists() and not swapped_out.exists() and not inside.exists() and not reused.exists()
    assert running.exists() and all(folder.exists() for folder in other)
    assert _report_in(out, USER | {"late.txt": b"written by the user during the build"}, A) == 0


# --------------------------------------------------------------------------------- every kill point
KILLED = 9
CHANGES = ("link", "unlink", "rename", "replace", "mkdir", "rmdir", "chmod", "symlink")


def _publish_killed_at(n: int, out: Path, files: dict[str, bytes], sentinel: Path) -> bool:
    """Publish `files` to `out` in a child process that dies (os._exit: no clean-up runs) just before its n-th
    change to the filesystem; a user writes `out/during.txt` just before the switch (`sentinel` says so).
    True if the child finished before its n-th change."""
    pid = os.fork()
    if pid == 0:  # the child
        try:
            count = 0

            def counted(fn):
                def wrapped(*args, **kwargs):
                    nonlocal count
                    count += 1
                    if count == n:
                        os._exit(KILLED)
                    return fn(*args, **kwargs)

                return wrapped

            for name in CHANGES:
                setattr(os, name, counted(getattr(os, name)))
            exchange = publish._exchange

            def exchange_while_a_user_writes(a, b):
                sentinel.write_text("")
                (out / "during.txt").write_text("during")
                return exchange(a, b)

            publish._exchange = counted(exchange_while_a_user_writes)
            _publish(out, files)
            os._exit(0)
        except BaseException:
            os._exit(3)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert code in (0, KILLED), f"the child failed (exit {code}) at kill point {n}"
    return code == 0


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("mode", ["switch", "in place"])
def test_killed_at_every_step_the_folder_holds_one_report_whole(tmp_path, monkeypatch, mode):
    if mode == "in place":
        monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    outcomes = []
    for n in range(1, 200):
        case = tmp_path / str(n)
        out = case / "reports"
        _publish(out, A)
        _write(out, USER)
        sentinel = case / "user-wrote-during"
        finished = _publish_killed_at(n, out, B, sentinel)
        user = USER | ({"during.txt": b"during"} if (out / "during.txt").exists() else {})
        if mode == "switch":
            outcomes.append("AB"[_report_in(out, user, A, B)])
            assert len(_leftovers(out)) <= 1
        else:  # file by file: every figure a report.html links exists, numbers.json parses, user files stay
            files = _files(out)
            assert all(files.get(rel) == content for rel, content in USER.items())
            links = re.findall(r'src="(figures/[^"]+)"', files["report.html"].decode())
            assert all(link in files for link in links) and json.loads(files["numbers.json"])
            outcomes.append("AB"[files["report.html"] == B["report.html"]])
        # the next report clears what the killed one left, and puts back what a user wrote meanwhile
        _publish(out, B)
        user = USER | ({"during.txt": b"during"} if sentinel.exists() else {})
        assert _report_in(out, user, B) == 0 and _leftovers(out) == []
        shutil.rmtree(case)
        if finished:
            break
    else:
        raise AssertionError("the publication never finished")
    print(f"{mode}: {len(outcomes)} kill points, the folder held {''.join(outcomes)}")
    assert outcomes[0] == "A" and outcomes[-1] == "B" and len(outcomes) > 10, outcomes


# ------------------------------------------------------------------------ the real command, SIGKILLed
def _cut_run(src: Path, dst: Path, layers: list[str]) -> None:
    """A copy of a stored run whose points.csv keeps only `layers`: a report on it takes seconds."""
    dst.mkdir(parents=True)
    shutil.copy(src / "meta.json", dst / "meta.json")
    points = pd.read_csv(src / "points.csv")
    points[points["layer"].isin(layers)].to_csv(dst / "points.csv", index=False)


class _ForkedReport:
    """`python -m bench report --results R --out O` in a forked child of this (already imported) process: the
    same code and the same filesystem work, without a second of interpreter and torch start-up per kill.
    Answers like a Popen: pid, poll, wait, send_signal, and stderr.read()."""

    def __init__(self, results: Path, out: Path):
        self._err = tempfile.TemporaryFile()
        self.pid = os.fork()
        if self.pid == 0:  # the child: report, then leave without running the parent's clean-up
            code = 1
            try:
                os.dup2(self._err.fileno(), 2)
                from bench.cli import main  # noqa: PLC0415

                code = main(["report", "--results", str(results), "--out", str(out)])
            finally:
                os._exit(code)
        self.returncode = None
        self.stderr = self

    def read(self) -> bytes:
        self._err.seek(0)
        return self._err.read()

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def send_signal(self, signum) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)


def _report_process(results: Path, out: Path) -> _ForkedReport:
    return _ForkedReport(results, out)


def _snapshot(out: Path) -> dict[str, bytes]:
    files = _files(out)
    files.pop(MANIFEST)
    for rel in USER:
        files.pop(rel, None)
    return files


def _wait_for_manifest(report: subprocess.Popen, staging_pattern: Path) -> None:
    """Until the report's staging folder holds its manifest (it is about to be switched in; a few
    milliseconds later it holds the old folder's), or the report ends."""
    staging, started = None, time.monotonic()
    while report.poll() is None and time.monotonic() - started < 120:
        if staging is None:
            staging = next(staging_pattern.parent.glob(staging_pattern.name), None)
            time.sleep(0.005)
        elif (staging / MANIFEST).exists():
            return
        else:
            time.sleep(0.0002)


def _stage_of(leftover: Path, pid: int) -> str:
    """Where a killed report stopped, from the staging folder it left."""
    if f"{publish.TMP_TAG}{pid}-" not in leftover.name:
        return "an earlier report's leftover"
    if not (leftover / publish.MARKER).exists():
        return "its old folder, switched out"
    return "its staged report" + (" with the manifest" if (leftover / MANIFEST).exists() else "")


@pytest.mark.slow
def test_report_sigkilled_at_random_moments_leaves_one_report_whole(tmp_path):
    reference = ROOT / "results" / "reference"
    runs = sorted(p.parent for p in reference.rglob("meta.json") if (p.parent / "points.csv").exists())
    paths = sorted(p.parent for p in reference.rglob("paths.csv"))
    assert runs and paths
    inputs = [tmp_path / "a", tmp_path / "b"]
    _cut_run(runs[0], inputs[0] / "run", ["conv"])
    _cut_run(runs[0], inputs[1] / "run", ["lstm"])
    shutil.copytree(paths[0], inputs[1] / "paths")  # each has figures the other lacks, and both time_vs_n.png
    out = tmp_path / "reports"
    whole = []
    for results in inputs:  # each report once, whole: what "old" and "new" look like
        started = time.monotonic()
        report = _report_process(results, out)
        assert report.wait(timeout=300) == 0, report.stderr.read().decode()
        duration = time.monotonic() - started
        whole.append(_snapshot(out))
        _write(out, USER)
    assert whole[0] != whole[1] and whole[0]["figures/time_vs_n.png"] != whole[1]["figures/time_vs_n.png"]
    keys = [set(json.loads(w["numbers.json"])["numbers"]) for w in whole]

    rng = Random(20261121)
    seen, kills_started = [], time.monotonic()
    state = 1  # out holds report b
    for kill in range(4):
        report = _report_process(inputs[1 - state], out)
        started = time.monotonic()
        if kill % 2 == 0:  # a moment in the publication: as the staged manifest appears, or just after
            _wait_for_manifest(report, tmp_path / f".reports{publish.TMP_TAG}{report.pid}-*")
            time.sleep(rng.choice([0, 0.001, 0.003, 0.01, 0.05]))
        else:  # any moment of the whole run
            time.sleep(rng.uniform(0.05, 1.1) * duration)
        report.send_signal(signal.SIGKILL)
        code = report.wait()
        assert code in (0, -signal.SIGKILL), report.stderr.read().decode()
        new_state = _report_in(out, USER, *whole)
        assert set(json.loads((out / "numbers.json").read_text())["numbers"]) == keys[new_state]
        assert len(_leftovers(out)) <= 1, _leftovers(out)  # a report clears its predecessors' leftovers first
        seen.append(
            ("old", "new")[new_state != state]
            + (" (finished)" if code == 0 else "")
            + "".join(f" + {_stage_of(tmp_path / name, report.pid)}" for name in _leftovers(out))
        )
        state = new_state
    publish.remove_stale(out)  # what the next report does first
    assert _leftovers(out) == [] and _report_in(out, USER, *whole) == state
    print(f"{len(seen)} kills in {time.monotonic() - kills_started:.1f} s, after each the folder held: {seen}")
