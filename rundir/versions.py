"""Which kchaos this is: for ``kchaos --version`` and results.json (no cluster library imported)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def kchaos_version() -> str:
    """The installed package's version (pyproject.toml), or "unknown" when run from an uninstalled tree."""
    try:
        return version("kchaos")
    except PackageNotFoundError:
        return "unknown"
