"""Trace files: recorded series read back.

- ``replay``: replaying a recorded trace as if it were live (the demo's signal source).
"""
