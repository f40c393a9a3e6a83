"""`pip install .` gives a package that works outside the checkout: the wheel built, installed into a folder of its
own and its `seqbench` run from another folder (a run, its report, the claims' help)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_installed_package_runs_outside_the_checkout(tmp_path):
    source, wheels, site, work = (tmp_path / name for name in ("source", "wheels", "site", "work"))
    # A copy of the sources: setuptools' build/ and egg-info in the checkout would carry files of an older build
    skip = shutil.ignore_patterns(".*", "build", "*.egg-info", "results", "reports", "__pycache__", "examples", "docs")
    shutil.copytree(ROOT, source, ignore=skip)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(wheels)], check=True)
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    work.mkdir()
    # -S: no site module, so no .pth file and no editable install of the checkout; the dependencies by PYTHONPATH
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]]))
    seqbench = [sys.executable, "-S", str(site / "bin" / "seqbench")]

    def run(*args: str) -> str:
        done = subprocess.run([*seqbench, *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout + done.stderr

    where = subprocess.run(
        [sys.executable, "-S", "-c", "import bench.probes, models; print(bench.__file__, models.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT) not in where and str(site) in where  # the installed copy, not the checkout
    grid = ["--layers", "conv", "--n", "64,128", "--d", "16", "--rounds", "3", "--passes", "1"]
    run("run", *grid, "--target-time", "0.005", "--no-extend", "--no-progress", "--out", "runs/a")
    assert "report:" in run("report", "--results", "runs", "--out", "report")
    assert (work / "report" / "report.html").exists()
    assert "usage" in run("claims", "--help")
