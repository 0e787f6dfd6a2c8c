"""Messages that wait with a client: those it keeps, and those other clients sent it.

* `KeptMessages`: a phase with `keep=True` (FedMix's and FedData's one-shot "distribute")
  leaves its broadcast with every client that received it; a later client step finds it in
  `client.kept[phase]`. Every receiver got the same message, so the simulation stores it once
  and remembers who holds it (not one copy per client).
* `Inboxes`: messages a client sent straight to another (`Update.to_peers`), delivered to the
  receiver's next client step as `client.inbox`.

Both are checkpointed with the run.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from fedshare.engine.accounting import message_bytes
from fedshare.engine.messages import Message


class KeptMessages:
    """phase name -> the messages sent in it, and which clients hold which one."""

    def __init__(self) -> None:
        self._messages: dict[str, list[Message]] = {}
        self._held: dict[int, dict[str, int]] = {}  # client -> phase -> message number

    def keep(self, phase: str, message: Message, receivers: list[int]) -> None:
        """`receivers` keep `message` (replacing what they kept from that phase before)."""
        if not receivers:
            return
        messages = self._messages.setdefault(phase, [])
        messages.append(message)
        for cid in receivers:
            self._held.setdefault(cid, {})[phase] = len(messages) - 1
        self._forget_unheld(phase)

    def _forget_unheld(self, phase: str) -> None:
        held = {held[phase] for held in self._held.values() if phase in held}
        messages = self._messages[phase]
        for number in range(len(messages)):
            if number not in held:
                messages[number] = Message()

    def of(self, client_id: int) -> dict[str, Message]:
        return {
            phase: self._messages[phase][number]
            for phase, number in self._held.get(client_id, {}).items()
        }

    @property
    def bytes_held(self) -> int:
        """Bytes the simulation stores (each message once)."""
        return _stored_bytes(self._messages.values())

    def state_dict(self) -> dict[str, Any]:
        return {
            "messages": {
                phase: [_message_state(m) for m in messages]
                for phase, messages in self._messages.items()
            },
            "held": {cid: dict(held) for cid, held in self._held.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any], device: Any) -> None:
        self._messages = {
            phase: [_restore(m, device) for m in messages]
            for phase, messages in state.get("messages", {}).items()
        }
        self._held = {int(cid): dict(held) for cid, held in state.get("held", {}).items()}


def _stored_bytes(groups: Iterable[list[Message]]) -> int:
    return sum(message_bytes(m.weights, m.payload) for messages in groups for m in messages)


def _message_state(m: Message) -> dict[str, Any]:
    return {"weights": m.weights, "payload": dict(m.payload)}


def _restore(m: Mapping[str, Any], device: Any) -> Message:
    weights = m["weights"].to(device) if m["weights"] is not None else None
    return Message(weights, {k: v.to(device) for k, v in m["payload"].items()})


class Inboxes:
    """client -> the messages other clients sent it, waiting for its next step."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[Message]] = {}

    def post(self, receiver: int, message: Message) -> None:
        self._waiting.setdefault(receiver, []).append(message)

    def collect(self, client_id: int) -> list[Message]:
        """What waits for the client, in the order it was sent; the inbox is then empty."""
        return self._waiting.pop(client_id, [])

    @property
    def bytes_held(self) -> int:
        return _stored_bytes(self._waiting.values())

    def state_dict(self) -> dict[int, list[dict[str, Any]]]:
        return {cid: [_message_state(m) for m in ms] for cid, ms in self._waiting.items()}

    def load_state_dict(self, state: Mapping[int, list[Mapping[str, Any]]], device: Any) -> None:
        self._waiting = {int(cid): [_restore(m, device) for m in ms] for cid, ms in state.items()}
