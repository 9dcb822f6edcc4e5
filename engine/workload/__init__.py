"""Workloads: what the network carries (TCP flows, or training loops issuing collectives)."""

from .flows import FlowsWorkload
from .layers import WorkloadSpec, parse_astra, workload_spec
from .training import TrainingLoop

__all__ = ["FlowsWorkload", "TrainingLoop", "WorkloadSpec", "parse_astra", "workload_spec"]
