"""emu's RNG state: a 16-byte ``(seed, offset)`` pair, the layout of the Philox state CUDA hands
out and DTensor's ``OffsetBasedRNGTracker`` reads and writes (``torch/distributed/tensor/_random.py``
``_PhiloxState``: ``state[:8]`` the seed as uint64, ``state[8:]`` the offset as int64).

Random ops on emu run the CPU kernel on the CPU's default generator (a Mersenne Twister, whose
5,056-byte state has no offset), so the pair names a position of that generator:

- a state this module handed out (:func:`get_state`; the last :data:`REMEMBERED`) is restored
  exactly, so ``get; draw; set; draw`` draws the same numbers twice (``freeze_rng_state``,
  ``fork_rng``);
- any other pair (the per-shard offsets DTensor computes before a random op on a sharded tensor,
  and the offset it sets after it) positions the generator at a stream seeded from the pair
  alone: the same pair gives the same numbers on every rank, different pairs different ones.

Unlike Philox, the numbers a sharded random op draws are not those of the same op on the whole
tensor (DTensor on the CPU keeps no such promise either); that is what a user of emu gives up.
Why this exists: before, emu handed out the CPU generator's own state, and DTensor, seeing
``set_rng_state``, read an offset from it and failed on the first random op on a DTensor
(``reset_parameters`` after ``fully_shard``).
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections import OrderedDict
from typing import Any

from pytest_devcaps.errors import DevcapsValueError

STATE_BYTES = 16
REMEMBERED = 64
"""How many handed-out states are kept for an exact restore (5 KB each)."""
_OFFSET_BITS = 62
"""Offsets handed out stay below 2**62: DTensor adds shard sizes to them as int64."""
_LAYOUT = "<QQ"

_lock = threading.Lock()
_handed_out: OrderedDict[tuple[int, int], Any] = OrderedDict()


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _pack(seed: int, offset: int) -> Any:
    import torch

    return torch.frombuffer(bytearray(struct.pack(_LAYOUT, seed, offset)), dtype=torch.uint8)


def get_state() -> Any:
    """The pair for where the CPU generator is now (no side effect on it)."""
    import torch

    generator = torch.default_generator
    cpu_state = generator.get_state()
    seed = int(generator.initial_seed())
    offset = _digest(cpu_state.numpy().tobytes()) & ((1 << _OFFSET_BITS) - 1)
    with _lock:
        _handed_out[(seed, offset)] = cpu_state
        _handed_out.move_to_end((seed, offset))
        while len(_handed_out) > REMEMBERED:
            _handed_out.popitem(last=False)
    return _pack(seed, offset)


def _pair(state: Any) -> tuple[int, int]:
    import torch

    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 \
            or state.numel() != STATE_BYTES:
        got = (f"a {state.dtype} tensor of {state.numel()} elements"
               if isinstance(state, torch.Tensor) else type(state).__name__)
        raise DevcapsValueError(
            f"emu's RNG state is {STATE_BYTES} uint8 values (seed, offset), as "
            f"torch.emu.get_rng_state() returns; got {got}") from None
    seed, offset = struct.unpack(_LAYOUT, state.detach().to("cpu").contiguous().numpy().tobytes())
    return int(seed), int(offset)


def set_state(state: Any) -> None:
    """Restore a handed-out state exactly, or position the generator at the pair's stream."""
    import torch

    pair = _pair(state)
    with _lock:
        saved = _handed_out.get(pair)
    if saved is not None:
        torch.default_generator.set_state(saved)
    else:
        torch.default_generator.manual_seed(_digest(struct.pack(_LAYOUT, *pair)))
