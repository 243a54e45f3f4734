"""Bad specs and plans get a ValueError that names the field, never another exception."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.presets import catalog
from workbench.specs.hardware import NetworkLevel
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

GOOD_MODEL = catalog.load_model("llama-3.1-8b").to_dict()
BAD_VALUES = st.one_of(
    st.integers(max_value=0),
    st.just(True),
    st.text(max_size=3),
    st.none(),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=2),
)
INT_FIELDS = [
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
]


@settings(max_examples=150, deadline=None)
@given(field=st.sampled_from(INT_FIELDS), value=BAD_VALUES)
def test_bad_model_field_is_named(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ModelSpec(**{**GOOD_MODEL, field: value})


@settings(max_examples=150, deadline=None)
@given(field=st.sampled_from(["dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch_size"]), value=BAD_VALUES)
def test_bad_plan_degree_is_named(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ParallelPlan(**{field: value})


@settings(max_examples=60, deadline=None)
@given(
    value=st.one_of(st.integers().filter(lambda v: v not in (0, 1, 2, 3)), st.text(max_size=2), st.just(True))
)
def test_bad_zero_stage(value: object) -> None:
    with pytest.raises(ValueError, match="zero_stage must be one of 0, 1, 2, 3"):
        ParallelPlan(zero_stage=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"recompute": "some"}, "recompute"),
        ({"rank_order": ("tp", "dp")}, "rank_order"),
        ({"sequence_parallel": "yes"}, "sequence_parallel"),
    ],
)
def test_bad_plan_choice(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ParallelPlan(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"seq_len": 0, "global_batch_size": 8}, "seq_len"),
        ({"seq_len": 8, "global_batch_size": -1}, "global_batch_size"),
        ({"seq_len": 8, "global_batch_size": 8, "dtype": "int4"}, "dtype"),
        ({"seq_len": 8, "global_batch_size": 8, "optimizer": "lion"}, "optimizer"),
    ],
)
def test_bad_workload(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Workload(**kwargs)  # type: ignore[arg-type]


def test_bad_network_level() -> None:
    with pytest.raises(ValueError, match="bytes_per_s"):
        NetworkLevel(name="ib", bytes_per_s=0, latency_s=1e-6)
    with pytest.raises(ValueError, match="latency_s"):
        NetworkLevel(name="ib", bytes_per_s=1e9, latency_s=-1)


def test_cluster_level_spans_must_increase() -> None:
    c = catalog.load_cluster("dgx-h100")
    with pytest.raises(ValueError, match="strictly increase"):
        dataclasses.replace(
            c,
            levels=(
                dataclasses.replace(c.levels[0], span=16),
                dataclasses.replace(c.levels[0], span=8),
                c.levels[-1],
            ),
        )


def test_moe_fields_need_experts() -> None:
    with pytest.raises(ValueError, match="experts_per_token=9 must be in 1..num_experts=8"):
        ModelSpec(**{**catalog.load_model("mixtral-8x7b").to_dict(), "experts_per_token": 9})
