"""One attempt against real sockets: send-time address check, error classes, Host header."""

from __future__ import annotations

from ridecast.cli.receiver import Receiver, Reply, Request
from ridecast.webhooks.deadline import Deadline
from ridecast.webhooks.retry import ErrorClass
from ridecast.webhooks.sender import RESPONSE_BODY_LIMIT, Sender
from tests.conftest import free_port


def _sender(allow_private: bool = True) -> Sender:
    return Sender(timeout_s=2, connect_timeout_s=1, allow_private=allow_private)


async def test_loopback_blocked_at_send_time_without_allow_private() -> None:
    """A loopback target is refused at send time (blocked_address) and never contacted."""
    seen: list[Request] = []
    receiver = Receiver(lambda r: seen.append(r) or Reply())
    await receiver.start()
    sender = _sender(allow_private=False)
    try:
        for url in (receiver.url, f"http://localhost:{receiver.port}/"):
            attempt = await sender.send(url, "msg_1", b"{}", None)
            assert attempt.error_class is ErrorClass.BLOCKED_ADDRESS, attempt
    finally:
        await sender.close()
        await receiver.close()
    assert seen == []


async def test_host_header_names_the_host_while_connecting_to_its_address() -> None:
    """A name is resolved once; the request goes to its address with Host set to the name."""
    seen: list[Request] = []
    receiver = Receiver(lambda r: seen.append(r) or Reply(200, b"x" * 5000))
    await receiver.start()
    sender = _sender()
    try:
        attempt = await sender.send(f"http://localhost:{receiver.port}/p?q=1", "msg_2",
                                    b'{"a":1}', None)
        second = await sender.send(f"http://localhost:{receiver.port}/p?q=1", "msg_3",
                                   b'{"a":1}', None)
    finally:
        await sender.close()
        await receiver.close()
    assert attempt.ok and attempt.status_code == 200 and second.ok
    assert attempt.response_body is not None
    assert len(attempt.response_body) == RESPONSE_BODY_LIMIT
    assert seen[0].headers["host"] == f"localhost:{receiver.port}"
    assert seen[0].target == "/p?q=1" and seen[0].body == b'{"a":1}'


async def test_error_classes_for_dns_connect_and_timeout() -> None:
    """Unresolvable host is dns, a closed port is connect, a silent receiver is timeout."""
    receiver = Receiver(lambda r: Reply(204, delay_s=3))
    await receiver.start()
    sender = Sender(timeout_s=0.3, connect_timeout_s=0.3, allow_private=True)
    try:
        dns = await sender.send("http://no-such-host.invalid/", "msg_4", b"{}", None)
        closed = await sender.send(f"http://127.0.0.1:{free_port()}/", "msg_5", b"{}", None)
        slow = await sender.send(receiver.url, "msg_6", b"{}", None)
    finally:
        await sender.close()
        await receiver.close()
    assert dns.error_class is ErrorClass.DNS
    assert closed.error_class is ErrorClass.CONNECT
    assert slow.error_class is ErrorClass.TIMEOUT


async def test_a_units_deadline_times_out_a_stalled_receiver_and_serves_the_next() -> None:
    """With a dispatcher unit's one timer (``Deadline``), a receiver that stalls is a
    timeout, and the next request of the same task, to a fast path, succeeds."""
    receiver = Receiver(lambda r: Reply(204, delay_s=3 if r.target == "/slow" else 0))
    await receiver.start()
    sender = Sender(timeout_s=0.3, connect_timeout_s=0.3, allow_private=True)
    deadline = Deadline()
    try:
        slow = await sender.send(f"{receiver.url}/slow", "msg_7", b"{}", None, deadline)
        fast = await sender.send(f"{receiver.url}/fast", "msg_8", b"{}", None, deadline)
    finally:
        deadline.close()
        await sender.close()
        await receiver.close()
    assert slow.error_class is ErrorClass.TIMEOUT
    assert fast.ok and fast.status_code == 204
