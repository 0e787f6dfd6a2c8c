"""User-facing errors: one clear sentence, no stack trace at the command line."""

import difflib
import sys
from collections.abc import Iterable
from typing import NoReturn

USER_ERROR = 2
"""The exit code of every command for a user error (a bad value, a missing file)."""


class FedshareError(Exception):
    """A mistake in the user's input (config, data, arguments), explained in one sentence."""


def exit_user_error(message: str, program: str = "fedshare") -> NoReturn:
    """A user error at the command line: `<program>: error: <message>` on stderr, exit code 2."""
    print(f"{program}: error: {message}", file=sys.stderr)
    sys.exit(USER_ERROR)


class NonFiniteLossError(FedshareError):
    """Training produced a NaN or infinite loss; the run stops and keeps what it wrote."""


def did_you_mean(value: object, valid: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for the closest valid name, or "" when none is close."""
    close = difflib.get_close_matches(str(value), list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class RankFailure(RuntimeError):
    """Another process of a run across several stopped (died, was killed or lost its
    connection), so this one stops too (`fedshare.engine.distributed`)."""


def choices_message(kind: str, value: object, valid: list[str]) -> str:
    """The standard sentence for an unknown choice, listing the valid ones."""
    return (
        f"unknown {kind} {value!r}{did_you_mean(value, valid)}; valid choices: "
        f"{', '.join(sorted(valid))}"
    )


def named_elsewhere(keys: Iterable[str]) -> str:
    """ " (did you mean 'train.lr'?)" for keys of the same name in other places, or "" ."""
    shown = " or ".join(repr(k) for k in sorted(set(keys)))
    return f" (did you mean {shown}?)" if shown else ""


def unknown_key_message(
    key: str, valid: Iterable[str], where: str = "", elsewhere: Iterable[str] = ()
) -> str:
    """The standard sentence for an unknown config key, listing the valid ones; `elsewhere`:
    keys of the same name in another place (`lr` -> `train.lr`), suggested first."""
    names = sorted(valid)
    last = key.rsplit(".", 1)[-1]
    hint = named_elsewhere(elsewhere) or did_you_mean(last, names)
    return f"unknown key {key!r}{hint}; valid keys{where}: {', '.join(names) or 'none'}"


def error_sentence(err: BaseException) -> str:
    """What went wrong, in one line: a user error's sentence, else the exception's type and
    first line (for `summary.json`'s `error` of a failed run)."""
    first = (str(err).strip().splitlines() or [""])[0]
    if isinstance(err, FedshareError):
        return first
    return f"{type(err).__name__}: {first}" if first else type(err).__name__
