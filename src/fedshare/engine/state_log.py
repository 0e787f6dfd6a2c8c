"""Client state in checkpoints, written incrementally (`client_states/` beside checkpoint.pt).

SCAFFOLD, FedDyn, MOON and FedBR keep state for every client that has taken part. Writing all
of it into every checkpoint made each checkpoint grow with the distinct clients seen (10,000
clients of cnn_small state: 16 GB rewritten per round). Instead each checkpoint writes one
segment file with the states that changed since the previous checkpoint (a removed state as
None), and checkpoint.pt lists the segments that, read in order, give every client's state.
When the segments hold more than twice the live state (plus 1 MB), the next checkpoint writes
one full segment instead and the older ones are deleted, so the folder holds at most about
twice the live state (plus 1 MB and the newest segment).

Crash safety: a segment is complete (written to a temporary name, then renamed; a write that
fails, on a full disk, removes its temporary) before the
checkpoint that lists it replaces the previous one, and segments are deleted only after the
new checkpoint is in place; files that no checkpoint lists (a run stopped between the two
writes) are deleted at the next checkpoint.
"""

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from fedshare.engine.accounting import payload_bytes
from fedshare.engine.checkpoint import save_checkpoint
from fedshare.engine.client_state import ClientState, ClientStates

FOLDER = "client_states"
COMPACT_SLACK = 1 << 20
"""Bytes of superseded state tolerated on top of twice the live state before compacting."""


def segment_bytes(segment: Mapping[int, ClientState | None]) -> int:
    return sum(payload_bytes(state) for state in segment.values() if state)


class ClientStateLog:
    """The segment files of one run folder and their bookkeeping."""

    def __init__(self, run_path: Path) -> None:
        self.folder = run_path / FOLDER
        self.segments: dict[str, int] = {}
        """The listed segments in order, with the state bytes each holds."""

    def save(self, states: ClientStates, rounds_completed: int) -> list[str]:
        """Write what changed since the last save (or everything, when compacting); return
        the segment names the new checkpoint must list."""
        changed = states.take_changed()
        segment: Mapping[int, ClientState | None]
        if sum(self.segments.values()) > 2 * states.bytes_held + COMPACT_SLACK:
            name, segment = f"full_{rounds_completed:06d}.pt", dict(states.items())
            self.segments = {}
        elif changed:
            name = f"delta_{rounds_completed:06d}.pt"
            segment = {cid: states.get(cid) for cid in changed}
        else:
            return list(self.segments)
        self.folder.mkdir(exist_ok=True)
        contents = {int(cid): state for cid, state in segment.items()}
        save_checkpoint(self.folder / name, contents)
        self.segments[name] = segment_bytes(segment)
        return list(self.segments)

    def prune(self) -> None:
        """Delete segment files the current checkpoint does not list (after it is written)."""
        if not self.folder.is_dir():
            return
        for path in self.folder.iterdir():
            if path.name not in self.segments:
                path.unlink()

    def load(self, names: Iterable[str]) -> dict[int, ClientState]:
        """Every client's state from the listed segments, later segments overriding earlier."""
        states: dict[int, ClientState] = {}
        self.segments = {}
        for name in names:
            segment = torch.load(self.folder / name, map_location="cpu", weights_only=True)
            for cid, state in segment.items():
                if state is None:
                    states.pop(int(cid), None)
                else:
                    states[int(cid)] = state
            self.segments[name] = segment_bytes(segment)
        return states

    def clear(self) -> None:
        """Delete the folder's segments (a run folder reused with `overwrite`)."""
        self.segments = {}
        if self.folder.is_dir():
            for path in self.folder.iterdir():
                path.unlink()
            self.folder.rmdir()
