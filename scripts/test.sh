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
# jupyter (notebooks, JupyterLab launcher), hf (transformers, the oracle of the config readers), launch-check (the
# stacks' own config parsers for the exports) and docs (the documentation site). torch pinned to the CPU build for
# tests only (constraints/ci.txt); users install '.[torch]' unpinned.
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q -c constraints/ci.txt -e '.[torch,dev,app,jupyter,hf,launch-check,docs]'

# The prebuilt JupyterLab extension and its server config come with the install (the project's build backend,
# build_support/workbench_build.py, puts the data files in the editable wheel too): nothing to link by hand.

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
# The documentation site: every page, the CLI reference and the API pages build with no warning.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"

set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
