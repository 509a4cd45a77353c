#!/usr/bin/env bash
# `make lock`: refresh constraints.txt, the versions `make setup` installs. pyproject.toml's dependencies
# (with the test and lint extras) are resolved afresh, at the newest versions it allows, in a throw-away
# virtualenv, and what got installed is written down. Commit the new constraints.txt: the next
# `make setup` reinstalls .venv from it (its hash is part of the set-up stamp).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=$(command -v python3.11 || command -v python3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
"$work/venv/bin/pip" install -q -e '.[test,lint,docs]'
{
  echo "# The Python versions \`make setup\` installs (pip install -c constraints.txt -e '.[test,docs]')."
  echo "# Made by \`make lock\` (scripts/lock.sh) from pyproject.toml; edit that, not this, then run it again."
  "$work/venv/bin/pip" freeze --exclude-editable
} >"$work/constraints.txt"
mv "$work/constraints.txt" constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pinned packages"
