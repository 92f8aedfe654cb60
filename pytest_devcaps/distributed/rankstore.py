"""The ranks of a launched world talking to each other through the launcher's key-value store.

Every pytest session of a torchrun world shares a few facts with the others: pytest-randomly's
seed, the collected test ids, each rank's failures. They go through the same TCP store that
``init_process_group(init_method="env://")`` uses, reached the way torch reaches it
(``torch/distributed/rendezvous.py`` ``_create_c10d_store``): a client of the elastic agent's
store when ``TORCHELASTIC_USE_AGENT_STORE=True`` (torchrun), else rank 0 hosts it on
``MASTER_ADDR:MASTER_PORT`` with ``multi_tenant=True``, so a process group created later in the
same process shares that server. Keys live under a per-session prefix, so they never meet the
process group's own. No collective is used: a rank that never arrives is a timeout that names it.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, Callable, Iterable

from pytest_devcaps.distributed.ranks import LaunchInfo, RankUnreachable

_SESSIONS = itertools.count()
"""Sessions of one process (pytest.main run twice): every rank counts them alike."""
POLL_S = 0.05
"""How often a wait looks at the store: waits poll (``Store.check``) rather than block in
``Store.wait``, so that a signal (the launcher's SIGTERM when another rank died) is handled
at once instead of after the timeout."""


class RankStore:
    """``publish(name, text)`` for this rank, ``gather(name)`` for every rank's text."""

    def __init__(self, info: LaunchInfo, timeout_s: float,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.info = info
        self.timeout_s = timeout_s
        self.stopped = stopped
        """True once waiting is pointless (the launcher is stopping this rank): every wait
        ends at once, as a rank that did not publish."""
        self.gone = False
        """True once the store's host (the launcher) is known to be gone: nothing is sent to it
        (torch's client would log a C++ stack per call)."""
        self._store: Any = None
        self._prefix = f"pytest-devcaps/session-{next(_SESSIONS)}/"

    def _connect(self) -> Any:
        if self.gone:
            raise RankUnreachable("the launcher is gone, and its store with it")
        if self._store is not None:
            return self._store
        import torch.distributed as dist

        from datetime import timedelta

        address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not address or not port or not port.isdigit():
            raise RankUnreachable("MASTER_ADDR / MASTER_PORT are not set, so the ranks cannot "
                                  "reach each other")
        timeout = timedelta(seconds=self.timeout_s)
        tcp_store: Any = dist.TCPStore  # type: ignore[attr-defined]  # re-exported from torch._C
        try:
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
                store = tcp_store(address, int(port), is_master=False, timeout=timeout,
                                  wait_for_workers=False)
            else:
                store = tcp_store(address, int(port), is_master=self.info.rank == 0,
                                  timeout=timeout, wait_for_workers=False, multi_tenant=True)
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the same story
            raise RankUnreachable(f"the launcher's store at {address}:{port}: {exc}") from None
        self._store = dist.PrefixStore(self._prefix, store)  # type: ignore[attr-defined]
        return self._store

    def publish(self, name: str, text: str) -> None:
        """Set this rank's text under ``name``; :class:`RankUnreachable` when the store is gone
        (its host, the launcher, was killed: torch's DistNetworkError)."""
        store = self._connect()
        try:
            store.set(f"{name}/{self.info.rank}", text)
        except Exception as exc:  # noqa: BLE001 - the store went away with its host
            raise RankUnreachable(f"the launcher's store is gone: {exc}") from None

    def read(self, name: str, rank: int, timeout_s: float | None = None) -> str:
        """Rank ``rank``'s text under ``name``, waiting for it up to the timeout (or until
        :attr:`stopped`)."""
        store = self._connect()
        key = f"{name}/{rank}"
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        try:
            while not store.check([key]):
                if self.stopped() or time.monotonic() >= deadline:
                    raise TimeoutError
                time.sleep(POLL_S)
            return bytes(store.get(key)).decode()
        except Exception:  # noqa: BLE001 - a timeout, or the store went away with its host
            why = "before this rank was stopped" if self.stopped() else \
                f"within {self.timeout_s:g} s"
            raise RankUnreachable(f"rank {rank} did not publish {name!r} {why} (it may have "
                                  f"died, hung, or run another test session)") from None

    def gather(self, name: str, ranks: Iterable[int] | None = None) -> dict[int, str | None]:
        """Every rank's (or each of ``ranks``') text under ``name``; None for a rank that never
        published within the timeout."""
        found: dict[int, str | None] = {}
        deadline = time.monotonic() + self.timeout_s
        for rank in range(self.info.world_size) if ranks is None else ranks:
            try:
                found[rank] = self.read(name, rank, max(0.001, deadline - time.monotonic()))
            except RankUnreachable:
                found[rank] = None
        return found
