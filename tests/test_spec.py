"""Sweep points: grid expansion, presets as data, validation."""

import pytest

import models
from bench.errors import BadInput
from bench.presets import get_preset, load_presets
from bench.spec import PointSpec, expand_grid, validate


def test_grid_expands_to_the_cartesian_product_without_repeating_unused_sizes():
    specs = expand_grid(layers=["conv", "lstm", "attention"], n=[64, 128], d=[16, 32], k=[3, 5], heads=[2, 4])
    conv = [s for s in specs if s.layer == "conv"]
    lstm = [s for s in specs if s.layer == "lstm"]
    att = [s for s in specs if s.layer == "attention"]
    assert len(conv) == 2 * 2 * 2  # n × d × k; heads unused
    assert len(lstm) == 2 * 2  # n × d
    assert len(att) == 2 * 2 * 2  # n × d × heads
    assert all(s.heads is None for s in conv) and all(s.k is None for s in att)
    assert all(s.k is None and s.heads is None for s in lstm)
    assert len(set(specs)) == len(specs)


def test_quick_preset_spans_what_the_issue_names():
    """Every registered layer; n over 16x, d over 8x, 5 odd k; each layer whose Table 1 row fits only n >= r·d
    (models: `fit_n_over_d`) reaches that n at its largest."""
    specs = get_preset("quick").specs(["cpu"])
    ns, ds = [s.n for s in specs], [s.d for s in specs]
    assert max(ns) / min(ns) >= 16
    assert max(ds) / min(ds) >= 8
    ks = {s.k for s in specs if s.k is not None}
    assert len(ks) >= 5 and all(k % 2 == 1 for k in ks)
    assert {s.layer for s in specs} == set(models.LAYERS)
    ratios = {name: cls.table1.fit_n_over_d for name, cls in models.LAYERS.items() if cls.table1.fit_n_over_d}
    assert ratios  # attention's n²·d term: a rule to reach
    for name, ratio in ratios.items():
        largest = max((s for s in specs if s.layer == name), key=lambda s: s.n)
        assert largest.n >= ratio * largest.d, name


def test_preset_expands_to_the_grid_it_states():
    quick = get_preset("quick")
    specs = quick.specs(["cpu"])
    for grid in quick.grids:
        for layer in grid["layers"]:
            uses = models.LAYERS[layer].uses
            for n in grid["n"]:
                for d in grid["d"]:
                    for k in grid.get("k", [3]) if "k" in uses else [None]:
                        expected = [s for s in specs if (s.layer, s.n, s.d, s.k) == (layer, n, d, k)]
                        assert expected, (layer, n, d, k)


def test_every_preset_is_valid_on_cpu_and_cuda():
    # expand_grid raises BadInput on a bad size in presets.toml (an even k, a window above n, heads not
    # dividing d): every preset must expand on both devices, to distinct points that validate
    for preset in (p for p in load_presets().values() if not p.planned):  # auto: tests/test_auto.py
        for device in ("cpu", "cuda"):
            specs = preset.specs([device])
            assert specs and len(set(specs)) == len(specs), preset.name
            assert all(validate(s) == s and s.device == device for s in specs)


def test_dtype_override_and_devices():
    specs = get_preset("quick").specs(["cpu", "cuda"], dtype="bfloat16")
    assert {s.dtype for s in specs} == {"bfloat16"} and {s.device for s in specs} == {"cpu", "cuda"}


def test_unknown_preset_is_bad_input():
    with pytest.raises(BadInput, match="allowed: .*quick"):
        get_preset("nope")


@pytest.mark.parametrize(
    "spec,match",
    [
        (PointSpec("conv", n=0, d=8, k=3), "n=0"),
        (PointSpec("conv", n=8, d=8, k=4), "odd"),
        (PointSpec("attention", n=8, d=10, heads=3), "divisible"),
        (PointSpec("attention_local", n=8, d=8, heads=1, window=9), "at most n"),
        (PointSpec("transformer", n=8, d=8), "not built"),
        (PointSpec("lstm", n=8, d=8, dtype="float64"), "dtype"),
        (PointSpec("lstm", n=8, d=8, device="tpu"), "device"),
    ],
)
def test_validation_names_the_bad_value(spec, match):
    with pytest.raises(BadInput, match=match):
        validate(spec)


def test_conv_dilated_gets_its_stated_dilation():
    (spec,) = expand_grid(layers=["conv_dilated"], n=[64], d=[8], k=[5])
    assert spec.dilation == 5 and spec.config().dilation == 5


def test_device_key_leaves_float32_unsaid():
    from bench.spec import device_key, device_keys

    assert device_key("cpu", "float32") == "cpu" and device_key("cuda", "bfloat16") == "cuda-bfloat16"
    rows = {"device": ["cpu", "cuda", "cuda"], "dtype": ["float32", "float32", "float16"]}
    assert device_keys(rows) == ["cpu", "cuda", "cuda-float16"]


def test_a_points_fields_are_named_once_by_role():
    from dataclasses import fields

    from bench.spec import IDENTITY, LAYER_SIZES, SIZES, PointSpec

    assert IDENTITY == tuple(f.name for f in fields(PointSpec))
    assert set(LAYER_SIZES) == {s for cls in models.LAYERS.values() for s in cls.uses}
    assert set(SIZES) - set(LAYER_SIZES) == {"n", "d", "batch"}
