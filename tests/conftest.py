import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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
