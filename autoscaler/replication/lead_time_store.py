"""NodeClaim lead-time samples in the state directory, so that a restarted service keeps what it
learned even without publication (NodeClaims consolidated away are in no list any more)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from adapters.kubernetes.nodeclaims import LeadTimeSample
from autoscaler.replication.forecast_objects import read_sample, sample_item
from autoscaler.state_files import UnusableFile, read_versioned_list, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "lead-time-samples.json"
FORMAT_VERSION = 1


def save(path: Path, samples: Iterable[LeadTimeSample]) -> None:
    write_atomically(path, {"version": FORMAT_VERSION, "samples": [sample_item(sample) for sample in samples]})


def load(path: Path) -> list[LeadTimeSample]:
    """The samples saved at ``path``; none (and a logged error) when the file cannot be used; a bad
    sample is logged and skipped."""
    try:
        items = read_versioned_list(path, FORMAT_VERSION, "samples")
    except UnusableFile as error:
        log.error("lead-time samples in %s not restored: %s", path, error)
        return []
    samples: list[LeadTimeSample] = []
    for index, item in enumerate(items):
        sample = read_sample(item)
        if isinstance(sample, str):
            log.error("lead-time sample %d in %s skipped: %s", index, path, sample)
        else:
            samples.append(sample)
    return samples
