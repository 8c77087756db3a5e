"""The order in which the SDK tries a cluster's nodes, and how long a stream waits (pure)."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.client import Backoff, Client
from ridecast.client.calls import try_next_node
from ridecast.client.models import Connection
from ridecast.client.nodes import Nodes, split_urls, stream_wait


def test_split_urls_takes_a_comma_separated_string_or_a_list() -> None:
    """One string may name several nodes; blanks and trailing slashes are dropped."""
    assert split_urls("http://a:1/, http://b:2") == ("http://a:1", "http://b:2")
    assert split_urls(["http://a:1", "http://b:2/"]) == ("http://a:1", "http://b:2")
    assert split_urls("http://a:1") == ("http://a:1",)
    with pytest.raises(ValueError):
        split_urls(" , ")


def test_the_node_that_answered_is_tried_first() -> None:
    """A failed first choice hands over to the next; an answer makes a node the first."""
    nodes = Nodes(("a", "b", "c"))
    assert nodes.order() == [0, 1, 2]
    nodes.failed(0)
    assert nodes.order() == [1, 2, 0]
    nodes.failed(0)  # a node that is not the first choice changes nothing
    assert nodes.url == "b"
    nodes.answered(2)
    assert nodes.order() == [2, 0, 1]


@given(st.integers(1, 5), st.integers(0, 60), st.floats(0, 0.999))
def test_a_stream_waits_only_once_per_round_of_nodes(nodes: int, attempt: int,
                                                     rand: float) -> None:
    """With one node the wait is the back-off's, as before; with several, no wait until
    every node has failed in a row, then the back-off of the round."""
    backoff = Backoff()
    wait = stream_wait(backoff, attempt, nodes, rand)
    if nodes == 1:
        assert wait == backoff.delay(attempt, rand)
    elif attempt % nodes == nodes - 1:
        assert wait == backoff.delay(attempt // nodes, rand)
    else:
        assert wait == 0.0


def test_which_failures_may_go_to_another_node() -> None:
    """A request that never left goes to the next node whatever its method; one that broke
    after it was sent only if it is a GET (a POST might have been stored)."""
    request = httpx.Request("POST", "http://a/")
    refused = httpx.ConnectError("refused", request=request)
    broken = httpx.ReadError("reset", request=request)
    assert try_next_node("POST", refused)
    assert try_next_node("GET", broken)
    assert not try_next_node("POST", broken)
    assert not try_next_node("PATCH", httpx.ReadTimeout("slow", request=request))


def test_clients_take_several_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list, or RIDECAST_URL with commas; the stream bases follow (or RIDECAST_WS_URL)."""
    monkeypatch.setenv("RIDECAST_URL", "http://a:1,https://b:2")
    monkeypatch.delenv("RIDECAST_WS_URL", raising=False)
    connection = Connection.resolve()
    assert connection.url == "http://a:1"
    assert connection.urls == ("http://a:1", "https://b:2")
    assert connection.stream_bases() == ("ws://a:1", "wss://b:2")
    assert Connection.resolve(ws_url="ws://w:3,ws://x:4").stream_bases() == (
        "ws://w:3", "ws://x:4")
    with Client(["http://c:1", "http://d:2"]) as client:
        assert client.connection.urls == ("http://c:1", "http://d:2")
    assert Connection.resolve(["http://e:1/"]).urls == ("http://e:1",)
