"""Where this process stands in a launcher-made world (torchrun, or any launcher that sets
``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``), and what reports say about it.

torchrun sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` and
``MASTER_ADDR`` / ``MASTER_PORT`` for every worker (torch
``torch/distributed/elastic/agent/server/local_elastic_agent.py`` ``_start_workers``). Reading
them imports nothing: every pytest session asks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from pytest_devcaps.errors import ConfigError, DevcapsError, did_you_mean
from pytest_devcaps._util.host import host_name

PLACEHOLDERS = ("rank", "host", "local_rank", "world_size")
"""What ``--devcaps-json`` may contain in braces: ``report-{host}-{rank}.json``."""


class RankUnreachable(DevcapsError, RuntimeError):
    """The launcher's store could not be reached, or a rank did not publish in time."""


@dataclass(frozen=True)
class LaunchInfo:
    """This process's place in a launcher-made world."""

    rank: int
    world_size: int
    local_rank: int


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """RANK and WORLD_SIZE are set: a launcher (torchrun) started this process as one rank."""
    env = os.environ if environ is None else environ
    return "RANK" in env and "WORLD_SIZE" in env


def launched_world(environ: Mapping[str, str] | None = None) -> LaunchInfo | None:
    """The launcher's world when RANK and WORLD_SIZE are set, else None.

    Raises :class:`ConfigError` for values that are not ranks (``RANK=one``, a rank outside
    the world)."""
    if not launched(environ):
        return None
    env = os.environ if environ is None else environ
    try:
        rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", rank))
    except ValueError:
        raise ConfigError(f"RANK={env['RANK']!r}, WORLD_SIZE={env['WORLD_SIZE']!r}, "
                          f"LOCAL_RANK={env.get('LOCAL_RANK')!r}: expected integers",
                          file="launcher environment") from None
    if not 0 <= rank < world_size or local_rank < 0:
        raise ConfigError(f"RANK={rank} is not a rank of WORLD_SIZE={world_size} "
                          f"(LOCAL_RANK={local_rank})", file="launcher environment")
    return LaunchInfo(rank=rank, world_size=world_size, local_rank=local_rank)


def report_fields(info: LaunchInfo | None, environ: Mapping[str, str] | None = None
                  ) -> dict[str, Any]:
    """What every JSON report records about where it ran (rank 0 of 1 outside a launcher);
    ``run_id`` is torchrun's ``TORCHELASTIC_RUN_ID`` (its rendezvous id, a fresh uuid with
    ``--standalone``: torch ``torch/distributed/run.py`` ``config_from_args``), which tells
    the ranks of one launched world from another's."""
    env = os.environ if environ is None else environ
    return {"rank": info.rank if info else 0, "world_size": info.world_size if info else 1,
            "local_rank": info.local_rank if info else 0, "host": host_name(),
            "run_id": env.get("TORCHELASTIC_RUN_ID") if info else None}


def check_report_path(template: str) -> None:
    """Raise :class:`ConfigError` for a placeholder ``--devcaps-json`` does not know."""
    import string

    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as exc:
        raise ConfigError(f"--devcaps-json {template!r}: {exc} (write braces as {{{{ and }}}})",
                          file="--devcaps-json") from None
    for field in fields:
        if field not in PLACEHOLDERS:
            raise ConfigError(f"--devcaps-json {template!r}: unknown placeholder {{{field}}}"
                              f"{did_you_mean(field, PLACEHOLDERS)}; known: "
                              + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS), file="--devcaps-json")


def report_path(template: str, info: LaunchInfo | None) -> str:
    """``template`` with its placeholders filled. Every rank of a launched world writes its
    report, so that a rank that died before writing one is known missing (``devcaps report
    merge``): a path without ``{rank}`` (or ``{local_rank}``) is rank 0's (with ``{host}``
    alone: the first rank of each host's), and every other rank writes beside it with
    ``-rank<N>`` before the suffix (``report.json``, ``report-rank1.json``)."""
    path = template.format(**report_fields(info))
    if info is None or info.rank == 0 or "{rank}" in template or "{local_rank}" in template:
        return path
    if "{host}" in template and info.local_rank == 0:
        return path
    head, name = os.path.split(path)
    stem, dot, suffix = name.rpartition(".")
    name = f"{stem}-rank{info.rank}.{suffix}" if dot and stem else f"{name}-rank{info.rank}"
    return os.path.join(head, name)
