"""MkDocs hook (mkdocs.yml ``hooks:``): the build fails when a generated reference is out of date.

docs/generated/*.md are made from the code by scripts/docs_reference.py and committed; a page includes them.
Checking here rather than regenerating keeps the committed files the ones a reader of the repository sees.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_reference  # noqa: E402  (scripts/ is not a package)


def on_pre_build(config: Any, **kwargs: Any) -> None:
    out_of_date = docs_reference.stale()
    if out_of_date:
        raise PluginError(f"generated reference out of date: {', '.join(out_of_date)}; "
                          "run .venv/bin/python scripts/docs_reference.py")
