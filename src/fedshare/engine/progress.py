"""A tqdm progress bar that stays quiet when stderr is not a terminal or progress=false."""

import sys

from tqdm.auto import tqdm


class Progress:
    def __init__(self, total: int, initial: int, enabled: bool, desc: str) -> None:
        active = enabled and sys.stderr.isatty()
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="round",
            disable=not active,
            dynamic_ncols=True,
            leave=True,
        )

    def update(self, accuracy: float | None, elapsed: float) -> None:
        if accuracy is not None:
            self.bar.set_postfix(acc=f"{accuracy:.2f}", time=f"{elapsed:.0f}s", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
