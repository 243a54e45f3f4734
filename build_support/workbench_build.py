"""The project's PEP 517 build backend: setuptools', plus the data files in editable wheels.

A wheel built by ``setuptools.build_meta`` carries ``[tool.setuptools.data-files]`` (the prebuilt JupyterLab
extension under ``share/jupyter/labextensions/parallelism-workbench`` and the config that enables its server
extension under ``etc/jupyter/jupyter_server_config.d``), which pip installs under ``sys.prefix`` where
JupyterLab and Jupyter Server look. The *editable* wheel of ``pip install -e .`` leaves them out (setuptools
84's ``editable_wheel`` asks the distribution ``has_data()``, which does not exist, so ``install_data`` never
runs), and Jupyter would not see the extension. ``build_editable`` here adds them to the editable wheel under
``<name>-<version>.data/data/`` (the wheel format's data scheme, PEP 427) with their RECORD lines, so both
installs register the extension with no step by hand. The files are copies: after rebuilding the TypeScript
(``cd labextension && npm run build:prod``) run ``pip install -e .`` again, or
``jupyter labextension develop --overwrite .`` for a link.

Everything else is ``setuptools.build_meta`` unchanged.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import tomllib
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the whole PEP 517 interface, re-exported)


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' editable wheel with the data files of ``pyproject.toml`` added (see the module doc)."""
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_data_files(Path(wheel_directory) / name, data_files(Path.cwd()))
    return name


def data_files(root: Path) -> dict[str, Path]:
    """``[tool.setuptools.data-files]`` of ``root/pyproject.toml`` as {install path: source file}.

    Install paths are relative to the data scheme (``sys.prefix``); patterns are globs relative to ``root``,
    as setuptools reads them. Raises FileNotFoundError for a pattern that matches no file (a build that would
    silently ship without the extension).
    """
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    table = config.get("tool", {}).get("setuptools", {}).get("data-files", {})
    files: dict[str, Path] = {}
    for dest, patterns in table.items():
        for pattern in patterns:
            matches = sorted(glob.glob(str(root / pattern)))
            if not matches:
                raise FileNotFoundError(
                    f"pyproject.toml [tool.setuptools.data-files] {dest!r}: {pattern!r} matches no file"
                )
            for match in matches:
                if os.path.isfile(match):
                    files[f"{dest}/{os.path.basename(match)}"] = Path(match)
    return files


def add_data_files(wheel: Path, files: dict[str, Path]) -> None:
    """Rewrite ``wheel`` with ``files`` under its ``.data/data/`` folder and their RECORD lines (sha256, size).

    Paths already in the wheel are left as they are (a setuptools that installs the data itself wins).
    """
    with zipfile.ZipFile(wheel) as old:
        entries = [(info, old.read(info)) for info in old.infolist()]
    names = {info.filename for info, _ in entries}
    (record_name,) = [n for n in names if n.endswith(".dist-info/RECORD")]
    data_dir = record_name.split("/", 1)[0].removesuffix(".dist-info") + ".data/data"
    added = {
        f"{data_dir}/{dest}": src.read_bytes()
        for dest, src in files.items()
        if f"{data_dir}/{dest}" not in names
    }
    if not added:
        return
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as new:
        for info, payload in entries:
            if info.filename == record_name:
                payload += "".join(_record_line(n, b) for n, b in added.items()).encode()
                new.writestr(info, payload)
            else:
                new.writestr(info, payload)
        for path, payload in added.items():
            new.writestr(path, payload)
    tmp.replace(wheel)


def _record_line(path: str, payload: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(payload)}\n"
