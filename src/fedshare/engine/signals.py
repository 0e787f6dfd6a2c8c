"""Stop signals held back while a run's files are written or its processes part, so that a
stop arriving then never leaves a file half written or an exit status at odds with
`summary.json`."""

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int) -> str:
    """`SIGTERM` for 15."""
    return signal.Signals(signum).name


@contextlib.contextmanager
def held_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM arriving inside the block are recorded in the list it yields instead
    of acting; the previous handlers are back after it. Off the main thread (where Python
    delivers no signal) nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def hold(signum: int, frame: object) -> None:
        received.append(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, hold)
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
