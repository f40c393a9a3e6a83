from bench import peak
from bench.peak import (
    TRIAD_MIN_ARRAY_BYTES,
    memory_bandwidth,
    triad_array_bytes,
    with_bandwidth,
    with_measurement,
)


def test_the_stored_peak_is_the_better_of_its_measurements_by_hand():
    start, end = {"flops_per_s": 100.0, "size": 512}, {"flops_per_s": 120.0, "size": 1024}
    entry = with_measurement(None, "start", start)
    assert entry == {"flops_per_s": 100.0, "size": 512, "measured": {"start": start}}
    entry = with_measurement(entry, "end", end)
    assert entry == {"flops_per_s": 120.0, "size": 1024, "measured": {"start": start, "end": end}}
    slower = {"flops_per_s": 90.0, "size": 2048}
    assert with_measurement(entry, "end", slower)["flops_per_s"] == 100.0  # a slow phase only lowers it


def test_the_triad_arrays_follow_the_rule_by_hand():
    MiB = 2**20
    assert triad_array_bytes(50 * MiB, 80 * 2**30) == 200 * MiB  # an H100's L2: 4x
    assert triad_array_bytes(8 * MiB, 16 * 2**30) == 64 * MiB  # a small cache: the floor
    assert triad_array_bytes(480 * MiB, 24 * 2**30) == 768 * MiB  # 4x 480 MiB is more than 1/32 of 24 GiB
    assert triad_array_bytes(None, 2**30) == 32 * MiB  # little memory: 1/32 of it, under the floor
    assert triad_array_bytes(3, 10**9) % 4 == 0


def test_the_bandwidth_counts_three_arrays_per_call_and_keeps_the_better():
    bandwidth = memory_bandwidth("cpu")
    assert bandwidth["bytes_per_call"] == 3 * bandwidth["array_bytes"]
    assert bandwidth["bytes_per_s"] == bandwidth["bytes_per_call"] / bandwidth["wall_min_s"]
    assert bandwidth["median_bytes_per_s"] <= bandwidth["bytes_per_s"]
    assert bandwidth["array_bytes"] >= min(TRIAD_MIN_ARRAY_BYTES, 4 * (bandwidth["last_level_cache_bytes"] or 0))
    start, end = {"bytes_per_s": 5.0}, {"bytes_per_s": 4.0}
    entry = with_bandwidth(with_bandwidth(None, "start", start), "end", end)
    assert entry == {"bytes_per_s": 5.0, "measured": {"start": start, "end": end}}


def test_the_cpu_cache_is_read_from_sysfs(tmp_path, monkeypatch):
    for index, (level, size) in enumerate([(1, "48K"), (2, "2048K"), (3, "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "size").write_text(f"{size}\n")
    monkeypatch.setattr(peak, "CPU_CACHE_DIR", tmp_path)
    assert peak.last_level_cache_bytes("cpu") == 32 * 2**20
