import copy
import os
import pickle
import tempfile
from collections import Counter

import pytest
import torch
from filelock import FileLock

# make test runs two workers on two cores: each one thread, or their OpenMP threads fight over the cores and a
# test of many small ops takes 20 to 100 times as long. The runs the tests start in subprocesses choose their own.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    torch.set_num_threads(1)
# The tests' grids are tiny and never asymptotic: each would be extended (bench.planner) for a minute. Measured as
# given here and in the runs the tests start; tests/test_extend.py turns it on. The machine's costs (bench.kept) are
# kept apart from the user's, once per session.
os.environ["SEQBENCH_EXTEND_BUDGET"] = "0"
os.environ["SEQBENCH_DEFAULT_POLICY"] = "0"  # one test times it (tests/test_default_policy.py)
os.environ.setdefault("SEQBENCH_CACHE", tempfile.mkdtemp(prefix="seqbench-cache-"))


def pytest_collection_modifyitems(config, items):
    """A test that reads `claim_results` is slow (measuring every claim takes seconds): `make test-fast` leaves
    it out; a test marked `cuda` is skipped without a GPU. The files with the most slow tests of their own first, each in its own order: `make test` hands a
    file at a time to a free worker (--no-loadscope-reorder keeps this order), and a long file handed out last
    leaves the other worker idle until it ends."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "claim_results" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("cuda") and not torch.cuda.is_available():
            item.add_marker(no_gpu)
    items.sort(key=lambda item: -slow[item.path])  # stable: the order within a file is kept


def _shared(tmp_path_factory, worker_id, name: str, measure):
    """measure() once per pytest session: under pytest-xdist the first worker to ask measures and stores a
    pickle beside the workers' temporary folders, the others read it (xdist's recipe for a session fixture
    made once); without xdist, measured here."""
    if worker_id == "master":  # no xdist
        return measure()
    stored = tmp_path_factory.getbasetemp().parent / f"{name}.pickle"
    with FileLock(f"{stored}.lock"):
        if not stored.exists():
            partial = stored.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(pickle.dumps(measure()))
            partial.replace(stored)  # whole or absent, whatever happens to the process that measured
        return pickle.loads(stored.read_bytes())


@pytest.fixture(autouse=True, scope="session")
def _compute_peak_measured_once(tmp_path_factory, worker_id):
    """A run measures its ceilings (compute peak, memory bandwidth, operator latency) at its start and its end, about
    a second each; the dozens of runs of the suite test the run, not the ceilings: they get this machine's as first
    measured in this test session, at their device, dtype and thread count, by whichever worker asked first (a test
    that fakes them still does)."""
    import bench.run  # noqa: PLC0415

    measured = {}

    def once(key: tuple, measure):
        if key not in measured:
            name = "ceiling-" + "-".join(str(part).replace(".", "_") for part in key)
            measured[key] = _shared(tmp_path_factory, worker_id, name, measure)
        return copy.deepcopy(measured[key])

    def compute_peak(device, dtype):
        return once(("peak", device, dtype, torch.get_num_threads()), lambda: real(device, dtype))

    def memory_bandwidth(device, swept=None):
        return once(("bandwidth", device), lambda: real_bandwidth(device, swept))

    def op_latency(device):
        return once(("latency", device, torch.get_num_threads()), lambda: real_latency(device))

    def memory_hierarchy(device):
        return once(("hierarchy", device), lambda: real_hierarchy(device))

    real, real_bandwidth, real_latency = bench.peak.compute_peak, bench.peak.memory_bandwidth, bench.peak.op_latency
    real_hierarchy = bench.peak.memory_hierarchy
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench.peak, "compute_peak", compute_peak)
        patch.setattr(bench.peak, "memory_bandwidth", memory_bandwidth)
        patch.setattr(bench.peak, "op_latency", op_latency)
        patch.setattr(bench.peak, "memory_hierarchy", memory_hierarchy)
        yield


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def claim_results(tmp_path_factory, worker_id):
    """Every claim's ClaimResult at seed 0 by claim id, in CLAIMS order: measured once per pytest session, by
    bench.claims.measure_claims itself (about 15 s), for every claims test that reads the claims as the
    `claims` command measures them, by the first worker to ask. A test that measures one claim under other
    conditions calls it itself."""
    from bench.claims import measure_claims  # noqa: PLC0415

    return _shared(
        tmp_path_factory, worker_id, "claim_results", lambda: {r.claim_id: r for r in measure_claims(seed=0)}
    )


@pytest.fixture
def no_measuring(monkeypatch):
    """Run.execute replaced by a stub that records the run folders it was asked to measure (what `run`
    prints and decides before measuring is then all that happens)."""
    from bench.run import Run  # noqa: PLC0415

    calls = []

    def execute(run, progress=True):
        calls.append(run.dir)
        return {
            "status_counts": {},
            "points_stored": 0,
            "points_noisy": 0,
            "points_sampled_further": 0,
            "points_cpu_clock": 0,
            "points_unreliable": 0,
            "measure_s": 0,
            "threads": 1,
        }

    monkeypatch.setattr(Run, "execute", execute)
    return calls
