"""Workloads: what the network carries (TCP flows, or training loops issuing collectives)."""

from .files import check_workload_files
from .flows import FlowsWorkload
from .layers import WorkloadSpec, parse_astra, workload_spec
from .training import TrainingLoop

__all__ = ["FlowsWorkload", "TrainingLoop", "WorkloadSpec", "check_workload_files", "parse_astra", "workload_spec"]
