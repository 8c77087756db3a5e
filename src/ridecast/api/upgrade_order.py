"""Answers in request order when a websocket upgrade is pipelined behind requests.

uvicorn hands a connection to its websocket protocol as soon as it parses an upgrade, and
sends the 101 then: a POST and a GET sent before it in the same write could be answered
after the 101, inside the websocket stream. Here the upgrade waits, with reading paused,
until every request before it (the one being answered and those pipelined behind it) has
its answer; then the connection is handed over.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class OrderedUpgrade(HttpToolsProtocol):
    """uvicorn's httptools protocol, with an upgrade answered after the requests before it."""

    _upgrade_pending = False

    def handle_websocket_upgrade(self) -> None:
        cycle = self.cycle
        if (cycle is not None and not cycle.response_complete) or self.pipeline:
            self._upgrade_pending = True  # after the answers: ``on_response_complete``
            self.flow.pause_reading()
            return
        super().handle_websocket_upgrade()

    def on_response_complete(self) -> None:
        if not self._upgrade_pending:
            super().on_response_complete()
            return
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.pipeline:  # the next request before the upgrade; reading stays paused
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._upgrade_pending = False
        self.flow.resume_reading()
        super().handle_websocket_upgrade()


__all__ = ["OrderedUpgrade"]
