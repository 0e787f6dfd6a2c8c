"""Run progress: a tqdm bar on a terminal, plain lines in logs (nohup, SLURM, CI).

With `progress=true`: when stderr is a terminal, a tqdm bar whose postfix shows the latest
accuracy and the stage the round is in (the strategy's phase, how many clients are done, a
server step such as FedAA's synthesis). Otherwise one line per round on stdout, flushed at
once, with the round, accuracy, test loss, bytes sent so far and seconds per round; a round
that runs longer than `HEARTBEAT_S` adds a line naming its current stage every `HEARTBEAT_S`
seconds (at the next stage change), so a slow round never leaves the log silent.
"""

import sys
import time
from typing import Any, TextIO

HEARTBEAT_S = 30.0
"""Seconds of a round without a line after which the next stage change prints one."""


def megabytes(count: float) -> str:
    return f"{count / 1e6:.2f} MB"


class Progress:
    """The bar or the log lines of one run (`enabled=false`: silent)."""

    def __init__(
        self,
        total: int,
        initial: int,
        enabled: bool,
        desc: str,
        stream: TextIO | None = None,
        terminal: bool | None = None,
    ) -> None:
        self.total, self.desc = total, desc
        self.stream = stream if stream is not None else sys.stdout
        terminal = sys.stderr.isatty() if terminal is None else terminal
        self.lines = enabled and not terminal
        self.bar = None
        if enabled and terminal:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total, initial=initial, desc=desc, unit="round", dynamic_ncols=True
            )
        self.round = initial
        self.accuracy: float | None = None
        self.round_start = self.last_line = time.perf_counter()

    def stage(self, text: str) -> None:
        """The round's current stage, e.g. "train: 3/10 clients" or "server: synthesis"."""
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(text), refresh=True)
        elif self.lines and time.perf_counter() - self.last_line >= HEARTBEAT_S:
            elapsed = time.perf_counter() - self.round_start
            self._print(f"{self._round_tag(self.round + 1)}  {text}  ({elapsed:.0f}s in the round)")

    def update(self, rounds_completed: int, record: dict[str, Any] | None, traffic: int) -> None:
        """After round `rounds_completed`; `record` is its evaluation (None if not evaluated),
        `traffic` the bytes sent so far."""
        now = time.perf_counter()
        per_round = now - self.round_start
        self.round, self.round_start = rounds_completed, now
        if record is not None and record.get("accuracy") is not None:
            self.accuracy = record["accuracy"]
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(None), refresh=False)
            self.bar.update(1)
        elif self.lines:
            value = record.get("accuracy") if record else None
            accuracy = f"acc {value:6.2f}%" if value is not None else "acc      -"
            loss = f"loss {record['loss']:.4f}" if record and "loss" in record else "loss -"
            self._print(
                f"{self._round_tag(rounds_completed)}  {accuracy}  {loss}  "
                f"sent {megabytes(traffic)}  {per_round:.1f}s/round"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _round_tag(self, round_number: int) -> str:
        width = len(str(self.total))
        return f"{self.desc} round {round_number:{width}d}/{self.total}"

    def _postfix(self, stage: str | None) -> str:
        acc = f"acc={self.accuracy:.2f}" if self.accuracy is not None else ""
        return ", ".join(part for part in (acc, stage) if part)

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self.last_line = time.perf_counter()
