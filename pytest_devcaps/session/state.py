"""The plugin's per-session state, kept behind ``keys.STATE_KEY`` (read with ``keys.session_state``).

The plugin is autoloaded into every pytest session of an environment where it is installed, so
the registry (torch, discovery, probes) is built on first need: ``SessionState.registry`` (and
``selected`` / ``primary_device``, which are chosen from it) build it once, when a test, a
fixture, a marker, an option or a report first asks. ``built`` says whether that happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import pytest

from pytest_devcaps.errors import DevcapsError

if TYPE_CHECKING:
    from pytest_devcaps.session.resolved import DevcapsSettings
    from pytest_devcaps.registry import CapabilityRegistry

Builder = Callable[[], "CapabilityRegistry"]


@dataclass(frozen=True)
class Placement:
    """This process's place in the session: the device index it owns (a rank's local rank, a
    pinned worker's device; None where it owns none), who it is (for errors), and how it gets
    the session's registry given a builder (an xdist worker receives the controller's)."""

    index: int | None
    owner: str
    obtain: Callable[[Builder], CapabilityRegistry]


@dataclass(frozen=True)
class Selection:
    """What a session's registry gives it: the registry, the device keys the ``device`` fixture
    is parametrized over, and the primary device (of tests that do not take ``device``)."""

    registry: CapabilityRegistry
    selected: list[str]
    primary_device: str


class RegistryUnavailable(DevcapsError):
    """Building the session's registry failed; every later use raises the same message (the
    plugin turns it into one usage error)."""


class SessionState:
    """Settings known at configure time; the registry and device selection on first use."""

    def __init__(self, settings: DevcapsSettings, build: Callable[[], Selection], *,
                 is_worker: bool = False) -> None:
        self.settings = settings
        self.is_worker = is_worker
        self._build: Callable[[], Selection] | None = build
        self._selection: Selection | None = None
        self._failure: str | None = None
        self._device_keys: dict[str, str | None] = {}

    @property
    def built(self) -> bool:
        """Whether the registry exists (building it is never triggered by asking this)."""
        return self._selection is not None

    @property
    def selection(self) -> Selection:
        if self._selection is None:
            if self._failure is not None:
                raise RegistryUnavailable(self._failure)
            assert self._build is not None
            try:
                self._selection = self._build()
            except pytest.UsageError as exc:
                self._failure = str(exc)
                raise RegistryUnavailable(self._failure) from None
            self._build = None
        return self._selection

    @property
    def failure(self) -> str | None:
        """Why building the registry failed, once it has (None before and after a success)."""
        return self._failure

    @property
    def registry(self) -> CapabilityRegistry:
        return self.selection.registry

    def get_registry(self) -> CapabilityRegistry:
        """The registry, as a callable (what ``library.install_default_registry`` takes)."""
        return self.registry

    @property
    def selected(self) -> list[str]:
        return self.selection.selected

    @property
    def primary_device(self) -> str:
        return self.selection.primary_device

    def device_key(self, name: str) -> str | None:
        """The key of the device ``name`` names in the registry (``cuda`` -> ``cuda:0``), None
        where it names none; looked up once per name (``fixtures.item_device`` asks for every
        test, at collection and again from fixtures)."""
        try:
            return self._device_keys[name]
        except KeyError:
            pass
        from pytest_devcaps.errors import UnknownDeviceError

        try:
            key: str | None = self.registry.identity(name).key
        except UnknownDeviceError:  # an empty parameter set, or a parameter not a device here
            key = None
        self._device_keys[name] = key
        return key
