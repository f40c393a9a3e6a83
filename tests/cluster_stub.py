"""Run by every Ray worker of tests/test_cluster.py's sweeps (Ray's worker_process_setup_hook,
`cluster_stub.fake_peak`, with tests/ on the worker's path): the node's compute peak replaced by a stand-in, as
tests/test_one_writer.py does in its processes. The runs test the folder, the placement and the faults, not the
peak (1-2 s a node at the start and again at the end of a run, on 2 busy cores)."""

from stand_ins import FAKE_PEAK


def fake_peak() -> None:
    import bench.ray_worker  # noqa: PLC0415

    bench.ray_worker._peak = lambda device, dtype: dict(FAKE_PEAK, dtype=dtype)
