"""A progress bar on stderr (rich, from the `bench` extra), with the two calls the bench code uses.

Without rich installed the bar is silently a no-op: a lean serving install can still run `adaptspec simulate`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class _Bar:
    def __init__(self, progress, task) -> None:
        self._progress, self._task = progress, task

    def update(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def set_postfix_str(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, status=text)


@contextmanager
def progress_bar(total: int | None, desc: str, enabled: bool = True) -> Iterator[_Bar]:
    """`with progress_bar(n, "simulate") as bar: bar.update(1)`; a no-op when disabled."""
    if enabled:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ModuleNotFoundError:  # pip install 'adaptspec[bench]' for the bar; same results without
            enabled = False
    if not enabled:
        yield _Bar(None, None)
        return
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"))
    with Progress(*cols, console=Console(stderr=True), transient=True) as prog:
        yield _Bar(prog, prog.add_task(desc, total=total, status=""))
