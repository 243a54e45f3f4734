#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine and run it: lint, types, tests.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Every extra the tests need: torch (backends), dev (pytest, linters, browser and notebook drivers), app (Panel),
# jupyter (notebooks, JupyterLab launcher) and hf (transformers, the oracle of the config readers). torch pinned to the CPU build for tests only
# (constraints/ci.txt); users install '.[torch]' unpinned.
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q -c constraints/ci.txt -e '.[torch,dev,app,jupyter,hf,launch-check]'

# The prebuilt JupyterLab extension and the config enabling its server extension: a wheel installs both as data
# files, an editable install does not, so link the committed build and copy the config into the venv.
ext=.venv/share/jupyter/labextensions/parallelism-workbench
mkdir -p "$(dirname "$ext")" .venv/etc/jupyter/jupyter_server_config.d
rm -rf "$ext" && ln -s "$PWD/share/jupyter/labextensions/parallelism-workbench" "$ext"
cp labextension/jupyter-config/jupyter_server_config.d/parallelism-workbench.json .venv/etc/jupyter/jupyter_server_config.d/

# Browser tests drive Debian's chromium (never a downloaded browser).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing chromium (Debian) for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "warning: /usr/bin/chromium missing and not root: browser tests will be skipped" >&2
  fi
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
