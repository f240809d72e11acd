"""A progress bar for long commands, shown only when a person is watching (stderr is a terminal)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # forecast.types imports pandas; `--help` does not need it
    from forecast.types import ProgressCallback


@contextmanager
def progress_bar(description: str) -> Iterator[ProgressCallback | None]:
    """Yields ``update(done, total)``, or None when stderr is not a terminal (scripts, CI)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
