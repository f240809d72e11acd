"""How every command reports an error: two kinds, told apart by the exit code.

- A usage error is ``click.UsageError`` (``click.BadParameter`` for one flag's value): a bad flag or
  value, an input given on the command line that cannot be read or used (a missing or malformed
  CSV, a query that returns several series), an invalid settings file. Exit code 2; click prints
  the usage line, a hint, and ``Error: <message>`` on stderr.
- A runtime failure is :class:`CommandFailed`: the input is fine but the work cannot be done (a
  port in use, Prometheus unreachable, a fit that fails, a plot that cannot be written). Exit code
  1 and one line ``error: <message>`` on stderr.

Commands never call ``sys.exit`` themselves, and stdout carries results only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click


class CommandFailed(click.ClickException):
    """A runtime failure: exit code 1, ``error: <message>`` on one line of stderr."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        # One line, whatever the underlying error's message holds: scripts read the first line.
        super().__init__(" ".join(message.split()))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file, err=file is None)


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turns an ``OSError`` while writing an output file (a full disk, no permission) into a runtime
    failure naming the file."""
    try:
        yield
    except OSError as error:
        raise CommandFailed(f"cannot write {path}: {error.strerror or error}") from None
