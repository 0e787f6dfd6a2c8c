"""User-facing errors: one clear sentence, no stack trace at the command line."""


class FedshareError(Exception):
    """A mistake in the user's input (config, data, arguments), explained in one sentence."""


class NonFiniteLossError(FedshareError):
    """Training produced a NaN or infinite loss; the run stops and keeps what it wrote."""


class RankFailure(RuntimeError):
    """Another process of a run across several stopped (died, was killed or lost its
    connection), so this one stops too (`fedshare.engine.distributed`)."""


def choices_message(kind: str, value: object, valid: list[str]) -> str:
    """The standard sentence for an unknown choice, listing the valid ones."""
    return f"unknown {kind} {value!r}; valid choices: {', '.join(sorted(valid))}"
