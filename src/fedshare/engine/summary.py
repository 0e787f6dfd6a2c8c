"""summary.json: what a run computed, what it cost, and how it ended."""

from typing import TYPE_CHECKING, Any

from fedshare.engine.memory import peak_memory
from fedshare.results.machine import machine
from fedshare.results.rundir import summarize

if TYPE_CHECKING:
    from fedshare.engine.simulation import Simulation


def personal_summary(sim: "Simulation") -> dict[str, Any]:
    """A heterogeneous run's (`clients.models`) last personal accuracies, overall and per
    architecture, and how many clients each architecture has."""
    arches = sim.architectures.models
    if arches is None:
        return {}
    last = sim.history[-1] if sim.history else {}
    return {
        "clients_per_model": {
            name: sum(arches.name_of(k) == name for k in range(sim.data.num_clients))
            for name in arches.names
        },
        **{key: value for key, value in last.items() if key.startswith("personal_accuracy")},
    }


def run_summary(sim: "Simulation", elapsed: float) -> dict[str, Any]:
    """The run's summary with `elapsed` seconds of rounds: accuracy statistics over the
    evaluated rounds, status, traffic, time and memory, the processes, the strategy's own
    measures."""
    return summarize(
        sim.history,
        **sim.meta,
        seed=sim.config.seed,
        status=sim.status,
        **({"error": sim.error} if sim.error else {}),
        rounds_completed=sim.rounds_completed,
        rounds=sim.config.rounds,
        num_clients=sim.data.num_clients,
        wall_time_s=round(elapsed, 3),
        **sim.cpu_summary(),
        **sim.traffic.as_dict(),
        partition_fingerprint=sim.data.partition.fingerprint,
        data_source=sim.data.dataset.source,
        device=str(sim.device),
        machine=machine(str(sim.device)),
        bytes_shared_per_round=sim.traffic.bytes_shared / max(sim.rounds_completed, 1),
        client_state_bytes=(
            sim.client_states.bytes_held + sim.kept.bytes_held + sim.inboxes.bytes_held
        ),
        **peak_memory(sim.device),
        **sim.executor.processes(),
        **sim.strategy.summary_metrics(),
        **personal_summary(sim),
        **sim.completed_summary,
    )
