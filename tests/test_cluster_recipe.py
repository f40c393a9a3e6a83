"""docs/cluster.md's recipe as a user types it, with Ray's token authentication: a head (`ray start --head`) and a
second node (`ray start --address`) started as processes of their own, both with the cluster's token, and the
driver (`python -m bench run --ray HOST:PORT`) in a third. A node stopped mid-sweep loses and doubles nothing;
a driver without the token, or with another, is told so in one line."""

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.spec import PointSpec

ROOT = Path(__file__).resolve().parent.parent
RAY = Path(sys.executable).with_name("ray")
# 4 layer sweeps, long enough (a few seconds each) that the second node is at work when it is stopped
PLAN = ["run", "--layers", "conv,rnn,gru,lstm", "--n", "64,128,256,512", "--d", "16", "--device", "cpu"]
PLAN += ["--rounds", "10", "--target-time", "0.2", "--passes", "3", "--no-progress", "--yes"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(*args: str, env: dict) -> subprocess.Popen:
    """`ray start ... --block` in a session of its own: its process group is the node, stopped by the test."""
    return subprocess.Popen(
        [str(RAY), "start", "--block", "--num-cpus=1", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(node: subprocess.Popen) -> None:
    """The node's every process (its raylet, workers, on the head the GCS), by its process group."""
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.wait(timeout=30)


def _driver(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.fixture(scope="module")
def token_cluster():
    """A head and a second node of one CPU each, token authentication on: (address, the environment with the
    token, the second node's process)."""
    pytest.importorskip("ray", reason="Ray is not installed: make test installs it")
    home = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # Ray's unix sockets want a short path
    env = os.environ | {"HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    port = _free_port()
    head = _node(
        "--head",
        "--include-dashboard=false",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={home}/t",
        env=env,
    )
    second = None
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while subprocess.run([str(RAY), "status", f"--address={address}"], env=env, capture_output=True).returncode:
            assert time.monotonic() < deadline and head.poll() is None, "the head did not start"
            time.sleep(1)
        second = _node(f"--address={address}", env=env)
        while not (joined := _nodes_joined(address, env)):
            assert time.monotonic() < deadline and second.poll() is None, "the second node did not join"
            time.sleep(1)
        yield address, env, second, joined[0]
    finally:
        for node in (second, head):
            if node is not None:
                _stop(node)


def _nodes_joined(address: str, env: dict) -> list[str]:
    """The ids of the nodes other than the head, once two are alive."""
    code = (
        f"import ray; ray.init(address={address!r}, logging_level='ERROR'); nodes = [n for n in ray.nodes() if n['Alive']]\n"
        "if len(nodes) == 2: print(*(n['NodeID'] for n in nodes if 'node:__internal_head__' not in n['Resources']))"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.split()


@pytest.mark.slow
def test_a_driver_without_the_clusters_token_or_with_another_is_told_in_one_line(token_cluster, tmp_path):
    address, env, _, _ = token_cluster
    # Ray tries to reach the head 20 times, a second apart, before it gives up: 3 times here
    none = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")} | {"RAY_NUM_REDIS_GET_RETRIES": "3"}
    another = none | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    drivers = {
        name: _driver(*PLAN, "--ray", address, "--out", str(tmp_path / name), env=wrong)
        for name, wrong in (("none", none), ("another", another))
    }
    for name, driver in drivers.items():
        _, err = driver.communicate(timeout=180)
        lines = err.decode().strip().splitlines()
        assert driver.returncode == 2 and len(lines) == 1, (name, lines)
        assert lines[0].startswith(f"error: --ray {address}: the cluster asks for its token"), (name, lines)
        assert "RAY_AUTH_MODE" in lines[0]


@pytest.mark.slow
def test_a_node_stopped_mid_sweep_loses_and_doubles_nothing(token_cluster, tmp_path):
    address, env, second, second_id = token_cluster
    out = tmp_path / "run"
    driver = _driver(*PLAN, "--ray", address, "--out", str(out), env=env)
    said = []  # the driver's lines; the second node's say "[HOST ID] measuring SWEEP" and "[HOST ID] stored SWEEP"
    reader = threading.Thread(target=lambda: said.extend(line.decode() for line in driver.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while not _at_work(said, second_id):  # stopped while it measures a sweep, whatever the load
        assert driver.poll() is None and time.monotonic() < deadline, "".join(said)
        time.sleep(0.05)
    _stop(second)
    assert driver.wait(timeout=300) == 0, "".join(said)
    reader.join(timeout=30)
    points = pd.read_csv(out / "points.csv")
    planned = sorted(PointSpec(**s).point_id for s in json.loads((out / "plan.json").read_text())["specs"])
    assert sorted(points["point_id"]) == planned  # each point once
    assert (points["status"] == "ok").all(), points[["layer", "n", "status", "error"]]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "finished" and len(meta["nodes"]) == 2  # both nodes took part
    assert meta.get("worker_deaths"), "the stopped node held no sweep: nothing was measured again"


def _at_work(said: list[str], node_id: str) -> bool:
    """The node's last word in the driver's lines was that it measures a sweep, not that it stored one."""
    words = [line.split()[2] for line in list(said) if f" {node_id[:8]}] " in line and len(line.split()) > 2]
    words = [w for w in words if w in ("measuring", "stored")]
    return bool(words) and words[-1] == "measuring"
