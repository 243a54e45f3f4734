"""The catalog commands through the real console script."""

from __future__ import annotations

import json

import pytest


def test_models_json(workbench_cli) -> None:
    rows = json.loads(workbench_cli("models", "--json", check=True).stdout)
    by_id = {r["id"]: r for r in rows}
    assert by_id["llama-3.1-405b"]["parameters"] == pytest.approx(405.9e9, rel=0.005)
    assert by_id["mixtral-8x7b"]["architecture"] == "moe"


def test_devices_and_clusters_tables(workbench_cli) -> None:
    out = workbench_cli("devices", check=True).stdout
    assert "h100-sxm5-80gb" in out and "989" in out
    clusters = json.loads(workbench_cli("clusters", "--json", check=True).stdout)
    dgx = next(c for c in clusters if c["id"] == "dgx-h100")
    assert dgx["devices_per_node"] == 8 and dgx["levels"][0]["bytes_per_s"] == 450e9


def test_show_model(workbench_cli) -> None:
    data = json.loads(workbench_cli("show", "model", "llama-3.1-70b", "--json", check=True).stdout)
    assert data["parameters"] == pytest.approx(70.6e9, rel=0.005)
    assert data["weights_bytes"]["bf16"] == 2 * data["parameters"]
    table = workbench_cli("show", "model", "llama-3.1-70b", check=True).stdout
    assert "active parameters" in table and "70.55B" in table


def test_show_model_from_path(workbench_cli, tmp_path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "architectures": ["GPT2LMHeadModel"],
                "n_embd": 768,
                "n_head": 12,
                "n_layer": 12,
                "n_positions": 1024,
                "vocab_size": 50257,
            }
        )
    )
    data = json.loads(workbench_cli("show", "model", str(cfg), "--json", check=True).stdout)
    assert data["parameters"] == 124_439_808


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "model", "llama-3.1-7b"], "did you mean"),
        (["show", "model", "/nonexistent/config.json"], "no such model file"),
        (["show", "model", "llama-3.1-8b", "--seq-len", "0"], "seq-len"),
        (["nosuchcommand"], "No such command"),
    ],
)
def test_bad_input_is_one_clean_line(workbench_cli, args: list[str], message: str) -> None:
    proc = workbench_cli(*args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_bad_config_file_is_named(workbench_cli, tmp_path) -> None:
    cfg = tmp_path / "broken.json"
    cfg.write_text("{not json")
    proc = workbench_cli("show", "model", str(cfg))
    assert (
        proc.returncode == 1
        and "broken.json: not valid JSON" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_devices_say_which_kernel_tables_were_measured(workbench_cli) -> None:
    """A device with a committed microbench folder reads a measured table (dated as its provenance says);
    the rest read the published ones."""
    import tomllib
    from pathlib import Path

    measured = Path(__file__).resolve().parents[1] / "profiles" / "measured"
    rows = {r["id"]: r for r in json.loads(workbench_cli("devices", "--json", check=True).stdout)}
    for device in ("h100-sxm5-80gb", "h200-sxm-141gb"):
        prov = tomllib.loads((measured / f"kernels-{device}" / "kernels.toml").read_text())["provenance"]
        table = rows[device]["kernel_table"]
        assert table["measured"] and table["date"] == prov["date"][:10]
        assert table["source"].startswith("workbench microbench")
    assert rows["a100-sxm4-80gb"]["kernel_table"]["measured"] is False
    assert "measured 2026-11-28" in workbench_cli("devices", check=True).stdout
