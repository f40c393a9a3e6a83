import pytest
import torch

CLAIMS_GROUP = "claims"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist's `--dist loadgroup` (make test runs the suite on 2 workers): every test file
    is one group, so its module fixtures (a run, a report) are built on one worker only, and the files that
    read `claim_results` are one group together, so the claims are measured once, not once per worker. A
    test that names its own xdist_group keeps it. Without xdist the marks change nothing. A test that reads
    `claim_results` is slow (measuring every claim takes seconds): `make test-fast` leaves it out."""
    claims_files = {item.path for item in items if "claim_results" in getattr(item, "fixturenames", ())}
    for item in items:
        if "claim_results" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is None:
            group = CLAIMS_GROUP if item.path in claims_files else item.path.stem
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="session")
def claim_results():
    """Every claim's ClaimResult at seed 0 by claim id, in CLAIMS order: measured once per pytest session, by
    bench.claims.measure_claims itself (about 15 s), for every claims test that reads the claims as the
    `claims` command measures them. A test that measures one claim under other conditions calls it itself."""
    from bench.claims import measure_claims  # noqa: PLC0415

    return {r.claim_id: r for r in measure_claims(seed=0)}


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
