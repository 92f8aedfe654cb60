"""What an NVIDIA SM-level gate can stand for, read from the catalogue's vendor rules.

PyTorch's hardware knowledge lives once, in ``capabilities.yaml`` (the ``nvidia`` rules mirror
``common_cuda.py``: bf16 and flash attention at sm_80, fp8 at sm_89, ...). A gate such as
``SM89OrLater``, ``is_sm_at_least_90()`` or ``get_device_capability() >= (8, 9)`` says only
"compute capability >= level"; which capability the test needs is read here from those rules,
so changing a rule changes what the lint suggests, and a message can never name a capability
the rules do not tie to the gate's level.

The derivation, for a gate at ``level`` (10 * major + minor):

- ``native(c, l)``: the first nvidia rule (:func:`~pytest_devcaps.config.catalogue.first_matching_rule`,
  the one classification uses) answers ``native`` for ``c`` on a device of compute capability
  ``l / 10`` with :data:`REPRESENTATIVE_FACTS` (a recent Linux CUDA build with cuDNN 9: the
  machine a gate is written for; a gate says nothing about the toolkit, so the facts it does
  not fix are taken at their most capable current value).
- the *rise* of ``c`` at ``level``: the lowest ``l <= level`` from which ``c`` is native at every
  level up to ``level``. ``c`` is *gated* at ``level`` when it is native there and its rise is
  above :data:`LOWEST_LEVEL` (the SM level decides it; ``runtime.streams`` is native everywhere
  and no SM gate stands for it). An upper bound in a rule (``compute_capability <= 12.1``)
  simply makes ``c`` not native, hence not gated, above it.
- the gate's *step*: the highest rise among the gated capabilities, i.e. the threshold in the
  rules the gate's level falls on (``SM86OrLater`` falls on 8.0: nothing rises between 8.0 and
  8.6). Its *candidates* are the gated capabilities whose rise is the step: what the rules
  tie to that step (sm_89: the OCP fp8 dtypes, ``mm.scaled``, ``mm.scaled_rowwise``; sm_80:
  bf16, tf32, flash/cuDNN/flex attention). They are what the finding asks the test to name.
- the test's code picks among the gated capabilities (the lint's own name tables, see
  ``rules.SM_USES``): a used name counts only when the rules make its capability gated at
  the level; of the matches the highest rise wins (the one that explains the gate's level),
  matches of equal rise are all needed. A match one threshold below the step still counts
  (``SM90OrLater`` on a rowwise fp8 test: the rules make rowwise native from 8.9, the
  *previous* step, so the test needs ``mm.scaled_rowwise``, not sm_90: a gate one generation
  above what the code needs is the usual over-gating); a match further below does not explain
  the gate (``SM100OrLater`` on a test whose code shows only fp8 casts: the gate protects
  something the names do not show) and the gate stays a finding. With a *silent default*
  only matches at the step count.
- silent default: a gate whose code names nothing at its step is read as the first
  ``rules.SM_SILENT_DEFAULTS`` capability among the step's candidates (sm_89 -> fp8, sm_53 ->
  fp16: steps the rules tie to one feature family only), and otherwise stays a finding to
  resolve by hand. Which capability of a family a bare gate means is a choice about names,
  not about hardware, so that list is the lint's; whether it applies comes from the rules.
- ``native=True`` on the capability the gate becomes matters only where some vendor's rules
  can answer ``emulated`` for it (:func:`emulable`, a rule fact: otherwise ``requires_capability``
  already excludes every device without it). Of those, which emulation does not stand in for
  the gated hardware (fp8 upcast to fp32, yes; bf16 emulation, no) is the lint's reading of
  tests: ``rules.NATIVE_WHEN_GATED``.

The catalogue is loaded on the first SM-level gate only (``load_catalogue()`` is cached per
process); a file without such a gate never loads it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from pytest_devcaps.config.catalogue import Catalogue

VENDOR = "nvidia"
LOWEST_LEVEL = 10   # sm_10, the first CUDA device: a capability native from here is not SM-gated
# A recent Linux CUDA machine: what a gate is written for (see the module docstring).
REPRESENTATIVE_FACTS: Mapping[str, Any] = {
    "type": "cuda", "vendor": VENDOR, "platform": "linux", "count": 1,
    "cuda_version": "12.9", "runtime_version": "12.9", "cudnn_version": 91002,
    "torch_version": "2.13.0", "nvml": "ok",
}


def facts_at(level: int) -> dict[str, Any]:
    """The facts of a representative device of compute capability ``level / 10``."""
    return {**REPRESENTATIVE_FACTS, "compute_capability": level / 10, "sm": level,
            "arch": f"sm_{level}"}


@dataclass(frozen=True)
class SmLevel:
    """What the rules say about a gate at ``level``: ``gated`` maps each capability the SM level
    decides there to its rise; ``step`` and ``candidates`` as in the module docstring; ``native``
    the capabilities some vendor can emulate (a gate on them becomes ``native=True``)."""

    level: int
    gated: Mapping[str, int]
    step: int | None
    previous: int | None
    candidates: tuple[str, ...]
    native: frozenset[str]


def catalogue() -> Catalogue:
    """The shipped catalogue, imported and loaded on first use (``load_catalogue`` caches it)."""
    from pytest_devcaps.config.catalogue import load_catalogue

    return load_catalogue()


def sm_level(level: int, source: Catalogue | None = None) -> SmLevel:
    """The rules' view of a gate at ``level`` (``source``: the shipped catalogue by default)."""
    return _sm_level(level, catalogue() if source is None else source)


@functools.lru_cache(maxsize=256)
def _sm_level(level: int, source: Catalogue) -> SmLevel:
    gated: dict[str, int] = {}
    for capability in source.names():
        rise = _rise(source, capability, level)
        if rise is not None and rise > LOWEST_LEVEL:
            gated[capability] = rise
    step = max(gated.values(), default=None)
    candidates = tuple(sorted(c for c, rise in gated.items() if rise == step))
    previous = max((rise for rise in gated.values() if step is not None and rise < step), default=None)
    return SmLevel(level, gated, step, previous, candidates, emulable(source))


def _rise(source: Catalogue, capability: str, level: int) -> int | None:
    """The lowest level from which ``capability`` is native up to ``level``; None if not native."""
    rise = None
    for below in range(level, LOWEST_LEVEL - 1, -1):
        if not _native_at(source, below).get(capability, False):
            break
        rise = below
    return rise


@functools.lru_cache(maxsize=512)
def _native_at(source: Catalogue, level: int) -> Mapping[str, bool]:
    from pytest_devcaps.config.catalogue import first_matching_rule
    from pytest_devcaps.model import Level

    facts = facts_at(level)
    found = {}
    for capability in source.capabilities:
        rule = first_matching_rule(source, VENDOR, capability, facts)
        found[capability] = rule is not None and rule.level is Level.NATIVE
    return found


@functools.lru_cache(maxsize=4)
def emulable(source: Catalogue) -> frozenset[str]:
    """Capabilities some vendor's rule can answer ``emulated`` for."""
    from pytest_devcaps.model import Level

    return frozenset(capability for by_capability in source.rules.values()
                     for capability, vendor_rules in by_capability.items()
                     if any(rule.level is Level.EMULATED for rule in vendor_rules))
