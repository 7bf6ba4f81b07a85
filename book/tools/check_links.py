"""Check every internal link of the built book: the target file exists and so does the #anchor.

Sphinx's own `-n` (nitpicky) mode catches broken cross-references in the sources; this catches
what reaches the HTML (toctree links, notebook links, static assets, anchors).  External links
are listed, not fetched: the build is offline.  Exit status 1 if anything is broken.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if v is None:
                continue
            if k in ("id", "name"):
                self.ids.add(v)
            if (k == "href" and tag in ("a", "link")) or (k == "src" and tag in ("img", "script", "iframe")):
                self.links.append(v)


def main(root_arg: str) -> int:
    root = Path(root_arg).resolve()
    pages: dict[Path, _Collect] = {}
    for f in sorted(root.rglob("*.html")):
        if "_static" in f.relative_to(root).parts:
            continue  # theme template fragments (Jinja macros), not pages
        c = _Collect()
        c.feed(f.read_text(encoding="utf-8", errors="replace"))
        pages[f] = c
    broken: list[str] = []
    external: set[str] = set()
    checked = 0
    for f, c in pages.items():
        for link in c.links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https"):
                external.add(link)
                continue
            if parts.scheme in ("mailto", "data", "javascript") or link.startswith("//"):
                continue
            checked += 1
            target = f if not parts.path else (f.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{f.relative_to(root)}: {link} -> missing {target}")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{f.relative_to(root)}: {link} -> no anchor #{parts.fragment}")
    print(f"check_links: {len(pages)} pages, {checked} internal links checked, {len(external)} external links "
          "(not fetched offline)")
    for b in broken:
        print("BROKEN", b)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/book/_build/html"))
