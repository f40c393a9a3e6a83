from bench.peak import with_measurement


def test_the_stored_peak_is_the_better_of_its_measurements_by_hand():
    start, end = {"flops_per_s": 100.0, "size": 512}, {"flops_per_s": 120.0, "size": 1024}
    entry = with_measurement(None, "start", start)
    assert entry == {"flops_per_s": 100.0, "size": 512, "measured": {"start": start}}
    entry = with_measurement(entry, "end", end)
    assert entry == {"flops_per_s": 120.0, "size": 1024, "measured": {"start": start, "end": end}}
    slower = {"flops_per_s": 90.0, "size": 2048}
    assert with_measurement(entry, "end", slower)["flops_per_s"] == 100.0  # a slow phase only lowers it
