"""Acting on the cluster: the pools' CapacityBuffers written from the served values.

- ``writer``: the CapacityBuffer writer: sizes each pool's buffer after every refresh and writes those
  that changed, when this replica holds the Lease (or, with shards, the pool's sizing series).
- ``buffer_sizing``: how many chunks each pool's buffer should hold, and the status it reports.
"""
