"""Provenance of a run: the machine, its devices, the software and the commit, returned as dicts. Not pure in
one respect: `commit_info` runs git in the harness's repository by changing the working directory for the
call (pytest-benchmark's get_commit_info reads the cwd) and restores it in a `finally`."""

from __future__ import annotations

import platform
import sys
from contextlib import chdir
from pathlib import Path

import psutil
import torch
from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info
from pytest_benchmark.utils import get_commit_info

REPO_ROOT = Path(__file__).resolve().parent.parent


def commit_info() -> dict:
    """pytest-benchmark's commit_info for the harness's own repository, not the caller's cwd. Not pure:
    pytest-benchmark asks git in the working directory, so this changes into the repository for the call
    and back (contextlib.chdir), which a thread running beside it would see."""
    with chdir(REPO_ROOT):
        return get_commit_info("seqlayer-bench")


def machine_info() -> dict:
    """pytest-benchmark's machine_info (platform, CPU brand and flags via py-cpuinfo)."""
    return pytest_benchmark_generate_machine_info()


def cpu_model(info: dict | None = None) -> str:
    cpu = (info or {}).get("cpu", {})
    return cpu.get("brand_raw") or platform.processor() or platform.machine()


def cuda_available() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def devices(cpu_name: str) -> list[dict]:
    """Name and memory of each device a run may use."""
    out = [{"device": "cpu", "name": cpu_name, "memory_bytes": psutil.virtual_memory().total}]
    if cuda_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append(
                {
                    "device": f"cuda:{i}",
                    "name": props.name,
                    "memory_bytes": props.total_memory,
                    "capability": f"{props.major}.{props.minor}",
                }
            )
    return out


def run_meta(threads: int) -> dict:
    """The machine and software fields of meta.json (the interface's list), plus the raw
    pytest-benchmark machine_info and commit_info they come from."""
    info = machine_info()
    commit = commit_info()
    model = cpu_model(info)
    return {
        "git_commit": commit.get("id"),
        "git_dirty": bool(commit.get("dirty")),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_model": model,
        "cpu_cores": psutil.cpu_count(logical=False) or psutil.cpu_count(),
        "cpu_logical_cores": psutil.cpu_count(),
        "threads": threads,
        "hostname": platform.node(),
        "machine": f"{platform.node()} ({model}, {psutil.cpu_count()} logical cores)",
        "devices": devices(model),
        "machine_info": info,
        "commit_info": commit,
    }
