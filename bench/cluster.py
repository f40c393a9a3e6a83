"""Sweeps on a Ray cluster (`run --ray ADDRESS|local`), one device at a time, this process the folder's one writer."""

from __future__ import annotations

import copy
import logging
import os
import re
import socket
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager

from .errors import BadInput, RunFailed
from .folder import RunFolder
from .policy import TimingPolicy
from .progress import progress_bar
from .ray_phase import Phase, Sweep
from .ray_worker import plural
from .result import skip_if_blocked
from .spec import PointSpec

INSTALL_HINT = 'pip install -e ".[ray]"'
CONNECT_TIMEOUT_S = 5.0  # the TCP check of a HOST:PORT before ray.init, which would retry for minutes
AUTH_FAILURE = r"InvalidAuthToken|Unauthenticated|AuthenticationError"
TOKEN_HINT = (
    "the cluster asks for its token, and this process has none or another (token authentication): set "
    "RAY_AUTH_MODE=token and give the head's token, its ~/.ray/auth_token copied here or RAY_AUTH_TOKEN "
    "(docs/cluster.md)"
)
RUNTIME_ENV: dict | None = None  # of the driver's job (the tests set a worker_process_setup_hook)
PLACEMENT = (
    "a CPU point's worker holds all of its node's CPUs (no two timings share a node's cores); a GPU point's "
    "worker holds one GPU and the node's CPUs over its GPUs, or the whole node with --exclusive-node; CPU and "
    "GPU points are measured one after the other"
)
ON_RAY = (  # meta.json's threads_reason of a cluster sweep begins so; the rest is the driver's own choice
    "on Ray each node chose its threads for each chunk (a row's `threads`; meta.json `nodes`, each chunk's "
    "threads_reason and load); this machine, the driver's, for a resume here"
)


def import_ray():
    try:
        import ray  # noqa: PLC0415 - optional: bench works without it
    except ImportError:
        raise BadInput(
            f"--ray: Ray is not installed in this Python ({sys.executable}); install the extra: {INSTALL_HINT}"
        ) from None
    return ray


class Cluster:
    """A connection to a Ray cluster."""

    def __init__(self, ray, address: str, exclusive_node: bool, threads: int | None, log: Callable[[str], None]):
        self.ray, self.address, self.exclusive_node, self.threads, self.log = ray, address, exclusive_node, threads, log

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        exclusive_node: bool = False,
        threads: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> Cluster:
        """Connect to `auto`, HOST:PORT or ray://HOST:PORT, or start a local Ray instance (`local`)."""
        ray = import_ray()
        _check_reachable(address)
        with _stderr_held() as said:  # Ray's core logs each failed try: one line of ours says it instead
            try:
                ray.init(
                    address=address,
                    runtime_env=copy.deepcopy(RUNTIME_ENV),  # Ray writes into it
                    include_dashboard=False if address == "local" else None,
                    log_to_driver=False,  # the workers' lines come back as events, with their node
                    logging_level=logging.WARNING,
                )
            except (ConnectionError, ray.exceptions.AuthenticationError) as exc:
                failed = str(exc).splitlines()[0]
            else:
                failed = None
        if failed is None:
            sys.stderr.write("".join(said))
            return cls(ray, address, exclusive_node, threads, log or _stderr)
        if re.search(AUTH_FAILURE, failed + "".join(said)):
            raise BadInput(f"--ray {address}: {TOKEN_HINT}")
        raise BadInput(f"--ray {address}: {failed}; check the address, and that the head runs Ray {ray.__version__}")

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()

    def alive_nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def has(self, device: str) -> bool:
        resource = "GPU" if device.startswith("cuda") else "CPU"
        return any((n.get("Resources") or {}).get(resource, 0) >= 1 for n in self.alive_nodes())

    def describe(self) -> str:
        nodes = self.alive_nodes()
        parts = [
            f"{n.get('NodeManagerHostname') or n.get('NodeManagerAddress')} {n['NodeID'][:8]}: "
            f"{plural((n.get('Resources') or {}).get('CPU', 0), 'CPU')}"
            + (f", {plural(n['Resources']['GPU'], 'GPU')}" if (n.get("Resources") or {}).get("GPU") else "")
            for n in nodes
        ]
        return f"ray: {self.address}, {plural(len(nodes), 'node')} ({'; '.join(parts)})"

    def measure(
        self, folder: RunFolder, specs: list[PointSpec], policy: TimingPolicy, *, seed: int, progress: bool
    ) -> None:
        """`specs`, not stored yet, measured on the nodes and stored in `folder`, one device after the other."""
        if "node" not in folder.point_columns():  # its rows could not say where they ran
            raise RunFailed(
                f"{folder.path}: its points.csv was begun before sweeps on Ray and has no `node` column; resume it "
                "without --ray, or measure on Ray into a new folder"
            )
        meta = folder.meta
        stored = meta.get("ray") or {}
        threads = self.threads if self.threads is not None else stored.get("threads_requested")
        ray_meta = {
            "address": self.address,
            "ray": self.ray.__version__,
            "exclusive_node": self.exclusive_node,
            "threads_requested": threads,
            "placement": PLACEMENT,
        }
        if stored and stored.get("address") != self.address:
            ray_meta["earlier_addresses"] = [*stored.get("earlier_addresses", []), stored.get("address")]
        reason = str(meta.get("threads_reason", ""))
        folder.update_meta(
            ray=ray_meta,
            nodes=meta.get("nodes", {}),
            machines=meta.get("machines", {}),
            threads_reason=reason if reason.startswith(ON_RAY) else f"{ON_RAY}; {meta.get('threads_reason')}",
        )
        pending = [s for s in specs if not skip_if_blocked(folder, s)]
        self.log(f"{self.describe()}; {plural(len(pending), 'point')} to measure; placement: {PLACEMENT}")
        bar = progress_bar(len(pending), "points", "stored", show=progress)
        sweep = Sweep(folder, policy, seed, threads)
        try:
            for device in sorted({s.device for s in pending}):
                if not self.has(device):
                    raise RunFailed(f"--ray {self.address}: the plan measures {device}, and no node has one")
                Phase(self, sweep, device, bar).measure([s for s in pending if s.device == device])
        finally:
            bar.close()


def _check_reachable(address: str) -> None:
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"--ray {address}: give HOST:PORT of a cluster's head, auto (the one on this machine) or local")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise BadInput(
            f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); start one with "
            "`ray start --head` and give the address it prints, or --ray local"
        ) from None


@contextmanager
def _stderr_held():
    """Within: what is written to file descriptor 2 (Ray's C++ core writes there) is kept, in the list it gives."""
    sys.stderr.flush()
    saved, said = os.dup(2), []
    with tempfile.TemporaryFile("w+", errors="replace") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            said.append(held.read())


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)
