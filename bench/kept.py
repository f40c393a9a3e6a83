"""Machine constants measured by one command and kept for the next (bench.cost): the same estimate twice."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock

KEPT_S = 24 * 3600


def cache_file() -> Path:
    """`SEQBENCH_CACHE` (a folder), else the user's cache folder (XDG_CACHE_HOME, ~/.cache) / seqbench."""
    folder = os.environ.get("SEQBENCH_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "seqbench"
    return Path(folder).expanduser() / "costs.json"


def _namespace() -> str:
    return f"{platform.node()}|{platform.processor() or platform.machine()}|torch {torch.__version__}|" + (
        f"{torch.get_num_threads()} threads"
    )


def kept(key: str, measure: Callable[[], object]) -> object:
    """The value kept for `key` on this machine within KEPT_S, else `measure()`, kept (JSON) for the next command."""
    path, name = cache_file(), f"{_namespace()}|{key}"
    try:
        entry = json.loads(path.read_text()).get(name)
    except (OSError, ValueError):
        entry = None
    if isinstance(entry, dict) and time.time() - entry.get("utc", 0) < KEPT_S:
        return entry["value"]
    value = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=10):
            try:
                entries = json.loads(path.read_text())
            except (OSError, ValueError):
                entries = {}
            entries[name] = {"value": value, "utc": time.time()}
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(entries))
            temporary.replace(path)
    except OSError:  # a read-only home: measured again next time
        pass
    return value
