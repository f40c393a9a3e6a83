"""When a point whose process died is given up (bench.deaths): on the second death with evidence that memory
killed it, on the fourth without; what is written for it names each death."""

import json

import pandas as pd
import psutil

from bench import cgroup, deaths
from bench.folder import RunFolder
from bench.policy import TimingPolicy
from bench.run import Run
from bench.spec import PointSpec

SPEC = PointSpec(layer="conv", n=8, d=4, k=3)
PLENTY = 64 * 2**30


def _died(available_bytes=PLENTY, oom_kills=None, pid=1):
    return {"point_id": SPEC.point_id, "attempt": 0, "pass": 0, "pid": pid, "utc": "2026-01-01T00:00:00+00:00"} | {
        "available_bytes": available_bytes,
        "oom_kills": oom_kills,
    }


def test_deaths_without_evidence_are_measured_again_until_the_bound():
    assert deaths.given_up(SPEC, [_died(pid=p) for p in range(deaths.KILLED_AFTER_UNEXPLAINED - 1)]) is None
    reason, log = deaths.given_up(SPEC, [_died(pid=p) for p in range(deaths.KILLED_AFTER_UNEXPLAINED)])
    assert "no sign that memory was the cause" in reason and "most likely for memory" not in reason
    assert log.count("no sign of memory") == deaths.KILLED_AFTER_UNEXPLAINED


def test_the_memory_there_was_or_the_kernels_oom_count_is_evidence():
    tight = [_died(available_bytes=1000, pid=p) for p in range(2)]  # the point needs more than half of it
    reason, log = deaths.given_up(SPEC, tight)
    assert "memory the likely cause" in reason and "predicted to need" in reason and "predicted to need" in log
    counted = [_died(oom_kills=3, pid=p) for p in range(2)]
    assert deaths.given_up(SPEC, counted, oom_kills_now=3) is None  # the count did not rise: no evidence
    reason, _ = deaths.given_up(SPEC, counted, oom_kills_now=4)
    assert "the kernel counted 1 OOM kill(s)" in reason


def test_a_point_given_up_is_stored_killed_with_its_reasons_in_errors_log(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.update_meta(run_id="run", kind="run", status="running", started_utc="now", threads=1)
    lines = [_died(available_bytes=1000, pid=11), _died(available_bytes=1000, pid=12)]
    (folder.path / "started.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    folder.read_stored([SPEC])
    run = Run(folder, [SPEC], TimingPolicy(), log=lambda line: None)
    run._store_killed()
    row = pd.read_csv(folder.path / "points.csv").iloc[0]
    assert row["status"] == "killed" and "memory the likely cause" in row["error"]
    log = (folder.path / "errors.log").read_text()
    assert SPEC.key in log and "process 11 died in pass 0" in log and "process 12 died in pass 0" in log


def test_the_memory_available_is_the_cgroups_room_where_it_limits(tmp_path, monkeypatch):
    """A container's limit (v2 memory.max, less memory.current) below the machine's available memory is what a
    process may still take; an ancestor without a limit ("max") does not count."""
    (tmp_path / "proc").write_text("0::/job/step\n")
    for folder, limit, used in (("job/step", str(3 * 2**30), str(2**30)), ("job", "max", str(2**30))):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "memory.max").write_text(limit + "\n")
        (tmp_path / folder / "memory.current").write_text(used + "\n")
    monkeypatch.setattr(cgroup, "PROC_CGROUP", tmp_path / "proc")
    monkeypatch.setattr(cgroup, "CGROUP_ROOT", tmp_path)
    assert cgroup.available_bytes() == min(2 * 2**30, psutil.virtual_memory().available)
    (tmp_path / "job/step/memory.max").write_text("max\n")
    lifted = cgroup.available_bytes()  # no limit anywhere: the machine's available memory
    assert lifted > 2 * 2**30 or psutil.virtual_memory().available <= 2 * 2**30
