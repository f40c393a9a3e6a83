"""The load probe: thread choice from free cores, the busy warning, and a meter that sees another process."""

import subprocess
import sys
import time

import pytest

from bench.load import BUSY_CORES, RESERVED_CORES, Load, LoadMeter, busy_warning, choose_threads, sample_load


def _load(others: float) -> Load:
    return Load(others_busy_cores=others, loadavg_1m=others, logical_cores=2, wall_s=0.5)


@pytest.mark.parametrize(
    "cores,others,threads",
    [
        (2, 0.02, 2 - RESERVED_CORES),  # quiet 2-core VM: one core left to the system
        (2, 1.0, 1),  # one core busy elsewhere: never more threads than free cores, at least 1
        (2, 1.9, 1),
        (16, 0.3, 16 - RESERVED_CORES),
        (16, 4.4, 16 - 4 - RESERVED_CORES),  # busy cores rounded
        (1, 0.0, 1),  # one core: nothing to reserve
    ],
)
def test_threads_are_the_free_cores_less_the_reserve(cores, others, threads):
    chosen, why = choose_threads(_load(others), cores)
    assert chosen == threads
    assert f"{cores} physical cores" in why and f"{threads} thread" in why


def test_busy_machine_warns_in_one_line():
    assert busy_warning(_load(BUSY_CORES / 2)) is None
    warning = busy_warning(_load(1.0))
    assert warning.startswith("warning:") and "\n" not in warning and "1.0 of 2 cores" in warning


def test_a_meter_started_earlier_is_read_without_waiting_again(monkeypatch):
    slept = []
    since = LoadMeter()
    time.sleep(0.3)
    monkeypatch.setattr("bench.load.time.sleep", slept.append)
    assert sample_load(window_s=0.2, since=since).wall_s >= 0.3
    assert slept == [0.0]  # the window was already watched: no wait of its own
    sample_load(window_s=0.2)
    assert slept[1] > 0.19  # without one it watches the whole window from now


@pytest.mark.slow
def test_meter_sees_another_process_keep_a_core_busy():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it start spinning
        meter = LoadMeter()
        time.sleep(1.0)
        load = meter.read()
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.6 <= load.others_busy_cores <= 2.2, load
    assert load.busy
