"""Case 5: graph breaks are counted, and ``fullgraph=True`` refuses them."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch._dynamo
from torch._dynamo.exc import Unsupported, UserError
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

from pytest_devcaps.suites.dynamo.support import (
    assert_close,
    data_dependent_graph_break,
    explicit_graph_break,
    seeded_tensor,
)

# kind -> (function, a word of the break reason, what fullgraph=True raises instead)
BREAKING: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str, type[Exception]]] = {
    "explicit": (explicit_graph_break, "graph_break", Unsupported),
    # under fullgraph Dynamo traces .item() symbolically, then cannot guard on the branch
    "data_dependent": (data_dependent_graph_break, "item", UserError),
}


@pytest.mark.parametrize("kind", sorted(BREAKING))
def test_graph_break_is_counted_by_explain(device: torch.device, kind: str) -> None:
    fn, reason_word, _ = BREAKING[kind]
    x = seeded_tensor(6, device=device).abs() + 0.5  # positive: the data-dependent branch is sin

    explanation = torch._dynamo.explain(fn)(x)

    assert explanation.graph_break_count == 1
    assert explanation.graph_count == 2
    assert reason_word in str(explanation.break_reasons[0].reason)


@pytest.mark.parametrize("kind", sorted(BREAKING))
def test_graph_break_is_counted_when_compiled(device: torch.device, kind: str) -> None:
    fn = BREAKING[kind][0]
    counter = CompileCounter()
    x = seeded_tensor(6, device=device).abs() + 0.5

    result = torch.compile(fn, backend=counter)(x)

    assert_close(result, fn(x), torch.float32)
    assert counter.frame_count == 2
    assert sum(counters["graph_break"].values()) == 1
    assert counters["stats"]["unique_graphs"] == 2


@pytest.mark.parametrize("kind", sorted(BREAKING))
def test_fullgraph_raises_on_graph_break(device: torch.device, kind: str) -> None:
    fn, _, expected = BREAKING[kind]
    x = seeded_tensor(6, device=device)

    with pytest.raises(expected):
        torch.compile(fn, backend="eager", fullgraph=True)(x)
