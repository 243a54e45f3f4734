"""Every preset loads, round-trips and carries its source; the catalog's lookups and errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from workbench.presets import catalog
from workbench.presets.hf_config import model_from_hf_config
from workbench.specs.hardware import ClusterSpec, DeviceSpec, DType
from workbench.specs.model import ModelSpec

REQUIRED_DEVICES = [
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "h100-sxm5-80gb",
    "h100-sxm5-96gb",
    "h800-sxm5-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "gb200",
    "gb300",
    "mi300x",
    "h20-96gb",
    "h100-pcie-80gb",
    "h100-nvl-94gb",
    "l40s-48gb",
    "b300-sxm-288gb",
    "mi325x",
    "mi355x",
]
REQUIRED_CLUSTERS = [
    "dgx-a100",
    "dgx-h100",
    "dgx-h200",
    "dgx-b200",
    "gb200-nvl72",
    "gb300-nvl72",
    "hgx-h800",
    "meta-grand-teton-h100",
    "hgx-h20",
    "pcie-h100",
    "pcie-h100-nvl",
    "pcie-l40s",
    "hgx-b300",
    "amd-mi300x-platform",
    "amd-mi325x-platform",
    "amd-mi355x-platform",
]
REQUIRED_MODELS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2.5-72b",
    "qwen3-30b-a3b",
    "deepseek-v3",
    "gpt3-175b",
    "megatron-gpt-1.7b",
    "megatron-gpt-1t",
]


def test_every_device_id_of_the_validation_readme_is_a_preset_with_a_default_node() -> None:
    # A published row (training or serving) may use any device id the schema lists; none may be unknown.
    import re

    from workbench.validate.rows import DEFAULT_CLUSTER

    readme = (Path(__file__).resolve().parents[1] / "profiles" / "validation" / "README.md").read_text()
    sections = re.findall(r"^## Device ids.*?(?=^## )", readme, flags=re.M | re.S)
    devices = {i for sec in sections for i in re.findall(r"^\| `([a-z0-9.-]+)` \|", sec, flags=re.M)}
    assert {"h20-96gb", "a100-sxm4-40gb", "gb300"} <= devices
    assert devices <= set(catalog.preset_names("device"))
    for device in devices:  # rows put their own device on its node
        assert DEFAULT_CLUSTER[device] in catalog.preset_names("cluster"), device
    assert catalog.load_cluster(DEFAULT_CLUSTER["h20-96gb"]).device.peak("bf16") == 148e12


def test_required_presets_exist() -> None:
    assert set(REQUIRED_DEVICES) <= set(catalog.preset_names("device"))
    assert set(REQUIRED_CLUSTERS) <= set(catalog.preset_names("cluster"))
    assert set(REQUIRED_MODELS) <= set(catalog.preset_names("model"))


@pytest.mark.parametrize("name", catalog.preset_names("device"))
def test_device_round_trip(name: str) -> None:
    dev = catalog.load_device(name)
    assert dev.id == name and dev.source
    again = DeviceSpec(**{f.name: getattr(dev, f.name) for f in dataclasses.fields(dev)})
    assert again == dev
    assert dev.peak(DType.BF16) >= 100e12  # every preset is a datacenter accelerator with >100 TFLOP/s bf16
    assert 16 * 2**30 <= dev.hbm_bytes <= 300 * 2**30


@pytest.mark.parametrize("name", catalog.preset_names("cluster"))
def test_cluster_round_trip(name: str) -> None:
    cluster = catalog.load_cluster(name, num_nodes=4)
    assert cluster.id == name and cluster.num_nodes == 4 and cluster.source
    again = ClusterSpec(**{f.name: getattr(cluster, f.name) for f in dataclasses.fields(cluster)})
    assert again == cluster
    assert cluster.levels[-1].span is None
    # Outer levels are never faster than inner ones.
    speeds = [lv.bytes_per_s for lv in cluster.levels]
    assert speeds == sorted(speeds, reverse=True)


@pytest.mark.parametrize("name", catalog.preset_names("model"))
def test_model_round_trip(name: str) -> None:
    path = catalog.resolve("model", name)
    from_path = catalog.load_model(path)
    from_dict = model_from_hf_config(json.loads(path.read_text()), name=name)
    assert from_path == from_dict
    assert ModelSpec(**from_path.to_dict()) == from_path
    assert catalog.model_metadata(name).get("source")


def test_nvlink_domain_spans_72_on_nvl72() -> None:
    c = catalog.load_cluster("gb200-nvl72", num_nodes=18)
    assert c.devices_per_node == 4 and c.num_devices == 72
    assert c.level_for_group(72).name == c.levels[0].name
    assert c.level_for_group(73) is c.levels[-1]


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(ValueError, match="did you mean llama-3.1-70b"):
        catalog.load_model("llama-3.1-70")
    with pytest.raises(ValueError, match="unknown cluster"):
        catalog.load_cluster("no-such-cluster")


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.json"):
        catalog.load_model(tmp_path / "nope.json")


def test_bad_device_toml_names_file_and_key(tmp_path: Path) -> None:
    src = catalog.resolve("device", "h100-sxm5-80gb").read_text()
    bad = tmp_path / "dev.toml"
    bad.write_text(src.replace("hbm_bandwidth_TBps", "hbm_bandwith_TBps"))
    with pytest.raises(ValueError, match=r"dev\.toml.*hbm_bandwith_TBps"):
        catalog.load_device(bad)
    bad.write_text(src.replace("bf16 = 989.4", "bf16 = -1"))
    with pytest.raises(ValueError, match=r"dev\.toml.*bf16"):
        catalog.load_device(bad)
    bad.write_text("id = [")
    with pytest.raises(ValueError, match=r"dev\.toml: not valid TOML"):
        catalog.load_device(bad)
