import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
