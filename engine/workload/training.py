"""The training loop: layers' compute and collectives with ASTRA-sim 1.0's overlap semantics.

- DATA: a layer's weight-gradient all-reduce is issued without blocking in the backward pass and
  waited for by the next iteration's forward pass of that layer (the last iteration waits at its end).
- HYBRID_DLRM: as DATA for the MLPs; the embedding's forward all-to-all is issued without blocking
  and waited for at the interaction (after the last bottom-MLP layer); the backward all-to-all is
  issued at the first top-MLP layer's backward pass and waited for at the embedding layer. The
  first layer computes no input gradient (nothing precedes it).
  With an input all-to-all (`WorkloadSpec.input_comm`: the sparse indices sent to their tables'
  NPUs), the next batch's is issued as the embedding's forward pass starts and waited for there
  in the next iteration (TorchRec's TrainPipelineSparseDist); the first iteration first waits for
  its own. A wait counts as the embedding's exposed forward communication.
- HYBRID_DLRM_ENHANCED: as HYBRID_DLRM, but the backward pass does not wait for the embedding's
  backward all-to-all (ASTRA-sim 1.0 waits for it only at the end of the run).
- MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA (ASTRA-sim 1.0's model-parallel loops): each layer's
  forward collective blocks after its forward compute; backward, layer by layer from the last, the
  input-gradient compute (the first layer's too), its collective issued without blocking (not for
  the first layer), the weight-gradient compute, the weight-gradient collective issued without
  blocking (not in MODEL) and waited for by the next iteration's forward pass of that layer, then a
  wait for the input-gradient collective before the next layer down. Collectives run over the
  dimensions ASTRA-sim 1.0 gives each pass (`MODEL_PARALLEL_DIMENSIONS`); where those are none of
  the network's, no collective is issued.
- MICRO: as DATA, but every iteration waits for its own collectives (a microbenchmark).
Any other collective blocks where it is issued. Time a pass waits for communication is that
layer's exposed communication (ASTRA-sim's EndToEnd breakdown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..eventlist import EventList
from ..system.collectives import CollectiveRecord, SystemLayer
from ..units import ps_to_s
from .layers import DLRM_PARALLELISM, MODEL_PARALLEL_DIMENSIONS, Comm, WorkloadSpec


class _Pending:
    """A collective in flight that a pass may have to wait for."""

    __slots__ = ("record", "done", "waiter")

    def __init__(self) -> None:
        self.record: CollectiveRecord | None = None
        self.done = False
        self.waiter: Callable[[], None] | None = None

    def finish(self) -> None:
        self.done = True
        if self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            waiter()


@dataclass
class LayerStats:
    """Compute and exposed communication of one layer in one iteration, in ps."""

    fwd_compute_ps: int = 0
    ig_compute_ps: int = 0
    wg_compute_ps: int = 0
    fwd_exposed_ps: int = 0
    ig_exposed_ps: int = 0
    wg_exposed_ps: int = 0


@dataclass
class IterationStats:
    """Start and end of one iteration and its per-layer statistics."""

    start_ps: int
    end_ps: int = -1
    layers: list[LayerStats] = field(default_factory=list)


class TrainingLoop:
    """Runs `iterations` of a `WorkloadSpec` on a `SystemLayer` (all NPUs in step: the workload
    is symmetric, so one driver stands for every NPU)."""

    def __init__(self, eventlist: EventList, system: SystemLayer, spec: WorkloadSpec, iterations: int) -> None:
        self.eventlist = eventlist
        self.system = system
        self.spec = spec
        self.iterations = iterations
        self.stats: list[IterationStats] = []
        self._weight_grads: dict[int, _Pending] = {}  # layer -> its last weight-gradient collective
        self._embedding_fwd: _Pending | None = None
        self._embedding_bwd: _Pending | None = None
        self._next_input: _Pending | None = None  # the next iteration's input all-to-all
        self._unwaited: list[_Pending] = []  # HYBRID_DLRM_ENHANCED: backward all-to-alls, waited for at the end
        self._dimensions = MODEL_PARALLEL_DIMENSIONS.get(spec.parallelism)

    @property
    def finished(self) -> bool:
        """True once every iteration has ended."""
        return len(self.stats) == self.iterations and self.stats[-1].end_ps >= 0

    def start(self) -> None:
        """Begin the first iteration at the current time."""
        self._start_iteration()

    # -- building blocks (continuation style: each takes what to do next) ----------------------

    def _compute(self, duration_ps: int, then: Callable[[], None]) -> None:
        if duration_ps:
            self.eventlist.call_at(self.eventlist.now_ps + duration_ps, then)
        else:
            then()

    def _issue(self, comm: Comm, layer: int, dimensions: tuple[int, ...] | None = None) -> _Pending:
        assert comm.op is not None
        pending = _Pending()
        pending.record = self.system.collective(comm.op, comm.size_bytes, pending.finish,
                                                layer=self.spec.layers[layer].name,
                                                iteration=len(self.stats) - 1, dimensions=dimensions)
        return pending

    def _issue_in_pass(self, comm: Comm, layer: int, pass_name: str) -> _Pending | None:
        """Model-parallel loops: issue the pass's collective over the dimensions ASTRA-sim 1.0 gives
        it; None if there is none (no collective, or none of the network's dimensions take part)."""
        assert self._dimensions is not None
        involved = self._dimensions[pass_name]
        if comm.op is None or involved is None:
            return None
        if involved == "all":
            return self._issue(comm, layer)
        real = self.system.real_dimensions
        dimensions = (0,) if involved == "first" else tuple(range(1, real))
        return self._issue(comm, layer, dimensions) if dimensions else None

    def _wait(self, pending: _Pending | None, charge: Callable[[int], None], then: Callable[[], None]) -> None:
        """Continue with `then` once `pending` is done; the time waited is charged as exposed."""
        if pending is None or pending.done:
            then()
            return
        started = self.eventlist.now_ps

        def resume() -> None:
            waited = self.eventlist.now_ps - started
            charge(waited)
            assert pending.record is not None
            pending.record.exposed_ps += waited
            then()

        pending.waiter = resume

    def _blocking(self, comm: Comm, layer: int, charge: Callable[[int], None], then: Callable[[], None]) -> None:
        if comm.op is None:
            then()
        else:
            self._wait(self._issue(comm, layer), charge, then)

    def _layer_stats(self, layer: int) -> LayerStats:
        return self.stats[-1].layers[layer]

    # -- the loop ------------------------------------------------------------------------------

    def _start_iteration(self) -> None:
        self.stats.append(IterationStats(self.eventlist.now_ps, layers=[LayerStats() for _ in self.spec.layers]))
        if self._dimensions is not None:
            self._forward_model(0)
        else:
            self._forward(0)

    def _forward_model(self, index: int) -> None:
        """Model-parallel forward pass: compute, then the layer's collective, blocking."""
        if index == len(self.spec.layers):
            self._backward_model(len(self.spec.layers) - 1)
            return
        layer, stats = self.spec.layers[index], self._layer_stats(index)

        def charge_wg(ps: int) -> None:
            stats.wg_exposed_ps += ps

        def charge_fwd(ps: int) -> None:
            stats.fwd_exposed_ps += ps

        def after_compute() -> None:
            self._wait(self._issue_in_pass(layer.fwd_comm, index, "fwd"), charge_fwd,
                       lambda: self._forward_model(index + 1))

        def compute() -> None:
            stats.fwd_compute_ps += layer.fwd_compute_ps
            self._compute(layer.fwd_compute_ps, after_compute)

        self._wait(self._weight_grads.pop(index, None), charge_wg, compute)

    def _backward_model(self, index: int) -> None:
        """Model-parallel backward pass of one layer: input-gradient compute and collective (not
        blocking), weight-gradient compute and collective (not blocking), then the wait for the
        input-gradient collective."""
        if index < 0:
            self._end_iteration()
            return
        layer, stats = self.spec.layers[index], self._layer_stats(index)
        input_grad: list[_Pending | None] = [None]

        def charge_ig(ps: int) -> None:
            stats.ig_exposed_ps += ps

        def after_ig_compute() -> None:
            if index > 0:  # nothing below the first layer needs its input gradient
                input_grad[0] = self._issue_in_pass(layer.ig_comm, index, "ig")
            stats.wg_compute_ps += layer.wg_compute_ps
            self._compute(layer.wg_compute_ps, after_wg_compute)

        def after_wg_compute() -> None:
            weight_grad = self._issue_in_pass(layer.wg_comm, index, "wg")
            if weight_grad is not None:
                self._weight_grads[index] = weight_grad
            self._wait(input_grad[0], charge_ig, lambda: self._backward_model(index - 1))

        stats.ig_compute_ps += layer.ig_compute_ps
        self._compute(layer.ig_compute_ps, after_ig_compute)

    def _forward(self, index: int) -> None:
        if index == len(self.spec.layers):
            self._backward(len(self.spec.layers) - 1)
            return
        layer, stats = self.spec.layers[index], self._layer_stats(index)
        hybrid = self.spec.parallelism in DLRM_PARALLELISM

        def charge_wg(ps: int) -> None:
            stats.wg_exposed_ps += ps

        def after_compute() -> None:
            if hybrid and index == 0 and layer.fwd_comm.op is not None:
                self._embedding_fwd = self._issue(layer.fwd_comm, 0)  # waited for at the interaction
                interaction_wait = None
            else:
                interaction_wait = self._blocking
            embedding_stats = self._layer_stats(0)

            def after_comm() -> None:
                if hybrid and index == self.spec.last_bottom_layer and index > 0:
                    def charge_embedding(ps: int) -> None:
                        embedding_stats.fwd_exposed_ps += ps
                    self._wait(self._embedding_fwd, charge_embedding, lambda: self._forward(index + 1))
                else:
                    self._forward(index + 1)

            if interaction_wait is None:
                after_comm()
            else:
                def charge_fwd(ps: int) -> None:
                    stats.fwd_exposed_ps += ps
                interaction_wait(layer.fwd_comm, index, charge_fwd, after_comm)

        def compute() -> None:
            stats.fwd_compute_ps += layer.fwd_compute_ps
            self._compute(layer.fwd_compute_ps, after_compute)

        if hybrid and index == 0 and self.spec.input_comm.op is not None:
            self._input_then(compute)
        else:
            self._wait(self._weight_grads.pop(index, None), charge_wg, compute)

    def _input_then(self, then: Callable[[], None]) -> None:
        """Wait for this iteration's input all-to-all (issued one iteration ahead; the first
        iteration issues its own), issue the next iteration's, then continue with `then`."""
        stats = self._layer_stats(0)

        def charge(ps: int) -> None:
            stats.fwd_exposed_ps += ps

        def issue_next() -> None:
            more = len(self.stats) < self.iterations
            self._next_input = self._issue(self.spec.input_comm, 0) if more else None
            then()

        current = self._next_input or self._issue(self.spec.input_comm, 0)
        self._wait(current, charge, issue_next)

    def _backward(self, index: int) -> None:
        if index < 0:
            self._end_iteration()
            return
        layer, stats = self.spec.layers[index], self._layer_stats(index)
        hybrid = self.spec.parallelism in DLRM_PARALLELISM

        def charge_ig(ps: int) -> None:
            stats.ig_exposed_ps += ps

        def after_wg_compute() -> None:
            if layer.wg_comm.op is not None:
                self._weight_grads[index] = self._issue(layer.wg_comm, index)
            if index == 0:
                # the first layer has no input gradient; HYBRID_DLRM waits here for the embedding's
                # backward all-to-all issued at the first top-MLP layer (HYBRID_DLRM_ENHANCED: at the end)
                wait_for = self._embedding_bwd if hybrid else None
                self._embedding_bwd = None
                if wait_for is not None and self.spec.parallelism == "HYBRID_DLRM_ENHANCED":
                    self._unwaited.append(wait_for)
                    wait_for = None
                self._wait(wait_for, charge_ig, lambda: self._backward(-1))
                return
            stats.ig_compute_ps += layer.ig_compute_ps
            self._compute(layer.ig_compute_ps, after_ig_compute)

        def after_ig_compute() -> None:
            embedding = self.spec.layers[0]
            if hybrid and index == self.spec.last_bottom_layer + 1 and embedding.ig_comm.op is not None:
                self._embedding_bwd = self._issue(embedding.ig_comm, 0)
            self._blocking(layer.ig_comm, index, charge_ig, lambda: self._backward(index - 1))

        stats.wg_compute_ps += layer.wg_compute_ps
        self._compute(layer.wg_compute_ps, after_wg_compute)

    def _end_iteration(self) -> None:
        last = len(self.stats) == self.iterations
        if last or self.spec.parallelism == "MICRO":
            # the backward all-to-alls HYBRID_DLRM_ENHANCED never waited for count as the embedding's
            self._drain(list(self._weight_grads.items()) + [(0, pending) for pending in self._unwaited])
        else:
            self._close_iteration()

    def _drain(self, pending: list) -> None:
        """Wait for every outstanding weight-gradient collective, then close the iteration."""
        if not pending:
            self._weight_grads.clear()
            self._unwaited.clear()
            self._close_iteration()
            return
        index, handle = pending[0]
        stats = self._layer_stats(index)
        is_weight_grad = self._weight_grads.get(index) is handle

        def charge(ps: int) -> None:
            if is_weight_grad:
                stats.wg_exposed_ps += ps
            else:
                stats.ig_exposed_ps += ps
        self._wait(handle, charge, lambda: self._drain(pending[1:]))

    def _close_iteration(self) -> None:
        self.stats[-1].end_ps = self.eventlist.now_ps
        if len(self.stats) < self.iterations:
            self._start_iteration()
        else:
            self.eventlist.stop()  # done: stale timer wake-ups need not run

    # -- results -------------------------------------------------------------------------------

    def layer_rows(self) -> list[dict]:
        """The `layers` table (DESIGN.md): compute and exposed communication per pass, in seconds."""
        rows = []
        for iteration, it in enumerate(self.stats):
            for layer, stats in zip(self.spec.layers, it.layers):
                rows.append({
                    "iteration": iteration, "layer": layer.name,
                    "fwd_compute_s": ps_to_s(stats.fwd_compute_ps), "ig_compute_s": ps_to_s(stats.ig_compute_ps),
                    "wg_compute_s": ps_to_s(stats.wg_compute_ps),
                    "fwd_exposed_comm_s": ps_to_s(stats.fwd_exposed_ps),
                    "wg_exposed_comm_s": ps_to_s(stats.wg_exposed_ps),
                    "ig_exposed_comm_s": ps_to_s(stats.ig_exposed_ps),
                })
        return rows

    def summary(self) -> dict:
        """Per-iteration means: iteration time, compute, communication, exposed communication.

        `comm_s` is the time during which at least one collective was in flight (the union of their
        intervals), so exposed communication never exceeds it and equals it when compute is zero;
        `all_to_all_s` and `all_reduce_s` are the same union for one kind of collective.
        """
        done = [it for it in self.stats if it.end_ps >= 0]
        n = len(done) or 1
        compute_ps = sum(s.fwd_compute_ps + s.ig_compute_ps + s.wg_compute_ps for it in done for s in it.layers)
        exposed_ps = sum(s.fwd_exposed_ps + s.ig_exposed_ps + s.wg_exposed_ps for it in done for s in it.layers)
        finished = [r for r in self.system.records if r.end_ps >= 0]
        return {
            "iterations_done": len(done),
            "iteration_time_s": ps_to_s(sum(it.end_ps - it.start_ps for it in done)) / n if done else None,
            "compute_s": ps_to_s(compute_ps) / n,
            "comm_s": ps_to_s(union_ps(finished)) / n,
            "exposed_comm_s": ps_to_s(exposed_ps) / n,
            "all_to_all_s": ps_to_s(union_ps([r for r in finished if r.op == "all_to_all"])) / n,
            "all_reduce_s": ps_to_s(union_ps([r for r in finished if r.op == "all_reduce"])) / n,
        }


def union_ps(records: list[CollectiveRecord]) -> int:
    """Total length of the union of the records' [start, end] intervals."""
    total, covered_until = 0, -1
    for record in sorted(records, key=lambda r: r.start_ps):
        start = max(record.start_ps, covered_until)
        if record.end_ps > start:
            total += record.end_ps - start
            covered_until = record.end_ps
    return total
