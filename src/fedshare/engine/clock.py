"""The seconds a run reports: wall and CPU time of its rounds (with their evaluations and
checkpoints, not the start-up or the final files), across resumes."""

import time

from fedshare.engine.memory import cpu_seconds


class RunClock:
    """Counts from `start`, on top of what the rounds before a resume took, until `stop`."""

    def __init__(self) -> None:
        self._wall_before = 0.0
        self._cpu_before: float | None = 0.0
        """CPU seconds of the rounds before a resume (None: its checkpoint did not record them)."""
        self.start()

    def start(self) -> None:
        self._start = time.perf_counter()
        self._cpu_start = cpu_seconds()
        self._stopped_at: tuple[float, float | None] | None = None

    def continue_from(self, wall_s: float, cpu_s: float | None) -> None:
        """Add the seconds a checkpoint recorded (a resumed run)."""
        self._wall_before, self._cpu_before = wall_s, cpu_s

    def stop(self) -> None:
        """Fix both counts where the rounds ended (the summaries written after agree)."""
        self._stopped_at = (self.elapsed(), self.cpu_time())

    def elapsed(self) -> float:
        if self._stopped_at is not None:
            return self._stopped_at[0]
        return self._wall_before + time.perf_counter() - self._start

    def cpu_time(self) -> float | None:
        """CPU seconds of this process (and its ended children); None after a resume from a
        checkpoint that did not record them."""
        if self._stopped_at is not None:
            return self._stopped_at[1]
        if self._cpu_before is None:
            return None
        return self._cpu_before + cpu_seconds() - self._cpu_start
