"""What is served: the snapshot the APIs read, where each value comes from, and its copy on disk.

- ``provider``: the immutable snapshot of served values behind a narrow interface (``SnapshotProvider``),
  with staleness and the fallback when a value is missing.
- ``provenance``: the typed record behind every served value: its inputs and what shaped it.
- ``persistence``: the last served values in the state directory, so a restarted service answers at once.
"""
