"""The reference definition of the reductions, including a ragged last group, against loops."""

from __future__ import annotations

import pytest
import torch

from devcaps_kernels import Reduce
from devcaps_kernels.reductions import reduce_rows

KINDS = {"sum": lambda s: s.sum(-1), "mean": lambda s: s.mean(-1), "sumsq": lambda s: (s * s).sum(-1),
         "meansq": lambda s: (s * s).mean(-1), "amax": lambda s: s.abs().amax(-1)}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(("n", "group"), [(100, 64), (100, 48), (100, 3), (100, 128), (96, 32), (7, 7)])
def test_reduce_rows_by_column_slices(kind, n, group):
    src = torch.randn(5, n, dtype=torch.float64)
    src[2, n - 1] = float("nan")  # in the last group: only that group of row 2 is NaN
    got = reduce_rows(src, Reduce(kind, group=group, ragged=n % group != 0))
    expected = torch.stack([KINDS[kind](src[:, j:j + group]) for j in range(0, n, group)], dim=1)
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert torch.isnan(got[2, -1]) and not torch.isnan(got[2, :-1]).any()


def test_groups_counts_and_shapes():
    r = Reduce("mean", group=48, ragged=True)
    assert r.groups(100) == 3 and r.out_shape(4, 100) == (4, 3)
    assert r.counts(100, torch.device("cpu")).tolist() == [48.0, 48.0, 4.0]
    assert Reduce("sum", group=25).counts(100, torch.device("cpu")) == 25
    assert Reduce("sum").out_shape(4, 100) == (4,) and Reduce("sum").groups(100) == 1
