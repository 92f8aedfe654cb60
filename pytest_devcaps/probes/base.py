"""The probe record and the small vocabulary every probe function speaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps._util.qualnames import qualified_name

ProbeFunction = Callable[[str], ProbeOutcome]

#: Longest exception message quoted in a reason; probe reasons end up in skip messages.
MAX_MESSAGE = 160


@dataclass(frozen=True)
class ProbeSpec:
    """A probe: ``function(device)`` answers one capability for one torch device string.

    ``function`` must be a module-level function so the isolating child process can import
    it by ``module:qualname``. ``isolated=False`` runs it in the calling process instead.
    """

    name: str
    function: ProbeFunction
    isolated: bool = True

    @property
    def target(self) -> str:
        """``module:qualname`` of the function, the form the child process imports; raises
        :class:`~pytest_devcaps._util.qualnames.NotImportableError` when it could not."""
        return qualified_name(self.function, f"probe {self.name!r}")


def brief(exc: BaseException) -> str:
    """``RuntimeError: first line of the message``, shortened for a reason string."""
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def ran(reason: str) -> ProbeOutcome:
    """The operation ran (vendor rules decide later whether natively or by emulation)."""
    return ProbeOutcome(Level.NATIVE, reason)


def refused(what: str, exc: BaseException) -> ProbeOutcome:
    """The operation refused to run: ``"<what> raised RuntimeError: ..."``."""
    return ProbeOutcome(Level.UNSUPPORTED, f"{what} raised {brief(exc)}")


def unsupported(reason: str) -> ProbeOutcome:
    return ProbeOutcome(Level.UNSUPPORTED, reason)


def unknown(reason: str) -> ProbeOutcome:
    return ProbeOutcome(Level.UNKNOWN, reason)


def device_type(device: str) -> str:
    """``"cuda"`` for ``"cuda:1"``; works without importing torch."""
    return device.split(":", 1)[0]


def call_probe(function: ProbeFunction, device: str) -> ProbeOutcome:
    """Call a probe; what it raises (it did not classify) or a non-outcome is ``UNKNOWN``.

    ``SystemExit`` is caught too: a probe must not end the process quietly.
    """
    try:
        outcome = function(device)
    except (Exception, SystemExit) as exc:
        return unknown(f"probe raised {brief(exc)}")
    if not isinstance(outcome, ProbeOutcome):
        return unknown(f"probe returned {type(outcome).__name__}, not ProbeOutcome")
    return outcome
