"""Hugging Face hub ids (``org/name``) resolved to a ``config.json`` in the local cache, offline.

The cache layout is huggingface_hub's documented one (https://huggingface.co/docs/huggingface_hub/guides/manage-cache):
``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``, ``$HF_HOME`` defaulting to ``~/.cache/huggingface``) holds
``models--{org}--{name}/refs/{revision}`` (a file naming the commit) and ``models--{org}--{name}/snapshots/{commit}/``
with the files. Nothing is downloaded: a missing file is reported with the command and the place that supply it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
"""``org/name`` as the hub spells repository ids (letters, digits, ``-``, ``_``, ``.``)."""


def hub_cache_dir() -> Path:
    """``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (huggingface_hub's order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or str(Path("~/.cache/huggingface").expanduser())
    return Path(home) / "hub"


def is_hub_id(text: str) -> bool:
    """True for ``org/name`` with no file suffix (``.json``, ``.toml``)."""
    return bool(HUB_ID.fullmatch(text)) and not text.endswith((".json", ".toml"))


def cached_config(repo_id: str, revision: str = "main") -> Path:
    """The cached ``config.json`` of ``repo_id`` at ``revision`` (a ref such as ``main`` or a commit hash).

    huggingface_hub's own ``try_to_load_from_cache`` answers when it is installed; otherwise the layout above is
    read directly. Raises ValueError naming the cache folder, the file to download and the command that
    downloads it."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # not installed: the documented layout
        pass
    else:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir(), revision=revision)
        if isinstance(found, str):
            return Path(found)
    repo = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / revision
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    candidate = repo / "snapshots" / commit / "config.json"
    if candidate.is_file():
        return candidate
    snapshots = sorted((repo / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    if snapshots and not ref.is_file():
        return snapshots[-1]
    raise ValueError(
        f"hub id {repo_id!r}: no config.json in the local Hugging Face cache ({repo}); nothing is downloaded here. "
        f"Fetch it with `hf download {repo_id} config.json` (huggingface_hub, offline afterwards), or save "
        f"https://huggingface.co/{repo_id}/resolve/{revision}/config.json and pass its path"
    )
