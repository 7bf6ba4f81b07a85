"""No notebook shows an exercise's answer above the exercise (issue 36, item 3): the rules.

tests/lab/test_notebooks.py runs every notebook's instructor version (with the check log on) and reads
each exercise's right answer from the log (``answer``, decoded with :func:`rdmalab.lab.answers.decode`:
:func:`answers`); then it runs the student version, as the same student (the variant is the same), and
calls :func:`leaks` on it: for each exercise cell (the cell with ``lab.check("id"``) everything a learner sees above
it in that notebook is searched for the answer: every Markdown cell, every stream output, the
``text/plain`` of an output that has nothing richer to show, and ``text/html`` with its tags stripped.

What counts as the answer's distinctive text:

* a number of 3 or more digits (an int as decimal and as ``0x`` hex, a float as Python writes it);
* a string holding a digit, of 3 or more characters ("0x1a2b", "PSN 75896732");
* bytes of 2 or more, as hex (``b1f2757b``, ``b1 f2 75 7b``, ``b1:f2:75:7b``);
* a list or tuple of 2 or more items whose texts make 6 or more characters: its items in order
  (a list of names, a list of PSNs), each within 60 characters of the one before;
* a dict or set: each of its values by the rules above.

Skipped, and why:

* numbers of 1 or 2 digits, bools, ``None``, a one-byte value: such text is everywhere on a page
  (a count of 5 packets, a port index), so finding it says nothing;
* strings without a digit (an opcode name, "requester", "PSN Sequence Error"): they are the
  vocabulary the text teaches, and a question about them is written in those words; a list of
  them in order is checked;
* program answers (a function, judged by what it does: reported as a ``Run``) and answers that
  are not values (``Opaque``, a work completion): there is no text to look for;
* SVG figures (``image/svg+xml``, and an ``<svg>`` inside ``text/html``) and the ``text/plain``
  behind a rich output (a ladder's list of arrows): the exercises send the learner to read the
  figures; a label that states an answer outright is caught by ``GIVEAWAYS`` in
  tests/lab/test_notebooks.py.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from rdmalab.lab.answers import Opaque, Raised, Run, decode

nbformat = pytest.importorskip("nbformat")

_GAP = 60  # characters allowed between two items of a list answer


def _number(n: int) -> list[str]:
    if abs(n) < 100:
        return []
    pats = [rf"(?<![\w.]){n}(?![\w])"]
    if n > 0:
        pats.append(rf"\b0x0*{n:x}\b")
    return pats


def _item_text(v: Any) -> str | None:
    """The literal text of one item of a list answer (None: an item with no text form)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, str)):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, bytes):
        return v.hex()
    return None


def needles(answer: Any) -> tuple[list[str], str]:
    """Regular expressions for the answer's distinctive text, and why nothing is looked for when none."""
    if isinstance(answer, (Run, Raised)) or callable(answer):
        return [], "a program answer"
    if isinstance(answer, Opaque):
        return [], "not a value"
    if isinstance(answer, bool) or answer is None or answer is Ellipsis:
        return [], "a bool or None"
    if isinstance(answer, int):
        return (_number(answer), "") if abs(answer) >= 100 else ([], "a number of fewer than 3 digits")
    if isinstance(answer, float):
        digits = len(re.sub(r"\D", "", repr(answer)).lstrip("0"))
        if digits < 3:
            return [], "a number of fewer than 3 digits"
        pats = [rf"(?<![\w.]){re.escape(repr(answer))}(?![\d])"]
        if answer.is_integer():
            pats += _number(int(answer))
        return pats, ""
    if isinstance(answer, str):
        if len(answer) >= 3 and re.search(r"\d", answer):
            return [re.escape(answer)], ""
        return [], "a string without a digit (a name the text teaches)"
    if isinstance(answer, bytes):
        if len(answer) < 2:
            return [], "fewer than 2 bytes"
        hx = answer.hex()
        pairs = [hx[i:i + 2] for i in range(0, len(hx), 2)]
        return [re.escape(hx), r"\s".join(pairs), ":".join(pairs)], ""
    if isinstance(answer, (list, tuple)):
        texts = [_item_text(v) for v in answer]
        if len(answer) < 2 or any(t is None for t in texts) or sum(len(t or "") for t in texts) < 6:
            return [], "a list too short to be distinctive"
        bounded = [rf"(?<![\w.]){re.escape(t or '')}(?![\w])" for t in texts]
        return [rf".{{0,{_GAP}}}?".join(bounded)], ""
    if isinstance(answer, (dict, set, frozenset)):
        values = answer.values() if isinstance(answer, dict) else answer
        pats: list[str] = []
        why: list[str] = []
        for v in values:
            p, w = needles(v)
            pats += p
            if w:
                why.append(w)
        return pats, "" if pats else "no part distinctive (" + "; ".join(sorted(set(why))) + ")"
    return [], f"a {type(answer).__name__}"


def _strip_html(text: str) -> str:
    text = re.sub(r"(?is)<svg\b.*?</svg>", " ", text)
    text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def _joined(v: Any) -> str:
    return "".join(v) if isinstance(v, list) else str(v)


def shown(cell: dict[str, Any]) -> list[tuple[str, str]]:
    """What a learner sees of one cell: (where, text) pairs."""
    if cell["cell_type"] == "markdown":
        return [("markdown", _joined(cell["source"]))]
    out: list[tuple[str, str]] = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append((o.get("name", "stream"), _joined(o.get("text", ""))))
            continue
        data = o.get("data", {})
        if "text/html" in data:
            out.append(("text/html", _strip_html(_joined(data["text/html"]))))
        elif "text/plain" in data and not any(k.startswith("image/") or k.startswith("application/vnd.jupyter.widget")
                                                for k in data):
            out.append(("text/plain", _joined(data["text/plain"])))
    return out


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def leaks(nb: Any, answers: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(leaks, skipped) for one executed student notebook and the right answers by exercise."""
    found: list[str] = []
    skipped: list[str] = []
    above: list[tuple[int, str, str]] = []
    for i, cell in enumerate(nb.cells):
        src = _joined(cell.get("source", ""))
        for ex in re.findall(r"""lab\.check\(\s*["']([\w.-]+)["']""", src) if cell["cell_type"] == "code" else []:
            if ex not in answers:
                skipped.append(f"{ex}: no right answer in the instructor's log")
                continue
            pats, why = needles(answers[ex])
            if not pats:
                skipped.append(f"{ex}: {why}")
                continue
            for j, where, text in above:
                hit = next((m for p in pats if (m := re.search(p, _norm(text), re.IGNORECASE))), None)
                if hit is not None:
                    s = _norm(text)
                    ctx = s[max(0, hit.start() - 40):hit.end() + 40]
                    found.append(f"{ex}: cell {j} ({where}) holds {hit.group(0)[:80]!r}: ...{ctx}...")
        above += [(i, where, text) for where, text in shown(cell)]
    return found, skipped


def test_needles_find_what_they_should() -> None:
    """The matching rules themselves, on made-up pages (this file's own check that it can fail)."""
    assert needles(5) == ([], "a number of fewer than 3 digits")
    assert any(re.search(p, "expected PSN 75896732, got") for p in needles(75896732)[0])
    assert not any(re.search(p, "PSN 758967321") for p in needles(75896732)[0])
    assert any(re.search(p, "rkey=0x142A", re.I) for p in needles(0x142A)[0])
    assert any(re.search(p, "icrc b1 f2 75 7b") for p in needles(bytes.fromhex("b1f2757b"))[0])
    seq = needles(["SEND First", "SEND Middle", "SEND Last"])[0]
    assert re.search(seq[0], "1 SEND First psn 4, 2 SEND Middle psn 5, 3 SEND Last psn 6")
    assert not re.search(seq[0], "SEND Last, SEND Middle, SEND First")
    assert needles({"lost": 5, "code": "PSN Sequence Error"})[0] == []
    assert needles(Run.__new__(Run))[1] == "a program answer"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("The responder's QPN is 0x11."),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output(
            "display_data", {"text/html": "<b>length</b> <i>4123</i>", "text/plain": "<obj>"})]),
        nbformat.v4.new_code_cell('lab.check("demo.length", ...)'),
        nbformat.v4.new_code_cell('lab.check("demo.flag", ...)'),
    ])
    found, skipped = leaks(nb, {"demo.length": 4123, "demo.flag": True})
    assert len(found) == 1 and found[0].startswith("demo.length: cell 1 (text/html)")
    assert skipped == ["demo.flag: a bool or None"]


def answers(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each exercise's right answer, from the check log of an instructor run."""
    out: dict[str, Any] = {}
    for r in results:
        if r.get("status") == "pass" and "exercise" in r and r["exercise"] not in out:
            out[r["exercise"]] = decode(r["answer"])
    return out
