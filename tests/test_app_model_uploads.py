"""The app takes the day-0 families: each new preset is in the model picker, and its config.json uploads."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("panel")

from workbench_widgets.app.state import UPLOADED, WorkbenchState  # noqa: E402
from workbench_widgets.app.store import WorkbenchStore  # noqa: E402

from tests.conftest import ROOT  # noqa: E402
from workbench.presets.catalog import load_model  # noqa: E402

NEW = ["qwen3-8b", "gemma-2-9b", "gemma-3-27b", "phi-3-mini-4k", "llama-4-scout-17b-16e", "deepseek-v2-lite",
       "gpt-oss-20b", "glm-4.5"]  # fmt: skip


@pytest.mark.parametrize("name", NEW)
def test_new_family_is_picked_and_uploaded(name: str) -> None:
    store = WorkbenchStore(WorkbenchState())
    assert name in store.state.param.model_preset.objects
    config = json.loads((ROOT / "profiles" / "models" / f"{name}.json").read_text())
    store.upload_config(config, source=f"{name}.json")
    s = store.state
    expected = load_model(name)
    assert s.model_preset == UPLOADED
    assert (s.num_layers, s.hidden_size) == (expected.num_layers, expected.hidden_size)
    assert store.model_spec().total_parameters() == expected.total_parameters()
