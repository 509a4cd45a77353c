#!/usr/bin/env bash
# actionlint on every workflow in .github/workflows (and shellcheck on their run: steps when shellcheck is
# installed). actionlint: the one on PATH, else .venv's (the `lint` extra: `make lint-workflows` installs it).
# Exit 1: findings; 2: no actionlint.
set -euo pipefail
cd "$(dirname "$0")/.."
ACTIONLINT=$(command -v actionlint || echo .venv/bin/actionlint)
if [ ! -x "$ACTIONLINT" ]; then
  echo "lint-workflows: no actionlint; install it with: .venv/bin/pip install -c constraints.txt -e '.[lint]'" >&2
  exit 2
fi
command -v shellcheck >/dev/null 2>&1 || echo "lint-workflows: shellcheck is not installed: run: steps go unchecked" >&2
exec "$ACTIONLINT" .github/workflows/*.yml
