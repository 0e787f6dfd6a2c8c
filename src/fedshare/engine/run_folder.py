"""The run folder's side of a simulation: checked before anything is written, the checkpoint
a resume continues from, the final files, and records cut back to what was saved when a run
stops early (docs/engine.md, "How a run ends, and what its folder then says")."""

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedshare.data.partition_plot import plot_partition
from fedshare.engine.accounting import Traffic
from fedshare.engine.checkpoint import (
    load_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from fedshare.engine.resume import check_same_run, check_saved_rounds
from fedshare.engine.state_log import ClientStateLog
from fedshare.errors import FedshareError, error_sentence
from fedshare.results.atomic import clean_temporaries, png_complete
from fedshare.results.model_file import MODEL_FILE, save_model
from fedshare.results.plots import plot_learning_curve
from fedshare.results.rundir import RunDirectory

if TYPE_CHECKING:
    from fedshare.engine.distributed import RankGroup
    from fedshare.engine.simulation import Simulation

FINISHED = "finished_summary"
"""The key a resumed checkpoint gets when its run has every round and its results: the
summary.json of the folder (the resume then runs and writes nothing)."""

State = dict[str, Any]


def cut_metrics(path: Path, last_round: int) -> None:
    """Cut metrics.jsonl in place after the line of `last_round` (and any cut-off line):
    truncating needs no free space, so it also works on the full disk that stopped a run."""
    keep = 0
    for line in path.read_bytes().splitlines(keepends=True):
        try:
            number = json.loads(line).get("round")
        except (ValueError, AttributeError):
            break
        if not line.endswith(b"\n") or not isinstance(number, int) or number > last_round:
            break
        keep += len(line)
    os.truncate(path, keep)


class RunFolder:
    """`sim.dir` (None on the ranks that do not write, and for a run without a folder) and
    the client-state segments beside its checkpoint."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.state_log = ClientStateLog(sim.dir.path) if sim.dir is not None else None
        self.checkpoint_round = 0
        """The round of the checkpoint in the run folder (0: none)."""

    @property
    def dir(self) -> RunDirectory | None:
        return self.sim.dir

    # ------------------------------------------------------------------ before the rounds
    def open(self, resume: bool, group: "RankGroup | None") -> State | None:
        """`_open` (on rank 0 alone with several processes, whose ranks must agree on the
        run's config; every rank gets its checkpoint, client states inline)."""
        if group is None:
            return self._open(resume)
        group.check_same("config", self.sim.record)
        return group.from_writer(lambda: self._states_inline(self._open(resume)))

    def _open(self, resume: bool) -> State | None:
        """Check the folder before writing anything: a resume must match the checkpoint's
        config and partition, a new run needs an unused folder (or `overwrite`). Returns the
        checkpoint to resume from (marked `FINISHED` when its run is complete)."""
        sim, folder = self.sim, self.dir
        if folder is None:
            if resume:
                raise FedshareError("resume=true needs the run directory of the run to resume")
            return None
        clean_temporaries(folder.path)
        if resume:
            state = load_checkpoint(folder.checkpoint_path)
            check_same_run(state.get("config"), sim.record, folder.checkpoint_path)
            check_saved_rounds(
                state, sim.config.rounds, sim.config.eval.every, folder.checkpoint_path
            )
            fingerprint = sim.data.partition.fingerprint
            if state["fingerprint"] != fingerprint:
                raise FedshareError(
                    f"the checkpoint in {folder.path} was made with partition "
                    f"{state['fingerprint']}, not {fingerprint}; resume with the same data and "
                    f"partition"
                )
            stored = self._stored_summary()
            if (
                state["rounds_completed"] == sim.config.rounds
                and stored.get("status") == "completed"
                and stored.get("rounds_completed") == sim.config.rounds
            ):
                state[FINISHED] = stored
            return state
        used = folder.run_files()
        if used and not sim.overwrite:
            raise FedshareError(
                f"run_dir {folder.path} already holds a run ({', '.join(used)}); pass "
                f"resume=true to continue it, overwrite=true to replace it, or another run_dir"
            )
        folder.clear()
        assert self.state_log is not None
        self.state_log.clear()
        folder.mark()
        return None

    def _stored_summary(self) -> dict[str, Any]:
        """The folder's summary.json ({} when it is absent or unreadable)."""
        assert self.dir is not None
        with contextlib.suppress(OSError, ValueError):
            stored = json.loads((self.dir.path / "summary.json").read_text())
            if isinstance(stored, dict):
                return stored
        return {}

    def _states_inline(self, state: State | None) -> State | None:
        """A checkpoint with its client states read from the state log into it."""
        if state is None or "client_state_segments" not in state:
            return state
        assert self.state_log is not None
        inline = {k: v for k, v in state.items() if k != "client_state_segments"}
        inline["client_states"] = self.state_log.load(state["client_state_segments"])
        return inline

    def begin(self, state: State | None) -> None:
        """Write config.yaml and partition.json (a resume keeps a partition file that is
        whole) and restore the run from `state` (None: a new run, its metrics file empty)."""
        sim, folder = self.sim, self.dir
        if folder is not None:
            folder.write_config(sim.record)
            fingerprint = sim.data.partition.fingerprint
            if state is None or not folder.partition_written(fingerprint):
                folder.write_partition(sim.data.partition.summary())
        if state is None:
            if folder is not None:
                folder.rewrite_metrics([])
            return
        sim.strategy.load_state_dict(state["strategy"])
        sim.history = list(state["history"])
        sim.rounds_completed = sim.rounds_recorded = int(state["rounds_completed"])
        self.checkpoint_round = sim.rounds_completed
        sim.traffic = Traffic(**state["traffic"])
        if "client_state_segments" in state:
            assert self.state_log is not None
            sim.client_states.load_state_dict(self.state_log.load(state["client_state_segments"]))
        else:  # inline: sent by rank 0 (`_states_inline`), or a checkpoint from before segments
            sim.client_states.load_state_dict(state.get("client_states", {}))
            if self.state_log is None or not self.state_log.segments:  # no segment holds them
                sim.client_states.mark_all_changed()
        sim.kept.load_state_dict(state.get("kept_messages", {}), sim.device)
        sim.inboxes.load_state_dict(state.get("inboxes", {}), sim.device)
        cpu = state.get("cpu_time_s")  # absent from checkpoints written before it was kept
        sim.clock.continue_from(float(state["wall_time_s"]), None if cpu is None else float(cpu))
        restore_rng_state(state["rng"])
        if folder is not None:
            folder.rewrite_metrics(sim.history)

    # ------------------------------------------------------------------ during and after
    def save_checkpoint(self) -> None:
        """The state a resumed run continues from, with the config it must match."""
        sim = self.sim
        assert self.dir is not None and self.state_log is not None
        segments = self.state_log.save(sim.client_states, sim.rounds_completed)
        save_checkpoint(
            self.dir.checkpoint_path,
            {
                "rounds_completed": sim.rounds_completed,
                "strategy": sim.strategy.state_dict(),
                "history": sim.history,
                "traffic": sim.traffic.as_dict(),
                "client_state_segments": segments,
                "kept_messages": sim.kept.state_dict(),
                "inboxes": sim.inboxes.state_dict(),
                "wall_time_s": sim.elapsed(),
                "cpu_time_s": sim.cpu_time(),
                "rng": rng_state(),
                "fingerprint": sim.data.partition.fingerprint,
                "config": sim.record,
            },
        )
        self.state_log.prune()
        self.checkpoint_round = sim.rounds_completed

    def write_results(self) -> None:
        """summary.json, curves.png and model.pt, also for a run that stopped early or failed."""
        sim, folder = self.sim, self.dir
        if folder is None:
            return
        folder.write_summary(sim.summary(sim.elapsed()))
        picture = folder.path / "partition.png"
        # drawn here, not before round 1 (matplotlib takes ~1 s to import); a resume redraws a
        # cut-off one
        if not png_complete(picture):
            plot_partition(sim.data.partition, picture)
        if sim.rounds_completed > 0:
            name, params = sim.model_spec
            model = sim.strategy.global_model()
            save_model(folder.path / MODEL_FILE, model, name, params, sim.data)
        meta = sim.meta
        title = f"{meta.get('strategy')} on {meta.get('data')}/{meta.get('partition')}"
        plot_learning_curve(
            sim.history, folder.path / "curves.png", f"{title}, seed {sim.config.seed}"
        )

    def cut_back(self, rounds: int) -> None:
        """metrics.jsonl cut back to the evaluated rounds up to `rounds` (a run that stopped
        early: its lines then agree with its checkpoint and summary)."""
        if self.dir is not None and self.dir.metrics_path.exists():
            with contextlib.suppress(OSError):
                cut_metrics(self.dir.metrics_path, rounds)

    def write_failure(self, err: OSError) -> FedshareError:
        """A file of the run could not be written (a full disk, a read-only folder)."""
        assert self.dir is not None
        saved = self.checkpoint_round
        kept = (
            f"checkpoint.pt of round {saved} is intact (resume=true continues from it once the "
            f"folder is writable)"
            if saved
            else "no checkpoint was saved yet"
        )
        return FedshareError(
            f"cannot write the run's files in {self.dir.path} "
            f"({err.strerror or error_sentence(err)}); {kept}, and every file keeps its last "
            f"complete version"
        )
