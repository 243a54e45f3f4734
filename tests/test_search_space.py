"""The plan space: divisors, constraints and the layout table against a brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import pytest

from workbench.pipeline.schedules import SCHEDULE_NAMES, required_vpp
from workbench.presets.catalog import load_cluster, load_model
from workbench.search.space import Constraints, build_space
from workbench.specs.degrees import divisors


def test_divisors_match_brute_force():
    for n in (1, 7, 12, 64, 96, 126, 16384):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"memory_headroom_frac": 1.0}, "memory_headroom_frac"),
        ({"max_devices": 0}, "max_devices"),
        ({"fixed": {"xp": 2}}, "fixed"),
        ({"maximum": {"tp": 0}}, "maximum"),
        ({"schedules": ("1f1b", "nope")}, "schedules"),
        ({"recompute": ("half",)}, "recompute"),
        ({"zero_stages": (4,)}, "zero_stages"),
        ({"micro_batch_sizes": (0,)}, "micro_batch_sizes"),
        ({"cp_kinds": ("spiral",)}, "cp_kinds"),
    ],
)
def test_constraints_reject_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Constraints(**kwargs)


def _brute_force_count(model, n, c: Constraints, nvlink: int) -> int:
    """Count plans by nested loops, straight from the space's definition in workbench.search.space."""
    count = 0
    for tp, cp, pp in itertools.product(divisors(n), repeat=3):
        if tp > nvlink or n % (tp * cp * pp):
            continue
        sps = 1 if tp == 1 else len(c.sequence_parallel)
        pipes = 1 if pp == 1 else sum(1 if required_vpp(s) else 8 for s in c.schedules)
        # every divisor of cp that hands out whole heads is a Ulysses degree (ring 1, Ulysses cp, USP between);
        # the tp-cp-ep-pp-dp order adds a copy where the pp or the dp group then crosses other links (another
        # level for its farthest pair, or another count of members inside an 8-GPU node)
        dp = n // (tp * cp * pp)

        def links(stride, size, nvlink=nvlink):
            return (stride * (size - 1) >= nvlink, min(size, max(nvlink // stride, 1)))

        inner = tp * cp
        moved = (pp > 1 and links(inner * dp, pp) != links(inner, pp)) or (
            dp > 1 and links(inner, dp) != links(inner * pp, dp)
        )
        orders = 2 if moved else 1
        whole = math.gcd(
            model.num_attention_heads, model.num_key_value_heads
        )  # Ulysses hands out whole heads
        count += sps * pipes * orders * len([u for u in range(1, cp + 1) if cp % u == 0 and whole % u == 0])
    eps = len(divisors(model.num_experts)) if model.is_moe else 1
    return count * eps * len(c.micro_batch_sizes) * len(c.zero_stages) * len(c.recompute)


@pytest.mark.parametrize(
    ("model_id", "nodes"), [("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("mixtral-8x7b", 2)]
)
def test_space_size_matches_brute_force(model_id, nodes):
    model, cluster = load_model(model_id), load_cluster("dgx-h100", num_nodes=nodes)
    c = Constraints()
    space = build_space(model, cluster, c)
    assert space.size == _brute_force_count(model, cluster.num_devices, c, nvlink=8)


def test_layout_rows_respect_the_structure():
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=4)
    space = build_space(model, cluster, Constraints(schedules=SCHEDULE_NAMES))
    lay = space.layout
    assert ((lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]) == 32).all()
    assert not (lay["sequence_parallel"] & (lay["tp"] == 1)).any()
    assert (lay["vpp"][lay["pp"] == 1] == 1).all()
    assert lay["tp"].max() <= 8  # the NVLink domain by default


def test_fixed_and_maximum_limit_the_axes():
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=4)
    space = build_space(model, cluster, Constraints(fixed={"tp": 8}, maximum={"pp": 4}, zero_stages=(1,)))
    assert set(space.layout["tp"].tolist()) == {8}
    assert space.layout["pp"].max() == 4
    assert space.zero_stage.tolist() == [1]
    fixed_mbs = build_space(model, cluster, Constraints(fixed={"micro_batch_size": 3}))
    assert fixed_mbs.micro_batch_size.tolist() == [3]
