import pytest
import torch


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
            "points_remeasured": 0,
            "points_unreliable": 0,
            "measure_s": 0,
            "threads": 1,
        }

    monkeypatch.setattr(Run, "execute", execute)
    return calls
