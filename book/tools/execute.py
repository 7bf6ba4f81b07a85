"""Execute the book's notebooks before Sphinx sees them, with a time limit per cell.

MyST-NB would execute them too, but a cell that hangs there costs the whole timeout and comes
out as one warning among many, without saying which cell.  Here each notebook runs in a fresh
kernel, one at a time, with a progress line per notebook; a cell that raises, prints an error
output (a figure whose ``_repr_*_`` raised: IPython shows that as an output and carries on), or
runs longer than ``--cell-timeout`` stops the build with the notebook's name, the cell's id and
its first line.  The executed notebooks are written back in place; the book then builds with
``execute_notebooks: off``.

    python book/tools/execute.py build/book/notebooks --cell-timeout 120
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


class NotebookFailed(Exception):
    pass


def _where(nb_path: Path, cell: dict) -> str:
    first = next((line for line in str(cell.get("source", "")).splitlines() if line.strip()), "")
    return f"{nb_path.stem}: cell {cell.get('id', '?')} ({first[:70]!r})"


def execute(path: Path, cell_timeout: int, kernel: str = "python3") -> float:
    """Run one notebook in place; returns its run time.  Raises NotebookFailed naming the cell."""
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=cell_timeout, kernel_name=kernel,
                                     resources={"metadata": {"path": str(path.parent)}})
    t0 = time.monotonic()
    current: dict = {}

    def on_cell_start(cell: dict, cell_index: int) -> None:
        current["cell"] = cell

    client.on_cell_start = on_cell_start
    try:
        client.execute()
    except CellTimeoutError:
        raise NotebookFailed(f"{_where(path, current.get('cell', {}))} ran longer than {cell_timeout} s "
                             "(the per-cell limit): it hangs or waits for something") from None
    except CellExecutionError as err:
        ename = getattr(err, "ename", "error")
        evalue = getattr(err, "evalue", "")
        raise NotebookFailed(f"{_where(path, current.get('cell', {}))} raised {ename}: {evalue}") from None
    except DeadKernelError:
        raise NotebookFailed(f"{_where(path, current.get('cell', {}))}: the kernel died") from None
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise NotebookFailed(f"{_where(path, cell)} shows an error output ({out.get('ename')}: "
                                     f"{out.get('evalue')}), though the cell itself did not fail")
    nbformat.write(nb, path)
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--cell-timeout", type=int, default=120, help="seconds one cell may run (default 120)")
    args = ap.parse_args(argv)
    paths = sorted(args.directory.glob("*.ipynb"))
    if not paths:
        print(f"execute: no notebooks in {args.directory}", file=sys.stderr)
        return 1
    failed = []
    for i, p in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {p.stem} ...", end=" ", flush=True)
        try:
            print(f"{execute(p, args.cell_timeout):.1f} s", flush=True)
        except NotebookFailed as err:
            print("FAILED", flush=True)
            failed.append(str(err))
    for f in failed:
        print(f"NOTEBOOK FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
