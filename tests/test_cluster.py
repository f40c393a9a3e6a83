"""Sweeps on a Ray cluster (bench.cluster). On a local cluster of two single-CPU nodes (ray.cluster_utils.Cluster,
one for the module): a 20-point plan spreads over both nodes, every point stored once, each row naming its node
and device, meta.json every node with its compute peak; a node killed mid-sweep loses and doubles nothing; a
driver killed with SIGKILL is finished by --resume, on Ray or here. Without a cluster: the placement, the chunks,
the report's machine per row, and what --ray says when Ray is missing or nobody answers."""

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from cluster_stub import FAKE_PEAK

import bench.run
from bench import cluster as C
from bench import ray_phase, ray_worker
from bench.cli import main
from bench.folder import read_timing_records
from bench.report.build import assign_sources, build_report
from bench.report.roofline import point_peaks
from bench.spec import PointSpec

ROOT = Path(__file__).resolve().parent.parent
# 4 layer sweeps of 5 points: 4 chunks, two a node
PLAN = ["run", "--layers", "conv,rnn,gru,lstm", "--n", "8,12,16,24,32", "--d", "4", "--device", "cpu"]
PLAN += ["--rounds", "3", "--target-time", "0.005", "--passes", "2", "--no-progress", "--yes", "--no-extend"]
LAYERS = ("conv", "rnn", "gru", "lstm")


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each; the in-process sweeps' workers measure a stand-in compute peak (cluster_stub)."""
    ray = pytest.importorskip("ray", reason=f"Ray is not installed: {C.INSTALL_HINT} (make test installs it)")
    from ray.cluster_utils import Cluster  # noqa: PLC0415

    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    local.add_node(num_cpus=1)
    local.wait_for_nodes()
    with pytest.MonkeyPatch.context() as patch:
        # the hook runs before the driver's folder is on the worker's path: this checkout's bench, and the stub
        path = f"{ROOT}{os.pathsep}{ROOT / 'tests'}{os.pathsep}${{PYTHONPATH}}"
        stub = {"env_vars": {"PYTHONPATH": path}, "worker_process_setup_hook": "cluster_stub.fake_peak"}
        patch.setattr(C, "RUNTIME_ENV", stub)
        yield local
    if ray.is_initialized():
        ray.shutdown()
    local.shutdown()


@pytest.fixture(scope="module")
def swept(cluster, tmp_path_factory):
    """The plan swept on both nodes: the run folder."""
    out = tmp_path_factory.mktemp("ray") / "run"
    assert main([*PLAN, "--ray", cluster.address, "--out", str(out)]) == 0
    return out


def _plan_ids(run_dir: Path) -> list[str]:
    return sorted(PointSpec(**s).point_id for s in json.loads((run_dir / "plan.json").read_text())["specs"])


def _node_ids(cluster) -> set[str]:
    return {node.node_id for node in [cluster.head_node, *cluster.worker_nodes]}


def _each_pass_once(run_dir: Path) -> list[dict]:
    records = read_timing_records(run_dir)
    keys = [(r["point_id"], r["attempt"], r["pass"]) for r in records]
    assert len(keys) == len(set(keys))
    assert {(pid, p) for pid, a, p in keys if a == 0} == {(pid, p) for pid in _plan_ids(run_dir) for p in (0, 1)}
    return records


# ------------------------------------------------------------------------------------- on a cluster
@pytest.mark.slow
def test_a_plan_spreads_over_both_nodes_each_point_once_each_row_naming_its_node(swept, cluster, tmp_path):
    df = pd.read_csv(swept / "points.csv")
    assert sorted(df["point_id"]) == _plan_ids(swept) and len(df) == 20  # every point, once
    assert (df["status"] == "ok").all()
    meta = json.loads((swept / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["ray"]["address"] == cluster.address
    assert set(df["node"]) == set(meta["nodes"]) == _node_ids(cluster)  # both nodes measured, both listed
    for node, rows in df.groupby("node"):
        facts = meta["nodes"][node]
        assert set(rows["host"]) == {platform.node()} == {facts["host"]}
        assert set(rows["device_name"]) == {facts["cpu_model"]} and (rows["device_memory_bytes"] > 0).all()
        assert set(facts["compute_peak"]["cpu"]["measured"]) == {"start", "end"}  # each node's own peak
        assert sum(c["points"] for c in facts["chunks"]) == len(rows)
        assert (rows["threads"] == 1).all()  # at most the one CPU the worker holds
    for layer in LAYERS:  # a chunk is one layer's sweep, measured whole on one node
        assert df.loc[df["layer"] == layer, "node"].nunique() == 1
    assert list(meta["machines"]) == [meta["nodes"][df["node"][0]]["machine_id"]]
    records = _each_pass_once(swept)
    assert all(r["node"] == df.set_index("point_id").loc[r["point_id"], "node"] for r in records)
    # the report reads the folder like any other
    written = build_report([swept], tmp_path / "report")
    assert written["points"] == 20 and written["runs"] == 1
    assert "Measured on Ray" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.slow
def test_the_report_takes_each_rows_machine_from_its_node(swept, tmp_path):
    """Two nodes of two machines (one node's host renamed): two sources, each row's peak its own machine's."""
    copy = tmp_path / "run"
    shutil.copytree(swept, copy)
    meta = json.loads((copy / "meta.json").read_text())
    other = sorted(meta["nodes"])[1]
    meta["nodes"][other].update(hostname="other-host", host="other-host")
    meta["nodes"][other]["compute_peak"]["cpu"]["flops_per_s"] = 1.0
    (copy / "meta.json").write_text(json.dumps(meta))
    points = pd.read_csv(copy / "points.csv").assign(run_id="r")
    runs = {"r": meta}
    sources, labels = assign_sources(points, runs)
    moved = points["node"] == other
    assert sources[moved].str.endswith("-other-host.cpu").all() and not sources[~moved].str.contains("other").any()
    assert sources.nunique() == 2 and all("(other-host)" in labels[s] for s in sources[moved])
    peaks = point_peaks(points, runs)
    assert (peaks[moved] == 1.0).all() and (peaks[~moved] > 1e6).all()


@pytest.mark.slow
def test_a_node_killed_mid_sweep_loses_and_doubles_nothing(cluster, tmp_path, monkeypatch):
    victim = next(iter(cluster.worker_nodes))
    handle, killed = ray_phase.Phase._handle, []

    def handle_then_kill(phase, worker, what, payload):
        handle(phase, worker, what, payload)
        if what == "started" and worker.placement.node == victim.node_id and not killed:
            killed.append(payload["point_id"])  # its first point's first pass: mid-chunk, for sure
            os.kill(worker.facts["worker"]["pid"], signal.SIGKILL)  # as a machine fails: its worker at once,
            cluster.remove_node(victim, allow_graceful=False)  # and its node (raylet, object store)

    monkeypatch.setattr(ray_phase.Phase, "_handle", handle_then_kill)
    out = tmp_path / "run"
    try:
        assert main([*PLAN, "--ray", cluster.address, "--out", str(out)]) == 0
    finally:
        cluster.add_node(num_cpus=1)  # for the tests after this one
    assert killed
    df = pd.read_csv(out / "points.csv")
    assert sorted(df["point_id"]) == _plan_ids(out) and (df["status"] == "ok").all()  # none lost, none twice
    assert set(df["node"]) == {cluster.head_node.node_id}  # the victim's chunk was measured again, elsewhere
    _each_pass_once(out)
    deaths = json.loads((out / "meta.json").read_text())["worker_deaths"]
    assert [(d["node"], d["given_up"]) for d in deaths] == [(victim.node_id, [])]
    assert df.set_index("point_id").loc[killed[0], "layer"] in deaths[0]["chunk"]


@pytest.mark.slow
def test_a_driver_killed_with_sigkill_is_resumed_on_ray_each_point_once(cluster, tmp_path):
    out = tmp_path / "run"
    code = (  # `python -m bench run ...`, its workers with the stand-in peak as in this process
        "import sys\nimport bench.cluster\nfrom bench.cli import main\n"
        f"bench.cluster.RUNTIME_ENV = {C.RUNTIME_ENV!r}\n"
        f"sys.exit(main({[*PLAN, '--ray', cluster.address, '--out', str(out)]!r}))\n"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    points = out / "points.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:  # killed once a first chunk is stored
        if points.exists() and points.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = points.read_text()
    before = before[: before.rfind("\n") + 1]
    assert 2 <= before.count("\n") <= 20  # the header, and not the whole plan
    assert json.loads((out / "meta.json").read_text())["status"] == "running"  # killed: no chance to say so
    assert main(["run", "--resume", str(out), "--ray", cluster.address, "--no-progress"]) == 0
    df = pd.read_csv(points)
    assert sorted(df["point_id"]) == _plan_ids(out) and (df["status"] == "ok").all()
    assert points.read_text().startswith(before)  # what was stored is kept as it was
    assert df["node"].notna().all()
    _each_pass_once(out)
    assert json.loads((out / "meta.json").read_text())["status"] == "finished"


@pytest.mark.slow
def test_a_cluster_run_is_finished_here_by_a_resume_without_ray(swept, tmp_path, monkeypatch):
    """What a driver killed after three chunks leaves (the fourth chunk's rows and passes not stored), resumed
    in this process: the rest measured here, rows without a node, every point once."""
    copy = tmp_path / "run"
    shutil.copytree(swept, copy)
    df = pd.read_csv(copy / "points.csv")
    lost = set(df.loc[df["layer"] == "lstm", "point_id"])
    df[~df["point_id"].isin(lost)].to_csv(copy / "points.csv", index=False)
    kept = [r for r in read_timing_records(copy) if r["point_id"] not in lost]
    (copy / "timings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (copy / "pytest-benchmark.json").unlink()
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps(meta | {"status": "running"}))
    monkeypatch.setattr(bench.peak, "compute_peak", lambda device, dtype: dict(FAKE_PEAK, dtype=str(dtype)))
    assert main(["run", "--resume", str(copy), "--no-progress"]) == 0
    after = pd.read_csv(copy / "points.csv")
    assert sorted(after["point_id"]) == _plan_ids(copy)
    assert after.loc[after["point_id"].isin(lost), "node"].isna().all()
    assert after.loc[~after["point_id"].isin(lost), "node"].notna().all()
    _each_pass_once(copy)


# --------------------------------------------------------------------------------- without a cluster
def test_without_ray_the_option_is_bad_input_with_a_one_line_hint(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main([*PLAN, "--ray", "local", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ray" in err[0] and 'pip install -e ".[ray]"' in err[0]
    assert not (tmp_path / "run").exists()


def test_exclusive_node_without_ray_is_bad_input(capsys):
    assert main([*PLAN, "--exclusive-node"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--exclusive-node" in err[0] and "--ray" in err[0]


@pytest.mark.parametrize("address", ["127.0.0.1:1", "nohost"])
def test_an_address_nobody_answers_is_bad_input_at_once(capsys, address):
    pytest.importorskip("ray")
    started = time.monotonic()
    assert main([*PLAN, "--ray", address]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--ray {address}" in err[0] and time.monotonic() - started < C.CONNECT_TIMEOUT_S + 2


def _node(node_id: str, cpus: float, gpus: int = 0, alive: bool = True) -> dict:
    resources = {"CPU": cpus, "memory": 1e9} | ({"GPU": gpus} if gpus else {})
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": f"10.0.0.{len(node_id)}", "Resources": resources}


NODES = [_node("cpu-node", 8), _node("gpu-node", 16, gpus=2), _node("dead", 4, alive=False)]


@pytest.mark.parametrize(
    "device,exclusive,expected",
    [
        ("cpu", False, [("cpu-node", 8, 0), ("gpu-node", 16, 0)]),  # all of a node's CPUs, every node
        ("cuda", False, [("gpu-node", 8, 1), ("gpu-node", 8, 1)]),  # one GPU and its share of the CPUs
        ("cuda", True, [("gpu-node", 16, 2)]),  # the whole node
    ],
)
def test_placement_holds_a_nodes_cpus_or_one_gpu_with_its_share(device, exclusive, expected):
    got = ray_worker.placements(NODES, device, exclusive_node=exclusive)
    assert [(p.node, p.cpus, p.gpus) for p in got] == expected


def test_chunks_are_layer_sweeps_in_plan_order_largest_first():
    specs = [PointSpec(layer="conv", n=n, d=4, k=3) for n in (8, 16)]
    specs += [PointSpec(layer="lstm", n=n, d=d) for d in (4, 8) for n in (8, 16)]
    specs += [PointSpec(layer="conv", n=8, d=4, k=3, mode="train")]
    got = ray_worker.chunks(specs)
    assert [[(s.layer, s.mode, s.n, s.d) for s in c] for c in got] == [
        [
            ("lstm", "inference", 8, 4),
            ("lstm", "inference", 16, 4),
            ("lstm", "inference", 8, 8),
            ("lstm", "inference", 16, 8),
        ],
        [("conv", "inference", 8, 4), ("conv", "inference", 16, 4)],
        [("conv", "train", 8, 4)],
    ]


def test_a_death_reason_is_one_line_without_the_actors_name():
    text = (
        "The actor died unexpectedly before finishing this task.\n\tclass_name: NodeWorker\n\tactor_id: ab12\n"
        "\tpid: 7\n\tnamespace: x\n\tip: 10.0.0.1\nThe actor died because its node has died. Node Id: 0a1b\n"
    )
    assert ray_worker.death_reason(RuntimeError(text)) == (
        "The actor died unexpectedly before finishing this task. The actor died because its node has died. "
        "Node Id: 0a1b"
    )


class _FakeRay:
    """What a Phase asks of Ray when a death is charged: nothing (no worker is placed or killed here)."""

    def remote(self, cls):
        return cls


def test_a_point_whose_worker_dies_twice_is_killed_and_its_larger_siblings_skipped(tmp_path, monkeypatch):
    from tqdm import tqdm  # noqa: PLC0415

    from bench.run import Run  # noqa: PLC0415

    monkeypatch.setattr(bench.peak, "compute_peak", lambda device, dtype: dict(FAKE_PEAK, dtype=str(dtype)))
    specs = [PointSpec(layer="lstm", n=n, d=4) for n in (8, 16, 32)] + [PointSpec(layer="conv", n=32, d=4, k=3)]
    lines = []
    cluster = C.Cluster(_FakeRay(), "test", False, None, lines.append)
    run = Run.create(specs, bench.run.TimingPolicy(), out=tmp_path / "run", command=["test"], preset=None)
    run.folder.update_meta(nodes={}, machines={})
    phase = ray_phase.Phase(cluster, C.Sweep(run.folder, run.policy, 0, None), "cpu", tqdm(disable=True))
    chunk = ray_phase._Chunk(list(specs))

    def dies(node: str, running: str | None, reason: str) -> None:
        facts = {
            "node": node,
            "host": f"host-{node}",
            "devices": [{"device": "cpu", "name": "CPU X", "memory_bytes": 8}],
        }
        placement = ray_worker.Placement(node, "10.0.0.1", 1.0)
        worker = ray_phase._Worker((node, 0), placement, actor=None, facts=facts, chunk=chunk)
        worker.running = running
        phase.queue.clear()
        phase._charge(worker, reason)

    dies("a", specs[1].point_id, "its node died")
    assert list(phase.queue) == [chunk] and chunk.specs == specs and chunk.avoid == {"a"}  # retried elsewhere
    assert not (run.dir / "points.csv").exists()
    dies("b", specs[1].point_id, "killed for memory")
    # as in one process: killed, the larger point of its sweep skipped, the rest of the chunk goes on
    assert chunk.specs == [specs[0], specs[3]] and list(phase.queue) == [chunk]
    rows = pd.read_csv(run.dir / "points.csv").set_index("point_id")
    row = rows.loc[specs[1].point_id]
    assert (row["status"], row["node"], row["host"]) == ("killed", "b", "host-b")
    assert "died 2 times" in row["error"] and "its node died" in row["error"] and "killed for memory" in row["error"]
    assert "killed for memory" in (run.dir / "errors.log").read_text()
    assert rows.loc[specs[2].point_id, "status"] == "skipped" and "n=16" in rows.loc[specs[2].point_id, "error"]
    dies("a", None, "lost between passes")  # no pass running: the chunk is charged, twice
    dies("b", None, "lost again")
    rows = pd.read_csv(run.dir / "points.csv").set_index("point_id")
    assert not phase.queue and sorted(rows.index) == sorted(s.point_id for s in specs)
    assert list(rows.loc[[specs[0].point_id, specs[3].point_id], "status"]) == ["error", "error"]
    deaths = json.loads((run.dir / "meta.json").read_text())["worker_deaths"]
    assert [len(d["given_up"]) for d in deaths] == [0, 1, 0, 2]
    run.folder.release()
