"""A busy machine: the clock each point's time is read on, one clock per fit, the allocator pinned, and no
number of the report made of a time that is not to be trusted."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

import bench.point
import bench.policy as P
from bench import allocator, clock, fits
from bench.cli import main
from bench.load import Load
from bench.policy import CPU, THREAD, WALL

FAST = ["--rounds", "6", "--target-time", "0.01", "--passes", "3", "--no-progress"]


def _points(clocks, cpu=THREAD, flags=("",) * 3):
    """Three points of one sweep, their clock per point, wall times 2x their CPU times."""
    n = [64, 128, 256]
    return pd.DataFrame(
        {
            "n": n,
            "time_clock": clocks,
            "time_cpu_clock": [cpu] * 3,
            "time_median_s": [2e-3 * x / 64 for x in n],
            "time_ci_low_s": [1.9e-3 * x / 64 for x in n],
            "time_ci_high_s": [2.1e-3 * x / 64 for x in n],
            "time_iqr_s": [1e-4] * 3,
            "time_cpu_median_s": [1e-3 * x / 64 for x in n],
            "time_cpu_ci_low_s": [0.95e-3 * x / 64 for x in n],
            "time_cpu_ci_high_s": [1.05e-3 * x / 64 for x in n],
            "time_cpu_iqr_s": [5e-5] * 3,
            "time_wall_flag": ["stalled: median 2.00x the fastest round (> 1.5)", "", ""],
            "time_cpu_flag": list(flags),
            "time_reliable": [True] * 3,
        }
    )


def test_a_group_of_points_is_read_on_one_clock():
    assert clock.group_clock(_points([WALL, WALL, WALL])) == WALL
    # one point needs the CPU clock: every point of the group is read on it
    timed = clock.on_clock(_points([WALL, CPU, WALL]))
    assert (timed["clock"] == CPU).all() and list(timed["time_s"]) == pytest.approx([1e-3, 2e-3, 4e-3])
    assert list(timed["time_s_ci_low"]) == pytest.approx([0.95e-3, 1.9e-3, 3.8e-3]) and timed["time_ok"].all()
    # a point without its own thread's CPU clock (several threads) keeps the group on the wall clock
    assert clock.group_clock(_points([WALL, CPU, WALL], cpu="process")) == WALL
    on_wall = clock.on_clock(_points([WALL, WALL, WALL]))
    assert list(on_wall["time_ok"]) == [False, True, True]  # the wall clock's own flag, not the point's clock's


def test_a_points_reliability_on_each_clock_comes_from_that_clocks_flag():
    points = _points([CPU] * 3, flags=("", "uncertain: interval 40% of the median (> 25%)", ""))
    assert list(clock.reliable_on(points, CPU)) == [True, False, True]
    assert list(clock.reliable_on(points, WALL)) == [False, True, True]


def test_a_run_from_before_the_cpu_clock_is_read_on_the_wall_clock():
    old = pd.DataFrame({"n": [64, 128], "time_median_s": [1e-3, 2e-3], "time_reliable": ["True", "False"]})
    assert clock.group_clock(old) == WALL
    timed = clock.on_clock(old)
    assert list(timed["time_s"]) == [1e-3, 2e-3] and list(timed["time_ok"]) == [True, False]
    assert not clock.reliable_on(old, CPU).any() and list(clock.reliable(old)) == [True, False]


def test_each_point_on_its_own_clock():
    own = clock.each_on_own_clock(_points([WALL, CPU, WALL]))
    assert list(own["clock"]) == [WALL, CPU, WALL]
    assert list(own["time_s"]) == pytest.approx([2e-3, 2e-3, 8e-3])


def test_the_allocator_policy_is_pinned_and_said():
    entry = allocator.pin()
    if not entry["libc"].startswith("glibc"):
        pytest.skip(f"not glibc: {entry['libc']}")
    assert entry["pinned"] and entry["mmap_max"] == 0 and entry["trim_threshold"] == -1
    assert "malloc keeps the memory it got" in allocator.describe(entry)
    assert "predates" in allocator.describe(None)


class _Busy:
    """A load meter that says other programs took 1.5 cores while each point was timed."""

    def read(self):
        return Load(others_busy_cores=1.5, loadavg_1m=3.0, logical_cores=2, wall_s=0.1)


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory):
    """A small sweep measured as if other programs had taken 1.5 cores while every point was timed; every time
    trusted (the tests below choose which are not: a noisy host left a few untrusted and no fit to test)."""
    root = tmp_path_factory.mktemp("busy")
    patch = pytest.MonkeyPatch()
    patch.setattr(bench.point, "LoadMeter", _Busy)
    for threshold in ("STALL_RATIO", "PASS_SPREAD_RATIO", "CI_RELATIVE_WIDTH"):
        patch.setattr(P, threshold, 1e9)
    try:
        grid = [
            "run",
            "--layers",
            "conv,lstm,attention",
            "--n",
            "128,256,512,1024,2048,4096",
            "--d",
            "16",
            "--heads",
            "2",
        ]
        assert main([*grid, "--device", "cpu", "--threads", "1", "--out", str(root / "run"), *FAST]) == 0
    finally:
        patch.undo()
    return root


@pytest.mark.slow
def test_points_timed_while_others_took_cores_are_read_on_their_threads_cpu_clock(busy_run, tmp_path):
    run = busy_run / "run"
    points = pd.read_csv(run / "points.csv")
    assert (points["time_clock"] == CPU).all() and (points["load_others_cores"] == 1.5).all()
    assert points["time_clock_why"].str.contains("other programs took 1.5 cores").all()
    assert json.loads((run / "meta.json").read_text())["points_cpu_clock"] == len(points)
    out = tmp_path / "report"
    assert main(["report", "--results", str(run), "--out", str(out)]) == 0
    table = pd.read_csv(out / "fits.csv")
    assert (table.loc[table["metric"] == "time", "clock"] == CPU).all()
    assert table.loc[table["metric"] != "time", "clock"].isna().all()
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    exponents = {k: v for k, v in numbers.items() if ".time.exponent_n" in k and not k.endswith(".predicted")}
    # every time exponent cited is the CPU clock's; which sweeps have one (rather than "not asymptotic yet") is the
    # machine's speed at these sizes: none cited only where fits.csv found none
    timed = table[table["metric"] == "time"]
    assert all(v["clock"] == CPU for v in exponents.values())
    assert bool(exponents) == timed["exponent"].notna().any()
    first_screen = (out / "report.md").read_text().split("**Contents**")[0]
    assert f"{len(points)} of {len(points)} points were timed on the CPU clock of their one thread" in first_screen
    assert "Load: other programs took 1.5 of the 2 cores while its points were timed" in first_screen


def _untrusted(run, points: pd.DataFrame, where) -> None:
    """points.csv of `run` with the points `where` selects made untrusted on their clock."""
    points.loc[where, "time_reliable"] = False
    for name in ("time_flag", "time_wall_flag", "time_cpu_flag"):
        points[name] = points[name].astype(object)
        points.loc[where, name] = "stalled: median 2.00x the fastest round (> 1.5)"
    points.to_csv(run / "points.csv", index=False)


@pytest.mark.slow
def test_no_number_of_the_report_is_made_of_a_median_not_to_be_trusted(busy_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(busy_run / "run", run)
    points = pd.read_csv(run / "points.csv")
    # attention: every time untrusted; conv: its two largest points'
    _untrusted(run, points, (points["layer"] == "attention") | ((points["layer"] == "conv") & (points["n"] >= 2048)))
    out = tmp_path / "report"
    assert main(["report", "--results", str(run), "--out", str(out)]) == 0
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    timed = [k for k in numbers if ".attention." in k and any(w in k for w in ("time", "fraction", "achieved"))]
    # no growth, fraction of peak or rate of attention's: its exponent alone, on the fastest rounds (below)
    assert all(".time.exponent_n" in k for k in timed), timed
    assert all("the fastest round of each point" in numbers[k]["note"] for k in timed if "predicted" not in k)
    assert not [k for k in numbers if ".crossover." in k and k.endswith(".time_n")]
    assert not [k for k in numbers if "two_term" in k]
    # conv's largest trusted point is n = 1024: its fraction of peak and growth are from n = 128..1024
    fraction = next(k for k in numbers if k.endswith(".conv.fraction_of_peak.largest"))
    conv = points[(points["layer"] == "conv") & (points["n"] == 1024)].iloc[0]
    peak = json.loads((run / "meta.json").read_text())["compute_peak"]["cpu"]["flops_per_s_cpu"]
    work = conv["flops_useful"] if conv["flops_useful"] == conv["flops_useful"] else conv["flops_counted"]
    assert numbers[fraction]["value"] == pytest.approx(float(f"{100 * work / conv['time_cpu_median_s'] / peak:.3g}"))
    assert any(k.endswith(".conv.time.growth_n128_to_n1024_b1_d16") for k in numbers)
    # the time fits keep every point, on each point's fastest round, and say why (bench.clock.group_statistic)
    table = pd.read_csv(out / "fits.csv")
    time_fits = table[(table["metric"] == "time") & table["layer"].isin(["attention", "conv"])]
    assert (time_fits["statistic"] == "min").all() and (time_fits["unreliable_left_out"] == 0).all()
    assert time_fits["reason"].str.contains("on each point's fastest round").all()
    md = (out / "report.md").read_text()
    assert "not computed: 6 of 6 lengths with an unreliable time" in md


@pytest.mark.slow
def test_a_fraction_above_the_measured_peak_is_flagged(busy_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(busy_run / "run", run)
    meta = json.loads((run / "meta.json").read_text())
    meta["compute_peak"]["cpu"] |= {"flops_per_s": 1e6, "flops_per_s_cpu": 1e6}  # below every point's rate
    (run / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "report"
    assert main(["report", "--results", str(run), "--out", str(out)]) == 0
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    fractions = [v for k, v in numbers.items() if k.endswith(".fraction_of_peak.largest")]
    assert fractions and all(v["value"] > 100 and v["note"] == "above the measured compute peak" for v in fractions)
    assert main(["report", "--results", str(busy_run / "run"), "--out", str(tmp_path / "as-measured")]) == 0
    measured = json.loads((tmp_path / "as-measured" / "numbers.json").read_text())["numbers"]
    below = [v for k, v in measured.items() if k.endswith(".fraction_of_peak.largest") and v["value"] <= 100]
    assert below and all("note" not in v for v in below)
    (bandwidth,) = [v["value"] for k, v in measured.items() if k.endswith(".cpu.memory_bandwidth")]  # the triad's
    assert bandwidth == float(f"{meta['memory_bandwidth']['cpu']['bytes_per_s']:.4g}")


def _lstm_sweep(n: np.ndarray, times: dict) -> pd.DataFrame:
    """lstm's inference points at lengths n (d = 16, batch 1), ok, with their FLOPs and memory and `times`."""
    identity = dict(layer="lstm", device="cpu", dtype="float32", mode="inference", batch=1, n=n, d=16)
    sizes = dict(k=None, heads=None, window=None, status="ok", flops_counted=16 * n * 16 * 16, mem_peak_bytes=64 * n)
    return pd.DataFrame(identity | sizes | times)


def test_fits_name_their_clock_and_the_range_rule_holds_on_it():
    n = np.array([256, 512, 1024, 2048])
    points = _lstm_sweep(
        n,
        {
            "time_median_s": [4e-6 * x for x in n],  # the wall clock: doubled by the load from n = 1024 on
            "time_cpu_median_s": [2e-6 * x for x in n],
            "time_ci_low_s": [3.9e-6 * x for x in n],
            "time_ci_high_s": [4.1e-6 * x for x in n],
            "time_cpu_ci_low_s": [1.95e-6 * x for x in n],
            "time_cpu_ci_high_s": [2.05e-6 * x for x in n],
            "time_cpu_clock": THREAD,
            "time_clock": [WALL, WALL, CPU, CPU],
            "time_wall_flag": "",
            "time_cpu_flag": "",
            "time_reliable": True,
        },
    )
    points.loc[2:, "time_median_s"] *= 2
    row = fits.fit_table(points).set_index("metric").loc["time"]
    assert row["clock"] == CPU and row["exponent"] == pytest.approx(1.0) and row["verdict"] == "consistent"
    assert fits.fit_table(points.assign(time_clock=WALL)).set_index("metric").loc["time", "clock"] == WALL


def test_the_peak_keeps_the_better_measurement_on_each_clock():
    from bench.formats import stored_peaks
    from bench.peak import peak_on, with_measurement

    start = {"flops_per_s": 2e11, "flops_per_s_cpu": 2.1e11}
    end = {"flops_per_s": 1e11, "flops_per_s_cpu": 2.2e11}  # a busy end: the wall clock's rate halved
    entry = with_measurement(with_measurement(None, "start", start), "end", end)
    assert peak_on(entry, WALL) == 2e11 and peak_on(entry, CPU) == 2.2e11
    assert set(entry["measured"]) == {"start", "end"}
    old = {"matmul_peak": {"cpu": {"flops_per_s": 1.6e11, "size": 512}}}  # a run from before the CPU clock
    assert peak_on(stored_peaks(old)["cpu"], CPU) == 1.6e11


def test_a_fit_with_a_median_not_to_be_trusted_fits_every_points_fastest_round():
    """Rounds that lost speed (a VM's vCPU at two speeds by turns) only add time: one statistic for all the points."""
    n = np.array([48, 192, 768, 3072, 12288, 49152])
    slow = np.array([1.9, 1.2, 1.7, 1.0, 2.0, 1.4])  # each point's median over its fastest round
    points = _lstm_sweep(
        n,
        {
            "time_min_s": 1e-6 * n,
            "time_median_s": 1e-6 * n * slow,
            "time_ci_low_s": 0.97e-6 * n * slow,
            "time_ci_high_s": 1.03e-6 * n * slow,
            "time_clock": WALL,
            "time_wall_flag": ["stalled: median 1.90x the fastest round (> 1.5)", "", "stalled", "", "stalled", ""],
            "time_reliable": slow <= 1.5,
        },
    )
    row = fits.fit_table(points).set_index("metric").loc["time"]
    assert row["statistic"] == "min" and row["unreliable_left_out"] == 0 and row["points"] == len(n)
    assert row["exponent"] == pytest.approx(1.0) and row["verdict"] == "consistent"
    assert "on each point's fastest round (medians not to be trusted: 3 of 6" in row["reason"]
    trusted = points.assign(time_wall_flag="", time_reliable=True, time_median_s=1.2e-6 * n)
    row = fits.fit_table(trusted).set_index("metric").loc["time"]
    assert row["statistic"] == "median" and row["exponent"] == pytest.approx(1.0)
    older = points.drop(columns="time_min_s")  # a run without fastest rounds: its untrusted medians left out
    assert fits.fit_table(older).set_index("metric").loc["time", "unreliable_left_out"] == 3
