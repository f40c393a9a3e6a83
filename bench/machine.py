"""Provenance of a run: the machine, its devices, the software and the commit, returned as dicts."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from contextlib import chdir
from pathlib import Path

import psutil
import torch

from .errors import BadInput

REPO_ROOT = Path(__file__).resolve().parent.parent


# What the harness writes into its own tree: regenerating them is not a change of the code that measures.
GENERATED_PATHS = ("reports", "results")


def commit_info() -> dict:
    """pytest-benchmark's commit_info, `dirty` only outside GENERATED_PATHS; not pure: it asks git in the cwd."""
    with chdir(REPO_ROOT):
        from pytest_benchmark.utils import get_commit_info

        info = get_commit_info("seqlayer-bench")
        if info.get("id") is not None:
            info["dirty"] = _code_dirty()
        return info


def _code_dirty() -> bool:
    excluded = [f":(exclude){path}" for path in GENERATED_PATHS]
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *excluded],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return True  # git could not say: not provably clean
    return bool(out.strip())


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def short_model(model: str) -> str:
    """Without trademarks and clock: "AMD EPYC 7763 64-Core Processor" -> "AMD EPYC 7763"."""
    text = re.sub(r"\((R|TM|tm|r)\)", "", model)
    text = re.sub(r"@.*$", "", text)  # "@ 2.20GHz"
    text = re.sub(r"\b(CPU|Processor|\d+-Core)\b", "", text)
    return " ".join(text.split()) or model


def gpu_model(meta: dict) -> str | None:
    """The first GPU a meta.json lists, shortened ("NVIDIA H100 80GB HBM3" -> "H100"); None without one."""
    for entry in meta.get("devices") or ():
        if isinstance(entry, dict) and str(entry.get("device", "")).startswith("cuda") and entry.get("name"):
            words = str(entry["name"]).replace("NVIDIA", "").split()
            return words[0] if words else None
    return None


def machine_identity(meta: dict) -> tuple[str, str]:
    """(id, label) of a meta.json's machine: "intel-xeon-2c-vm", "Intel Xeon, 2 cores (vm)"; its GPU first, if any."""
    model = short_model(meta.get("cpu_model") or "unknown CPU")
    cores = meta.get("cpu_cores")
    host = meta.get("hostname") or "unknown host"
    label = f"{model}, {cores} cores ({host})" if cores else f"{model} ({host})"
    ident = f"{model}-{cores}c-{host}" if cores else f"{model}-{host}"
    gpu = gpu_model(meta)
    if gpu:
        return _slug(f"{gpu}-{ident}"), f"{gpu} on {label}"
    return _slug(ident), label


def node_facts(meta: dict, node) -> dict | None:
    """The meta.json `nodes` entry (bench.cluster) of the Ray node a row names; None for none or an unlisted one."""
    nodes = meta.get("nodes")
    if not isinstance(nodes, dict) or not isinstance(node, str) or not node:
        return None
    facts = nodes.get(node)
    return facts if isinstance(facts, dict) else None


def machine_info() -> dict:
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

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
                    "multiprocessors": props.multi_processor_count,
                    "l2_cache_bytes": getattr(props, "L2_cache_size", None),
                    # a float32 convolution may run in TF32, at several times a float32 matmul's rate
                    "float32_matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "float32_conv_tf32": torch.backends.cudnn.allow_tf32,
                }
            )
    return out


def _identity_fields(info: dict) -> dict:
    return {
        "cpu_model": cpu_model(info),
        "cpu_cores": psutil.cpu_count(logical=False) or psutil.cpu_count(),
        "hostname": platform.node(),
    }


def this_machine() -> tuple[str, str]:
    info = machine_info()
    identity = _identity_fields(info)
    return machine_identity(dict(identity, devices=devices(identity["cpu_model"])))


# The commit of the files, said by the caller where a copied checkout's .git is older than them
COMMIT_VARIABLE = "SEQBENCH_GIT_COMMIT"
COMMIT_ID = re.compile(r"[0-9a-f]{7,64}")


def given_commit() -> str | None:
    """SEQBENCH_GIT_COMMIT where set, a commit id only (it goes into every citation); BadInput otherwise."""
    text = os.environ.get(COMMIT_VARIABLE, "")
    if not text:
        return None
    if not COMMIT_ID.fullmatch(text):
        shown = repr(text[:60]) + ("…" if len(text) > 60 else "")
        raise BadInput(f"{COMMIT_VARIABLE}={shown}: not a commit id (7 to 64 lowercase hex digits, as git prints)")
    return text


def run_meta(threads: int) -> dict:
    """The machine and software fields of meta.json, with pytest-benchmark's machine_info and commit_info."""
    info = machine_info()
    commit = commit_info()
    given = given_commit()
    if given:
        commit = dict(commit, id=given, dirty=False)
    identity = _identity_fields(info)
    model = identity["cpu_model"]
    return {
        "git_commit": commit.get("id"),
        "git_dirty": bool(commit.get("dirty")),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        **identity,
        "cpu_logical_cores": psutil.cpu_count(),
        "threads": threads,
        "machine": f"{platform.node()} ({model}, {psutil.cpu_count()} logical cores)",
        "devices": devices(model),
        "machine_info": info,
        "commit_info": commit,
    }
