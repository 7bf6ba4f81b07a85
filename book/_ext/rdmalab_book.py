"""Small fixes for an offline Jupyter Book 1 build (a local Sphinx extension).

* Jupyter Book 1 with Sphinx 7.4 registers some extensions' inline scripts twice; the second
  ``const THEBE_JS_URL = ...`` is a JavaScript error in every page.  Thebe (live code cells
  from a CDN) is off in this book anyway, so its scripts are dropped, and any other script
  that appears twice is kept once.
"""

from __future__ import annotations

from typing import Any


def _clean_scripts(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    kept = []
    for js in scripts:
        attrs = getattr(js, "attributes", {}) or {}
        body = str(attrs.get("body", ""))
        if "thebe" in str(js) or "THEBE_JS_URL" in body:
            continue
        key = (str(js), tuple(sorted((k, str(v)) for k, v in attrs.items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(js)
    context["script_files"] = kept


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _clean_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
