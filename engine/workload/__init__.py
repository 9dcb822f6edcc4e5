"""Workloads: what the network carries (TCP flows, or training loops issuing collectives)."""

from .files import check_workload_files
from .flows import FlowsDriver
from .layers import WorkloadSpec, parse_astra, workload_spec
from .training import TrainingLoop

__all__ = ["FlowsDriver", "TrainingLoop", "WorkloadSpec", "check_workload_files", "parse_astra", "workload_spec"]
