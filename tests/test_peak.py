import shutil
import subprocess

import pytest

from bench import peak
from bench.peak import (
    TRIAD_MIN_ARRAY_BYTES,
    memory_bandwidth,
    triad_array_bytes,
    with_bandwidth,
    with_measurement,
)
from bench.threads import pinned_threads


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


@pytest.fixture(scope="module")
def bandwidth():
    """memory_bandwidth("cpu") on one thread, measured once for the tests that read what it stores (about 5 s)."""
    with pinned_threads(1):
        return memory_bandwidth("cpu")


def test_the_bandwidth_counts_three_arrays_per_call_and_keeps_the_better(bandwidth):
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


def test_the_cache_triad_runs_on_arrays_inside_the_cache(bandwidth):
    cache = bandwidth["last_level_cache_bytes"]
    if not cache:
        pytest.skip("this machine reports no CPU cache in sysfs")
    inside = bandwidth["cache"]
    # The arrays are sized from the cache the sweep found where it found one (an AMD EPYC VM's L3 slice is smaller
    # than the 32 MiB its sysfs reports), not from the OS's figure
    used = bandwidth.get("effective_last_level_cache_bytes") or cache
    assert inside["array_bytes"] == used // peak.TRIAD_IN_CACHE_SHARE // 4 * 4
    assert 3 * inside["array_bytes"] <= used / 2 and inside["bytes_per_call"] == 3 * inside["array_bytes"]
    assert inside["bytes_per_s"] == inside["bytes_per_call"] / inside["wall_min_s"]
    assert bandwidth["bytes_per_s_cpu"] == bandwidth["bytes_per_call"] / bandwidth["cpu_min_s"]
    # Not asserted: that it outruns memory. On the 2-core AMD EPYC VM, with the suite's other worker beside it, the
    # cache triad read 19.60 GB/s against memory's 19.76: a speed is shown by stored runs, not by a timed unit test.


def test_the_operator_latency_is_one_operator_of_its_chain_and_the_shorter_is_kept():
    with pinned_threads(1):
        latency = peak.op_latency("cpu")
    assert 1e-8 < latency["seconds"] < 1e-3 and 1e-8 < latency["seconds_cpu"] < 1e-3
    assert f"{peak.LATENCY_CHAIN} in a chain" in latency["kernel"]
    start, end = {"seconds": 2e-6}, {"seconds": 3e-6}
    assert peak.with_latency(peak.with_latency(None, "start", start), "end", end) == {
        "seconds": 2e-6,
        "measured": {"start": start, "end": end},
    }
    assert peak.latency_on({"seconds": 2e-6, "seconds_cpu": 1e-6}, "cpu") == 1e-6
    assert peak.latency_on({"seconds": 2e-6}, "cpu") == 2e-6  # no CPU clock stored: the wall one


STREAM_TRIAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* STREAM's triad (McCalpin), one thread, float32: a[j] = b[j] + scalar*c[j]; the best of NTIMES. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]); int ntimes = 10; float scalar = 3.0f;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    for (long j = 0; j < n; j++) { a[j] = 0.5f; b[j] = 1.5f; c[j] = 2.5f; }
    double best = 1e30;
    for (int k = 0; k < ntimes; k++) {
        double t = now();
        for (long j = 0; j < n; j++) a[j] = b[j] + scalar * c[j];
        t = now() - t; if (t < best) best = t;
    }
    volatile float sink = a[n / 2]; (void)sink;
    printf("%.6e\n", 3.0 * sizeof(float) * n / best);
    return 0;
}
"""


@pytest.mark.slow
def test_the_triad_bandwidth_is_within_30_percent_of_a_c_stream_triad_beside_it(tmp_path):
    """The harness's triad (torch.add on one thread) against the same triad compiled from C, on arrays of the same
    size, each the best of its rounds, measured one after the other."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc) to build the STREAM triad")
    source = tmp_path / "triad.c"
    source.write_text(STREAM_TRIAD_C)
    binary = tmp_path / "triad"
    # STREAM's usual build: optimised and vectorised for this CPU (-O2 alone leaves the loop scalar on gcc 12)
    subprocess.run([compiler, "-O3", "-march=native", "-o", str(binary), str(source)], check=True)
    with pinned_threads(1):
        ours = memory_bandwidth("cpu")
    elements = ours["array_bytes"] // 4
    theirs = max(
        float(subprocess.run([str(binary), str(elements)], capture_output=True, text=True, check=True).stdout)
        for _ in range(3)
    )
    assert 0.7 <= ours["bytes_per_s"] / theirs <= 1.3, (ours["bytes_per_s"], theirs)
