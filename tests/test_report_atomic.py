"""`report` replaces its output folder whole (bench/report/publish.py): killed at any moment, the folder holds
the old report whole or the new one whole (or, killed between the two renames, is missing while the old one
waits beside it for the next report to put it back); a file the report did not write is never removed; a
second report to the same folder is refused while one is written.

Three layers of checks: each case by hand; every kill point of a publication, one by one (a forked child
that dies just before its n-th change to the filesystem); and the real command, SIGKILLed at seeded random
moments (slow)."""

import contextlib
import errno
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from random import Random

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BadInput, RunFailed
from bench.report import publish
from bench.report.publish import staged

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


def _beside(out: Path, what: str) -> Path:
    return out.parent / f".{out.name}{publish.TAG}{what}"


def _report_in(out: Path, user: dict[str, bytes], *candidates: dict[str, bytes]) -> int:
    """Which of `candidates` `out` holds whole (its index), checking that every figure its report.html links
    exists, that numbers.json parses and that the user's files are there as the user wrote them."""
    files = _files(out)
    for rel, content in user.items():
        assert files.pop(rel, None) == content, f"{rel}, a user's file, is gone or changed"
    for link in re.findall(r'src="(figures/[^"]+)"', files["report.html"].decode()):
        assert link in files, f"report.html links {link}, which is missing"
    json.loads(files["numbers.json"])
    for index, candidate in enumerate(candidates):
        if files == candidate:
            return index
    raise AssertionError(f"{out} holds neither report whole: {sorted(files)}")


def _after_a_kill(out: Path, user: dict[str, bytes], *candidates: dict[str, bytes]) -> int:
    """What a killed report left: the index of the report `out` holds whole, or, where `out` is missing (killed
    between the two renames), of the one its old folder holds whole; every user's file is in one of the two."""
    old = _beside(out, "old")
    in_old = {rel: content for rel, content in user.items() if (old / rel).is_file()}
    if out.exists():
        in_out = {rel: content for rel, content in user.items() if rel not in in_old}
        return _report_in(out, in_out, *candidates)
    return _report_in(old, user, *candidates)


def _leftovers(out: Path) -> list[str]:
    return [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}{publish.TAG}") and p.is_dir()]


@pytest.fixture
def out(tmp_path):
    """An output folder holding report A and a user's files."""
    folder = tmp_path / "reports"
    _publish(folder, A)
    _write(folder, USER)
    return folder


# ----------------------------------------------------------------------------------------- by hand
def test_the_new_report_replaces_only_the_old_reports_files(out):
    _write(out, {"sub/deep.txt": b"deep", "figures/unlinked.png": b"no page of the report links it"})
    (out / "empty").mkdir()
    (out / "link.txt").symlink_to("notes.txt")
    (out / ".report-manifest.json").write_text("{}")  # written by older versions: the report's own
    _publish(out, B)
    user = USER | {"sub/deep.txt": b"deep", "link.txt": b"a user's notes"}
    user |= {"figures/unlinked.png": b"no page of the report links it"}
    assert _report_in(out, user, B) == 0  # only_a.png and also_a.png (the old report's) are gone
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


def test_a_failed_build_leaves_the_old_report_and_nothing_else(out):
    with pytest.raises(ZeroDivisionError), staged(out) as stage:
        _write(stage, B)
        1 / 0  # noqa: B018
    assert _report_in(out, USER, A) == 0 and _leftovers(out) == []


def test_a_full_disk_names_the_file_it_was_writing_and_leaves_the_old_report(out):
    with pytest.raises(RunFailed) as failed, staged(out) as stage:
        _write(stage, {"report.md": b"half a report"})
        raise OSError(errno.ENOSPC, "No space left on device")  # as a write with no file name raises it
    assert str(failed.value).startswith(f"{out / 'report.md'}: the report could not be written (no space left")
    assert _report_in(out, USER, A) == 0 and _leftovers(out) == []


def test_an_output_path_that_is_a_file_is_bad_input(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="not a folder"):
        _publish(tmp_path / "file", A)


def test_an_edited_page_cannot_make_the_report_remove_a_file_outside_its_folder(out):
    outside = out.parent / "outside.txt"
    outside.write_text("keep")
    (out / "report.md").write_text("![x](figures/../../outside.txt) ![y](figures/../notes.txt)")
    _publish(out, B)
    assert outside.read_text() == "keep" and _report_in(out, USER, B) == 0


def test_a_users_file_whose_name_the_new_report_takes_is_kept_aside_and_named(out, capsys):
    _write(out, {"figures/only_b.png": b"the user's, before the report wrote one of that name"})
    _publish(out, B)
    assert _report_in(out, USER, B) == 0
    (kept,) = [p for p in out.parent.iterdir() if "-kept-" in p.name]
    assert _files(kept) == {"figures/only_b.png": b"the user's, before the report wrote one of that name"}
    assert str(kept) in capsys.readouterr().err


def test_a_killed_reports_leftovers_are_cleared_and_its_old_folder_put_back(out):
    # killed between its two renames: the old report beside, its new one unpublished
    os.rename(out, _beside(out, "old"))
    _write(_beside(out, "new"), B)
    with pytest.raises(ZeroDivisionError), staged(out):
        1 / 0  # noqa: B018
    assert _report_in(out, USER, A) == 0 and _leftovers(out) == []
    # killed after the switch, while it moved a user's file written during the build into the new folder
    _publish(out, B)
    _write(_beside(out, "old"), A | {"late.txt": b"written by the user during the build"})
    with pytest.raises(ZeroDivisionError), staged(out):
        1 / 0  # noqa: B018
    assert _report_in(out, USER | {"late.txt": b"written by the user during the build"}, B) == 0
    assert _leftovers(out) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_second_report_to_the_same_folder_is_refused_while_one_is_written(out):
    go, building = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a report that holds its build open until the parent has tried
        code = 3
        try:
            with staged(out) as stage:
                _write(stage, B)
                os.write(building[1], b"x")
                os.read(go[0], 1)
            code = 0
        finally:
            os._exit(code)
    os.read(building[0], 1)
    with pytest.raises(BadInput, match="another report is being written there"):
        _publish(out, A)
    assert _report_in(out, USER, A) == 0
    os.write(go[1], b"x")
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert _report_in(out, USER, B) == 0
    _publish(out, A)  # the lock is free again
    assert _report_in(out, USER, A) == 0


# --------------------------------------------------------------------------------- every kill point
KILLED = 9
CHANGES = ("link", "unlink", "rename", "replace", "mkdir", "rmdir", "chmod", "symlink")


def _publish_killed_at(n: int, out: Path, files: dict[str, bytes], sentinel: Path) -> bool:
    """Publish `files` to `out` in a child process that dies (os._exit: no clean-up runs) just before its n-th
    change to the filesystem; a user writes `out/during.txt` during the build (`sentinel` says so). True if
    the child finished before its n-th change."""
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
            with staged(out) as stage:
                _write(stage, files)
                (out / "during.txt").write_bytes(b"during")
                sentinel.write_text("")
            os._exit(0)
        except BaseException:
            os._exit(3)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert code in (0, KILLED), f"the child failed (exit {code}) at kill point {n}"
    return code == 0


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_killed_at_every_step_the_folder_holds_one_report_whole(tmp_path):
    outcomes = []
    for n in range(1, 200):
        case = tmp_path / str(n)
        out = case / "reports"
        _publish(out, A)
        _write(out, USER)
        sentinel = case / "user-wrote-during"
        finished = _publish_killed_at(n, out, B, sentinel)
        user = USER | ({"during.txt": b"during"} if sentinel.exists() else {})
        held = _after_a_kill(out, user, A, B)
        assert out.exists() or held == 0  # missing: the old report beside it, whole
        outcomes.append("AB"[held] if out.exists() else "-")
        assert len(_leftovers(out)) <= 2
        # the next report clears what the killed one left, and puts back what the user wrote
        _publish(out, B)
        assert _report_in(out, user, B) == 0 and _leftovers(out) == []
        shutil.rmtree(case)
        if finished:
            break
    else:
        raise AssertionError("the publication never finished")
    print(f"{len(outcomes)} kill points, the folder held (-: missing, the old report beside): {''.join(outcomes)}")
    assert outcomes[0] == "A" and outcomes[-1] == "B" and "-" in outcomes and len(outcomes) > 10, outcomes


# ------------------------------------------------------------------------ the real command, SIGKILLed
def _cut_run(src: Path, dst: Path, layers: list[str]) -> None:
    """A copy of a stored run whose points.csv keeps only `layers`: a report on it takes seconds."""
    dst.mkdir(parents=True)
    points = pd.read_csv(src / "points.csv")
    kept = points[points["layer"].isin(layers)]
    kept.to_csv(dst / "points.csv", index=False)
    meta = json.loads((src / "meta.json").read_text())
    meta["points_stored"] = len(kept)  # a whole run of these layers, not one that lost rows
    (dst / "meta.json").write_text(json.dumps(meta))


def _report_process(results: Path, out: Path) -> subprocess.Popen:
    """`python -m bench report --results R --out O` in a new process. Forked from the pytest worker instead (its
    threads: xdist's, torch's), the report ended by SIGSEGV with nothing on its stderr in 2 of 5 fresh-clone suites
    on the 2-core AMD VM."""
    argv = [sys.executable, "-m", "bench", "report", "--results", str(results), "--out", str(out), "--no-progress"]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _snapshot(out: Path) -> dict[str, bytes]:
    files = _files(out)
    for rel in USER:
        files.pop(rel, None)
    return files


def _wait_until_built(report: subprocess.Popen, new: Path) -> None:
    """Until the report's new folder holds numbers.json, written last (it is about to be switched in), or the
    report ends."""
    started = time.monotonic()
    while report.poll() is None and time.monotonic() - started < 120 and not (new / "numbers.json").exists():
        time.sleep(0.0002)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
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
        assert report.wait() == 0, report.communicate()[1]
        duration = time.monotonic() - started
        whole.append(_snapshot(out))
        _write(out, USER)
    assert whole[0] != whole[1] and whole[0]["figures/time_vs_n.png"] != whole[1]["figures/time_vs_n.png"]

    rng = Random(20261121)
    seen, kills_started = [], time.monotonic()
    state = 1  # out holds report b
    for kill in range(4):
        report = _report_process(inputs[1 - state], out)
        if kill % 2 == 0:  # a moment in the publication: as the new folder is complete, or just after
            _wait_until_built(report, _beside(out, "new"))
            time.sleep(rng.choice([0, 0.001, 0.003, 0.01, 0.05]))
        else:  # any moment of the whole run
            time.sleep(rng.uniform(0.05, 1.1) * duration)
        report.kill()
        code = report.wait()
        assert code in (0, -signal.SIGKILL), report.communicate()[1]
        new_state = _after_a_kill(out, USER, *whole)
        assert len(_leftovers(out)) <= 2, _leftovers(out)
        seen.append(
            ("old", "new")[new_state != state]
            + (" (finished)" if code == 0 else "")
            + ("" if out.exists() else " beside a missing folder")
            + "".join(f" + {name}" for name in _leftovers(out))
        )
        state = new_state
    with pytest.raises(ZeroDivisionError), staged(out):  # what the next report does first
        1 / 0  # noqa: B018
    assert _leftovers(out) == [] and _report_in(out, USER, *whole) == state
    print(f"{len(seen)} kills in {time.monotonic() - kills_started:.1f} s, after each the folder held: {seen}")


def test_a_run_under_a_path_that_is_not_utf8_is_reported(tmp_path):
    """`report` exited 1 with a UnicodeEncodeError writing report.md, naming no file (issue 46: 16)."""
    import os

    from bench.cli import main

    bad = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff\xfe"))
    grid = ["--layers", "conv", "--n", "16,32,64", "--d", "8", "--rounds", "2", "--passes", "1"]
    said = io.StringIO()  # what is printed names the path: neither pytest's capture nor xdist takes such text
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        assert main(["run", *grid, "--target-time", "0.002", "--no-progress", "--out", str(bad)]) == 0
        assert main(["report", "--results", str(bad), "--out", str(tmp_path / "report")]) == 0
    assert "bad\\udcff\\udcfe" in (tmp_path / "report" / "report.md").read_text()


def test_a_report_refuses_a_folder_of_the_users_files_and_leaves_nothing_beside_it(tmp_path, capsys):
    """`report --out` into a folder that holds files and no report: refused, their report.html and fits.csv kept
    (issue 56: 8); no lock or stage left beside any --out (issue 56: 9)."""
    from small_report import write_run

    write_run(tmp_path / "runs")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.html").write_text("my page")
    (mine / "fits.csv").write_text("my table")
    assert main(["report", "--results", str(tmp_path / "runs"), "--out", str(mine)]) == 2
    assert "not a report's folder" in capsys.readouterr().err
    assert (mine / "report.html").read_text() == "my page" and (mine / "fits.csv").read_text() == "my table"
    ours = tmp_path / "ours"
    for _ in range(2):  # a new folder, then the report replaced in place
        assert main(["report", "--results", str(tmp_path / "runs"), "--out", str(ours)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "ours", "runs"]


def test_an_empty_out_is_refused_not_read_as_the_current_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["run", "--layers", "conv", "--n", "64", "--d", "8"], ["report"]):
        assert main([*command, "--out", ""]) == 2 and "an empty path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
