"""Who runs on the Ready GPUs: real pods preempt placeholders; FIFO with backfill; fluid demand."""

from __future__ import annotations

import numpy as np

from autoscaler.simulation.cluster import ClusterState
from autoscaler.simulation.inputs import Pods


def _pods(arrival, gpus, duration=None) -> Pods:
    arrival = np.asarray(arrival, dtype=np.float64)
    duration = np.full(len(arrival), 3600.0) if duration is None else np.asarray(duration, dtype=np.float64)
    return Pods(arrival, duration, np.asarray(gpus, dtype=np.int64), np.zeros(len(arrival), dtype=bool))


def test_real_pod_preempts_placeholders_at_once():
    cluster = ClusterState(_pods([10.0], [4]))
    cluster.placeholders = 8
    cluster.allocate(0.0, capacity=8)
    assert cluster.placeholders_running == 8
    cluster.advance(10.0)
    cluster.allocate(10.0, capacity=8)
    assert cluster.pods_running == 4
    assert cluster.started[0] == 10.0  # no wait: the placeholders made room
    assert cluster.placeholders_running == 4  # the other 4 placeholders are Pending now
    assert cluster.wanted_gpus() == 12  # what the provisioner now sees: 4 real + 8 placeholders


def test_fifo_with_backfill():
    cluster = ClusterState(_pods([0.0, 1.0, 2.0], [8, 2, 8]))
    cluster.advance(2.0)
    cluster.allocate(2.0, capacity=4)
    # The 8-GPU pod does not fit in 4 GPUs; the 2-GPU pod behind it does; the last waits.
    assert np.isnan(cluster.started[0]) and cluster.started[1] == 2.0 and np.isnan(cluster.started[2])
    cluster.allocate(5.0, capacity=12)  # a node turned Ready: the oldest waiting pod goes first
    assert cluster.started[0] == 5.0 and np.isnan(cluster.started[2])


def test_pods_finish_and_release_their_gpus():
    cluster = ClusterState(_pods([0.0], [8], duration=[60.0]))
    cluster.advance(0.0)
    cluster.allocate(0.0, capacity=8)
    assert cluster.next_event() == 60.0
    cluster.advance(60.0)
    cluster.allocate(60.0, capacity=8)
    assert cluster.pods_running == 0 and cluster.real_requested == 0
    assert cluster.free_gpus(8) == 8


def test_fluid_demand_waits_in_line_with_pods():
    cluster = ClusterState(_pods([30.0], [8]))
    cluster.fluid_wanted = 10
    cluster.allocate(0.0, capacity=8)  # 2 GPUs of fluid demand wait since 0 s
    assert cluster.fluid_running == 8
    cluster.advance(30.0)
    cluster.allocate(30.0, capacity=16)  # fluid demand was first in line
    assert cluster.fluid_running == 10
    assert np.isnan(cluster.started[0])  # 6 GPUs left: the 8-GPU pod waits
    cluster.fluid_wanted = 4  # demand fell: its GPUs are released
    cluster.allocate(40.0, capacity=16)
    assert cluster.fluid_running == 4 and cluster.started[0] == 40.0


def test_pods_running_before_the_start_keep_running():
    cluster = ClusterState(_pods([-100.0, -50.0, 10.0], [2, 2, 2], duration=[60.0, 120.0, 60.0]))
    cluster.start_running(0.0)
    assert cluster.pods_running == 2 and cluster.real_requested == 2  # the first ended at -40 s
    assert cluster.next_event() == 10.0
