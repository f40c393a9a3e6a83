"""A run's machine and commit: the identity reports group by, and a `git_dirty` that regenerated reports and
stored runs do not set."""

import subprocess
from contextlib import chdir

import pytest

from bench import machine
from bench.cli import main


@pytest.mark.parametrize(
    "meta, expected",
    [
        (
            {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_cores": 2, "hostname": "vm"},
            ("intel-xeon-2c-vm", "Intel Xeon, 2 cores (vm)"),
        ),
        (
            {"cpu_model": "AMD EPYC 7763 64-Core Processor", "cpu_cores": 64, "hostname": "node-7.cluster"},
            ("amd-epyc-7763-64c-node-7-cluster", "AMD EPYC 7763, 64 cores (node-7.cluster)"),
        ),
        (
            {"cpu_model": "Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz", "cpu_cores": 4, "hostname": "laptop"},
            ("intel-core-i7-8650u-4c-laptop", "Intel Core i7-8650U, 4 cores (laptop)"),
        ),
        ({}, ("unknown-unknown-host", "unknown (unknown host)")),
        (
            {
                "cpu_model": "Intel(R) Xeon(R) Processor",
                "cpu_cores": 16,
                "hostname": "vm",
                "devices": [{"device": "cpu", "name": "x"}, {"device": "cuda:0", "name": "NVIDIA H200"}],
            },
            ("h200-intel-xeon-16c-vm", "H200 on Intel Xeon, 16 cores (vm)"),
        ),
    ],
)
def test_machine_identity(meta, expected):
    assert machine.machine_identity(meta) == expected


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_a_regenerated_report_or_a_stored_run_leaves_the_code_clean(tmp_path):
    repo = tmp_path / "repo"
    for path in ("bench/run.py", "reports/report.md", "results/reference/m/r/meta.json"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("v1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    with chdir(repo):
        assert not machine._code_dirty()
        (repo / "reports/report.md").write_text("v2\n")
        (repo / "results/reference/m/r/meta.json").write_text("v2\n")
        assert not machine._code_dirty()
        (repo / "bench/run.py").write_text("v2\n")
        assert machine._code_dirty()


@pytest.mark.parametrize("given", ["abc\ndef", "<b>x</b>", "x" * 100_000, "HEAD", "12345"])
def test_a_given_commit_must_be_a_commit_id(monkeypatch, capsys, tmp_path, given):
    """SEQBENCH_GIT_COMMIT goes into meta.json, numbers.json and every citation: a commit id, or refused first."""
    monkeypatch.setenv(machine.COMMIT_VARIABLE, given)
    out = tmp_path / "run"
    assert main(["run", "--layers", "conv", "--n", "64", "--d", "8", "--out", str(out)]) == 2
    assert machine.COMMIT_VARIABLE in capsys.readouterr().err and not out.exists()


def test_a_given_commit_id_is_stored(monkeypatch):
    monkeypatch.setenv(machine.COMMIT_VARIABLE, "6d363c974ca08c13526f98523478662fa006e9e0")
    assert machine.run_meta(1)["git_commit"] == "6d363c974ca08c13526f98523478662fa006e9e0"
    monkeypatch.setenv(machine.COMMIT_VARIABLE, "")  # empty: unset
    assert machine.given_commit() is None
