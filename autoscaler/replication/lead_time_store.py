"""NodeClaim lead-time samples in the state directory, so that a restarted service keeps what it
learned even without publication (NodeClaims consolidated away are in no list any more). A sample
created or ready later than now (``state_files.not_in_the_future``) is left out, named in the log:
it would never age out of the history."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

from adapters.kubernetes.nodeclaims import LeadTimeSample
from autoscaler.replication.forecast_objects import read_sample, sample_item
from autoscaler.state_files import Dropped, UnusableFile, not_in_the_future, read_versioned_list, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "lead-time-samples.json"
FORMAT_VERSION = 1


def save(path: Path, samples: Iterable[LeadTimeSample]) -> None:
    write_atomically(path, {"version": FORMAT_VERSION, "samples": [sample_item(sample) for sample in samples]})


def load(path: Path, now_s: float | None = None) -> list[LeadTimeSample]:
    """The samples saved at ``path``; none (and a logged error) when the file cannot be used; a bad
    sample is logged and skipped."""
    now_s = time.time() if now_s is None else now_s
    try:
        items = read_versioned_list(path, FORMAT_VERSION, "samples")
    except UnusableFile as error:
        log.error("lead-time samples in %s not restored: %s", path, error)
        return []
    samples: list[LeadTimeSample] = []
    dropped = Dropped(path, log)
    for index, item in enumerate(items):
        sample = read_sample(item)
        try:
            if isinstance(sample, str):
                raise ValueError(sample)
            # Ready is never before created: a created time ahead makes ready ahead too.
            not_in_the_future(sample.ready.timestamp(), now_s, "ready", sample.ready.isoformat())
        except ValueError as error:
            dropped.drop(f"lead-time sample {index}", error)
        else:
            samples.append(sample)
    dropped.done()
    return samples
