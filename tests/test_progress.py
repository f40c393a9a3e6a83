"""Progress on stderr: tqdm's bar on a terminal, a plain line every PROGRESS_EVERY_S in a log file or a pipe (items
done of the total, elapsed, time left at the pace so far), nothing with --no-progress."""

import io
import re
import time

import pytest
from tqdm import tqdm

from bench import cluster as C
from bench import progress
from bench.policy import TimingPolicy
from bench.progress import PROGRESS_EVERY_S, ProgressLines, progress_bar
from bench.run import Run
from bench.spec import PointSpec


class FakeClock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(total, every_s=10.0):
    clock, out = FakeClock(), io.StringIO()
    return ProgressLines(total, "points", "visits", out, every_s, clock), clock, out


def _at(clock, now_s, *calls):
    clock.now_s = now_s
    for call in calls:
        call()


def test_a_line_every_interval_with_done_total_elapsed_and_left():
    bar, clock, out = _lines(10)
    _at(clock, 4.0, bar.update, bar.tick)  # 4 s since the start: too soon
    _at(clock, 9.0, lambda: bar.set_postfix_str("pass 1/5 conv n=64"), bar.tick)
    _at(clock, 10.0, bar.update, bar.tick)  # 2 done in 10 s: 0.2/s, 8 left -> 40 s
    _at(clock, 15.0, bar.update, bar.tick)  # 5 s since the last line
    _at(clock, 20.0, bar.update, bar.tick)  # 4 done in 20 s: 0.2/s, 6 left -> 30 s
    assert out.getvalue().splitlines() == [
        "points: 2/10 visits, 00:10 elapsed, about 00:40 left, pass 1/5 conv n=64",
        "points: 4/10 visits, 00:20 elapsed, about 00:30 left, pass 1/5 conv n=64",
    ]
    _at(clock, 23.0, bar.close)  # nothing done since the last line
    assert len(out.getvalue().splitlines()) == 2


def test_a_line_while_nothing_is_done_with_the_time_left_unknown():
    bar, clock, out = _lines(4)
    _at(clock, PROGRESS_EVERY_S, lambda: bar.set_postfix_str("[node-a 1234abcd] lstm (cpu float32) pass 2"), bar.tick)
    _at(clock, 2 * PROGRESS_EVERY_S, bar.tick)  # one point measured for longer than a line's interval
    assert out.getvalue().splitlines() == [
        "points: 0/4 visits, 00:10 elapsed, about ? left, [node-a 1234abcd] lstm (cpu float32) pass 2",
        "points: 0/4 visits, 00:20 elapsed, about ? left, [node-a 1234abcd] lstm (cpu float32) pass 2",
    ]


def test_close_writes_the_last_count_once_a_line_was_written():
    bar, clock, out = _lines(10)
    _at(clock, 12.0, lambda: bar.update(3), bar.tick)  # 3 in 12 s: 0.25/s, 7 left -> 28 s
    _at(clock, 15.0, lambda: bar.update(2), bar.tick)
    _at(clock, 20.0, bar.close)  # 5 in 20 s: 0.25/s, 5 left -> 20 s
    assert out.getvalue().splitlines() == [
        "points: 3/10 visits, 00:12 elapsed, about 00:28 left",
        "points: 5/10 visits, 00:20 elapsed, about 00:20 left",
    ]


def test_a_short_bar_writes_nothing():
    bar, clock, out = _lines(3)
    for now_s in (1.0, 2.0, 3.0):
        _at(clock, now_s, bar.update, bar.tick)
    _at(clock, 3.5, bar.close)
    assert out.getvalue() == ""


def test_its_thread_ticks_while_nothing_is_done_and_stops_on_close():
    out, every_s = io.StringIO(), 0.05
    started_s = time.monotonic()
    bar = ProgressLines(4, "points", "visits", out, every_s).start()
    time.sleep(10 * every_s)  # no update: a line each interval
    bar.close()
    most = (time.monotonic() - started_s) / every_s  # at most one a whole interval, however late the sleep ends
    written = out.getvalue().splitlines()
    assert 3 <= len(written) <= most and all(line.startswith("points: 0/4 visits, ") for line in written)
    time.sleep(0.2)
    assert out.getvalue().splitlines() == written


def test_lines_in_a_log_a_bar_on_a_terminal_nothing_without_progress():
    log, terminal = io.StringIO(), Terminal()
    lines = progress_bar(5, "points", "visits", show=True, file=log)
    assert isinstance(lines, ProgressLines)
    lines.close()
    bar = progress_bar(5, "points", "visits", show=True, file=terminal)
    assert isinstance(bar, tqdm) and not isinstance(bar, ProgressLines)
    bar.update(2)
    bar.close()
    assert "\r" in terminal.getvalue() and "2/5" in terminal.getvalue()
    for out in (io.StringIO(), Terminal()):
        quiet = progress_bar(5, "points", "visits", show=False, file=out)
        quiet.update(5)
        quiet.close()
        assert out.getvalue() == ""


class _FakeRay:
    """What Cluster.measure asks of Ray before its phases: one live node with a CPU."""

    __version__ = "test"

    def nodes(self):
        return [{"Alive": True, "NodeID": "a" * 16, "NodeManagerHostname": "host-a", "Resources": {"CPU": 1}}]


class _FakePhase:
    """A device's points measured on Ray, as the bar sees it: a postfix per record, a count per point stored."""

    def __init__(self, cluster, sweep, device, bar):
        self.bar = bar

    def measure(self, specs):
        for spec in specs:
            self.bar.set_postfix_str(f"[host-a] {spec.layer} n={spec.n}", refresh=False)
            time.sleep(0.05)
            self.bar.update(1)


@pytest.mark.parametrize("show", [True, False])
def test_a_ray_sweep_into_a_log_shows_points_stored_and_nothing_without_progress(tmp_path, monkeypatch, capsys, show):
    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.005)
    monkeypatch.setattr(C, "Phase", _FakePhase)
    specs = [PointSpec(layer="conv", n=n, d=4, k=3) for n in (8, 16)]
    run = Run.create(specs, TimingPolicy(), out=tmp_path / "run", command=["test"], preset=None)
    try:
        run.folder.update_meta(nodes={}, machines={})
        C.Cluster(_FakeRay(), "test", False, None, lambda line: None).measure(
            run.folder, specs, run.policy, seed=0, progress=show
        )
    finally:
        run.folder.release()
    found = re.findall(
        r"^points: (\d)/2 stored, \S+ elapsed, about (\S+) left, \[host-a\] conv n=(\d+)$",
        capsys.readouterr().err,
        re.M,
    )
    if not show:
        assert found == []
        return
    done = [int(n) for n, _, _ in found]
    assert done == sorted(done) and done[-1] == 2 and found[-1][1] == "00:00"
    assert ("0", "?", "8") in found  # while the first point is measured: none stored, the time left unknown
    assert any(n == "1" and at == "16" for n, _, at in found)  # while the second is


def test_a_total_not_known_ahead_says_what_is_done_so_far():
    lines = ProgressLines(None, "report", "figures", io.StringIO())
    lines.update(5)
    assert lines.line(lines.started_s + 12.0) == "report: 5 figures so far, 00:12 elapsed"


def test_paths_and_report_show_progress_lines_in_a_log(tmp_path, monkeypatch, capsys):
    from bench.cli import main  # noqa: PLC0415

    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.002)
    assert main(["paths", "--layers", "conv,lstm", "--n", "8,16", "--k", "3", "--out", str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^paths: [1-4]/4 rows, \d\d:\d\d elapsed", err, re.M), err
    assert main(["paths", "--layers", "conv", "--n", "8,16", "--out", str(tmp_path / "q"), "--no-progress"]) == 0
    assert "rows," not in capsys.readouterr().err
