"""What a reporting command prints and writes: its report as JSON or a table, and its picture."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from autoscaler.commands.errors import writing


def emit(
    report: dict[str, Any],
    output_format: str,
    render_table: Callable[[dict[str, Any]], None],
    plot_path: Path | None,
    plot: Callable[[Path], object],
) -> None:
    """The report on stdout (JSON or a table), then the picture when a path was given."""
    if output_format == "json":
        click.echo(json.dumps(report, indent=2))
    else:
        render_table(report)
    if plot_path is not None:
        with writing(plot_path):
            plot(plot_path)
