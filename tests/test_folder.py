"""RunFolder, a run folder's one writer: meta.json written by it alone and with its schema, rows and passes
stored once, and folders written by older versions read as they are."""

import inspect
import json

import pandas as pd
import pytest
from stand_ins import FAKE_PEAK

import bench.run
from bench import deaths, formats, schema, storage
from bench import folder as F
from bench.errors import BadInput, RunFailed
from bench.policy import TimingPolicy
from bench.run import Run
from bench.spec import PointSpec

SPECS = [PointSpec(layer="conv", n=n, d=4, k=3) for n in (8, 16)]


def _new(tmp_path) -> F.RunFolder:
    folder = F.RunFolder.create(tmp_path / "run", "cpu")
    folder.begin("run", ["test"], None, 1)
    return folder


def test_a_new_folder_says_its_schema_and_its_meta_changes_only_through_update_meta(tmp_path):
    folder = _new(tmp_path)
    meta = json.loads((folder.path / "meta.json").read_text())
    assert meta["schema"] == formats.SCHEMA == 2 and meta["run_id"] == "run" and meta["status"] == "running"
    with pytest.raises(TypeError):
        folder.meta["status"] = "finished"  # read-only: the file and the object never differ
    folder.update_meta(status="finished")
    folder.extend_meta("load_passes", {"pass": 0})
    folder.extend_meta("load_passes", {"pass": 1})
    on_disk = json.loads((folder.path / "meta.json").read_text())
    assert on_disk["status"] == folder.meta["status"] == "finished"
    assert on_disk["load_passes"] == folder.meta["load_passes"] == [{"pass": 0}, {"pass": 1}]
    with pytest.raises(ValueError, match="update_meta"):
        folder.save_json("meta.json", {})
    folder.release()


def test_every_write_of_meta_json_in_a_run_comes_from_update_meta(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.peak, "compute_peak", lambda device, dtype: dict(FAKE_PEAK, dtype=str(dtype)))
    writers, real = [], storage.write_json

    def recording(path, obj):
        if path.name == "meta.json":
            caller = inspect.stack()[1]
            writers.append((caller.filename.rsplit("/", 1)[-1], caller.function))
        real(path, obj)

    monkeypatch.setattr(storage, "write_json", recording)
    policy = TimingPolicy(min_rounds=3, max_rounds=3, target_s=0.002, min_round_s=1e-4, passes=2, extra_passes=1)
    run = Run.create(SPECS, policy, out=tmp_path / "run", command=["test"], preset=None, threads=1)
    meta = run.execute(progress=False)
    assert meta["status"] == "finished" and policy.passes <= len(meta["load_passes"]) <= policy.passes + 1
    # begin, the peak at the start and at the end, the load of each pass, finished: one write each
    assert len(writers) == 1 + 2 + len(meta["load_passes"]) + 1
    assert set(writers) == {("folder.py", "update_meta")}


def test_a_schema_newer_than_this_version_is_refused_and_none_is_one(tmp_path):
    assert formats.schema_of({}, tmp_path) == 1
    assert formats.schema_of({"schema": 2}, tmp_path) == 2
    meta = {"run_id": "r", "kind": "run", "status": "finished", "started_utc": "2026-01-01T00:00:00+00:00"}
    (tmp_path / "meta.json").write_text(json.dumps(meta | {"schema": 3}))
    with pytest.raises(RunFailed, match=r"meta.json: schema 3, this version reads 1 to 2"):
        F.read_meta(tmp_path)


def _row(spec: PointSpec, status: str = "ok") -> dict:
    return {"layer": spec.layer, "n": spec.n, "d": spec.d, "batch": 1, "status": status, "point_id": spec.point_id}


def test_a_row_is_stored_once_and_an_oom_blocks_its_larger_siblings(tmp_path):
    folder, heard = _new(tmp_path), []
    folder.observer = lambda what, payload: heard.append(what)
    folder.store_row(SPECS[0], _row(SPECS[0], "oom"))
    assert folder.stored(SPECS[0].point_id) and not folder.stored(SPECS[1].point_id)
    assert folder.blocked_by(SPECS[1]) == SPECS[0]  # same sweep, larger n
    assert folder.blocked_by(PointSpec(layer="lstm", n=16, d=4)) is None  # another layer
    assert folder.blocked_by(PointSpec(layer="conv", n=16, d=4, k=3, mode="train")) is None  # another mode
    with pytest.raises(RunFailed, match=f"point {SPECS[0].point_id} .* is already stored"):
        folder.store_row(SPECS[0], _row(SPECS[0]))
    folder.note_start(SPECS[1].point_id, 0, 0)
    folder.store_record({"point_id": SPECS[1].point_id, "attempt": 0, "pass": 0})
    assert heard == ["row", "started", "record"]
    stored = F.read_points(folder.path)
    assert list(stored["point_id"]) == [SPECS[0].point_id] and stored["finished_utc"].notna().all()
    folder.release()


def _older_folder(tmp_path, header: list[str]):
    """A folder as an older version left it: no `schema`, points.csv in its own columns."""
    run = tmp_path / "old"
    run.mkdir()
    meta = {"run_id": "old", "kind": "run", "status": "running", "started_utc": "2026-01-01T00:00:00+00:00"}
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "points.csv").write_text(",".join(header) + "\n")
    return run


def test_an_older_folder_is_read_and_appended_to_in_its_own_columns(tmp_path):
    header = [c for c in schema.names() if c not in ("mode", "node", "mem_saved_bytes")]
    run = _older_folder(tmp_path, header)
    assert formats.schema_of(F.read_meta(run), run) == 1
    folder = F.RunFolder(run)
    assert folder.point_columns() == header
    folder.store_row(SPECS[0], _row(SPECS[0]) | {"time_median_s": 1e-3})
    with open(run / "points.csv") as f:
        assert f.readline().rstrip("\n").split(",") == header
    with pytest.raises(RunFailed, match=r"stored without the columns \['mode'\]"):
        folder.store_row(SPECS[1], _row(SPECS[1]) | {"mode": "train"})
    points = F.read_points(run)
    assert list(points["mode"]) == ["inference"]  # rows from before the column measured inference


def test_older_rows_without_an_id_are_known_by_their_spec(tmp_path):
    header = ["layer", "device", "dtype", "batch", "n", "d", "status", "point_id", "finished_utc"]
    run = _older_folder(tmp_path, header)
    lines = [
        "conv,cpu,float32,1,8,4,ok,,2026-01-01T00:00:01+00:00",
        "conv,cpu,float32,1,16,4,ok,,2026-01-01T00:00:02+00:00",
    ]
    (run / "points.csv").write_text(",".join(header) + "\n" + "\n".join(lines) + "\n")
    assert list(F.read_points(run)["n"]) == [8, 16]
    (run / "points.csv").write_text((run / "points.csv").read_text() + lines[0] + "\n")
    with pytest.raises(
        RunFailed,
        match=r"line 2: conv on cpu float32, batch=1 n=8 d=4, without point_id, stored twice \(as at line 4\)",
    ):
        F.read_points(run)


def test_older_pass_records_and_start_lines_are_read(tmp_path):
    assert formats.visit_s({"stats": {"data": [0.1, 0.2], "iterations": 3}}) == pytest.approx((0.1 + 0.2) * 3)
    assert formats.visit_s({"visit_s": 1.5, "stats": {"data": [0.1]}}) == 1.5
    folder = _new(tmp_path)
    pid = SPECS[0].point_id
    # two older processes (known by their pid alone), each last seen starting a pass of the point never stored
    lines = [
        {"point_id": pid, "attempt": 0, "pass": 0, "pid": 11},
        {"point_id": pid, "attempt": 0, "pass": 0, "pid": 12},
    ]
    (folder.path / "started.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    folder.read_stored(SPECS)
    assert folder.deaths(pid) == 2 == deaths.KILLED_AFTER_WORKER and folder.deaths(SPECS[1].point_id) == 0
    (folder.path / "timings.jsonl").write_text(json.dumps({"point_id": pid, "stats": {"data": [1.0]}}) + "\n")
    with pytest.raises(RunFailed, match="timings.jsonl: written by an older version without interleaved passes"):
        F.RunFolder(folder.path).read_stored(SPECS)
    folder.release()


def test_a_side_table_gets_a_folder_of_its_own_or_joins_a_run_never_replacing(tmp_path):
    table = pd.DataFrame({"layer": ["conv"], "n": [8]})
    path = F.store_side_table("paths", table, out=tmp_path / "p", command=["paths"], preset=None)
    meta = json.loads((path.parent / "meta.json").read_text())
    assert (meta["kind"], meta["status"], meta["schema"]) == ("paths", "finished", formats.SCHEMA)
    assert F.store_side_table("claims", table, out=path.parent, command=["claims"], preset=None).name == "claims.csv"
    with pytest.raises(BadInput, match="already has paths.csv"):
        F.store_side_table("paths", table, out=path.parent, command=["paths"], preset=None)
