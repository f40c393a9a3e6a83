"""Durable files: whole-row appends, cut-off lines, atomic JSON; run folders never overwritten."""

import pytest

from bench import folder, schema, storage
from bench.errors import BadInput, RunFailed


def test_rows_append_with_one_header(tmp_path):
    path = tmp_path / "t.csv"
    storage.append_row(path, {"a": 1, "b": "x,y"}, ["a", "b"])
    storage.append_row(path, {"a": 2}, ["a", "b"])
    assert path.read_text() == 'a,b\n1,"x,y"\n2,\n'
    df = storage.read_csv(path)
    assert list(df["a"]) == [1, 2]


def test_unknown_column_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not in the schema"):
        storage.append_row(tmp_path / "t.csv", {"zz": 1}, ["a"])


def test_a_cut_off_last_line_is_ignored_then_repaired(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n3,")  # a writer killed mid-line
    assert list(storage.read_csv(path)["a"]) == [1]
    storage.append_row(path, {"a": 5, "b": 6}, ["a", "b"])
    assert path.read_text() == "a,b\n1,2\n5,6\n"


def test_damaged_csv_is_a_clear_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n3,4,5,6\n"unterminated\n')
    with pytest.raises(RunFailed, match="damaged"):
        storage.read_csv(path)


def test_json_is_written_atomically_and_damage_is_named(tmp_path):
    path = tmp_path / "m.json"
    storage.write_json(path, {"a": 1})
    assert storage.read_json(path) == {"a": 1} and not (tmp_path / "m.json.tmp").exists()
    path.write_text("{bad")
    with pytest.raises(RunFailed, match="m.json: damaged"):
        storage.read_json(path)


def test_run_folders_are_never_reused(tmp_path):
    a = folder.new_run_dir(tmp_path, "r")
    b = folder.new_run_dir(tmp_path, "r")
    assert a.name == "r" and b.name == "r-2"


def test_out_dir_must_be_new_or_empty(tmp_path):
    folder.claim_out_dir(tmp_path / "new")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "points.csv").write_text("x")
    with pytest.raises(BadInput, match="never overwritten"):
        folder.claim_out_dir(tmp_path / "full")


def test_points_csv_begins_with_a_points_identity():
    from bench.spec import IDENTITY  # noqa: PLC0415

    identity = [c.name for c in schema.IDENTITY]
    assert sorted(identity) == sorted(IDENTITY)
    assert schema.names()[: len(IDENTITY)] == identity and schema.names()[-1] == "finished_utc"


def test_a_write_interrupted_half_way_leaves_no_trace(tmp_path, monkeypatch):
    # Ctrl-C while `run` wrote plan.json left plan.json.tmp: the folder was then neither begun nor empty, and
    # `--resume` refused it as "not a run folder"
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(storage.json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        storage.write_json(tmp_path / "plan.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []
    assert folder.unbegun(tmp_path)
