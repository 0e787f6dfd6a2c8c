"""Per-client persistent state: what a client keeps between its participations.

A strategy's client step reads and writes `client.state` (a dict of tensors; SCAFFOLD's
control variate, MOON's previous model, FedDyn's gradient). The engine keeps it between a
client's participations, off the run device (so 1,000 clients with small state never hold
1,000 copies on a GPU), saves it in checkpoints and reports the bytes it holds.
"""

from collections.abc import Mapping

import torch

from fedshare.engine.accounting import payload_bytes

ClientState = dict[str, torch.Tensor]


class ClientStates:
    """The state of every client that has any, stored on `store_device` (default CPU)."""

    def __init__(self, store_device: torch.device | str = "cpu") -> None:
        self.store_device = torch.device(store_device)
        self._states: dict[int, ClientState] = {}
        self._changed: set[int] = set()

    def checkout(self, client_id: int, device: torch.device) -> ClientState:
        """The client's state on `device` (an empty dict the first time)."""
        stored = self._states.get(client_id, {})
        return {key: value.to(device) for key, value in stored.items()}

    def checkin(self, client_id: int, state: Mapping[str, torch.Tensor]) -> None:
        """Keep what the client step left in its state (nothing kept for an empty state)."""
        if state or client_id in self._states:
            self._changed.add(client_id)
        if state:
            self._states[client_id] = {
                key: value.detach().to(self.store_device) for key, value in state.items()
            }
        else:
            self._states.pop(client_id, None)

    def take_changed(self) -> set[int]:
        """The clients whose state was checked in since the last call (then forgets them)."""
        changed, self._changed = self._changed, set()
        return changed

    def mark_all_changed(self) -> None:
        """Count every stored state as changed (so the next checkpoint writes all of them)."""
        self._changed = set(self._states)

    def get(self, client_id: int) -> ClientState | None:
        """The stored state of one client (on the store device), or None."""
        return self._states.get(client_id)

    def items(self) -> list[tuple[int, ClientState]]:
        return list(self._states.items())

    @property
    def bytes_held(self) -> int:
        return sum(payload_bytes(state) for state in self._states.values())

    def load_state_dict(self, states: Mapping[int, Mapping[str, torch.Tensor]]) -> None:
        self._states = {
            int(cid): {k: v.to(self.store_device) for k, v in state.items()}
            for cid, state in states.items()
        }
        self._changed = set()
