"""TCP and TLS opening under a :class:`~relay_ros.wire.deadline.Deadline` and a cancel event.

Used by :class:`~relay_ros.wire.transport.Transport` (the TCP step of an open) and by
the reconnect probe (:mod:`relay_ros.wire.reconnect`), which resolves a server's name
once and then only tries its addresses:

- :func:`resolve`: ``getaddrinfo`` bounded by the deadline. An IP literal resolves at
  once; otherwise the lookup runs on a helper thread when a deadline or cancel event
  applies, because the C resolver cannot be interrupted.
- :func:`connect`: a non-blocking connect to each address in turn, all under the one
  deadline, ``TCP_NODELAY`` set (requests are single large writes and replies must not
  wait for Nagle's algorithm).
- :func:`start_tls`: the TLS handshake of ``wss://``, non-blocking under the deadline.
- :func:`wait_socket`: block until a socket is readable or writable, the deadline
  passes or the cancel event is set.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import ssl
import threading
from typing import Any

from relay_ros.wire.deadline import Deadline, wait_slice

__all__ = ["Address", "connect", "open_tcp", "resolve", "start_tls", "wait_socket"]

#: One ``getaddrinfo`` result: ``(family, type, proto, canonname, sockaddr)``.
Address = tuple[Any, ...]


def wait_socket(
    sock: socket.socket,
    *,
    write: bool,
    deadline: Deadline,
    cancel: threading.Event | None,
    what: str,
) -> None:
    """Block until ``sock`` is readable (or writable), the deadline passes or
    ``cancel`` is set (TimeoutError / OpenCancelled)."""
    if not write and isinstance(sock, ssl.SSLSocket) and sock.pending():
        return
    while True:
        timeout = wait_slice(deadline, cancel, what)
        if write:
            _, ready, _ = select.select([], [sock], [], timeout)
        else:
            ready, _, _ = select.select([sock], [], [], timeout)
        if ready:
            return


def resolve(
    host: str, port: int, deadline: Deadline, cancel: threading.Event | None, what: str
) -> list[Address]:
    """``getaddrinfo(host, port)`` for TCP under the deadline and cancel event.

    An IP literal resolves at once. Otherwise, with a deadline or cancel event,
    the lookup runs on a daemon thread that is abandoned (it finishes on its own)
    when the wait ends first: the C resolver cannot be interrupted.

    Raises:
        socket.gaierror: the name does not resolve.
        TimeoutError, OpenCancelled: as for :func:`wait_socket`.
    """
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    if deadline.timeout is None and cancel is None:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    result: list[Any] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the waiting thread
            result.append(exc)
        finally:
            done.set()

    threading.Thread(target=lookup, name="relay-resolve", daemon=True).start()
    while not done.is_set():
        done.wait(wait_slice(deadline, cancel, what))
    outcome = result[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def connect(
    addresses: list[Address],
    host: str,
    port: int,
    deadline: Deadline,
    cancel: threading.Event | None,
    what: str,
) -> socket.socket:
    """Connect to each of ``addresses`` (of ``host:port``) in order, all under the one
    deadline; return the first connected socket, blocking, with ``TCP_NODELAY``.

    Raises:
        OSError: every address refused or was unreachable (the last error, e.g.
            ``ConnectionRefusedError``); ``TimeoutError`` when the deadline passed.
        OpenCancelled: ``cancel`` was set.
    """
    last_exc: OSError | None = None
    for family, type_, proto, _, address in addresses:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            err = sock.connect_ex(address)
            if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                wait_socket(sock, write=True, deadline=deadline, cancel=cancel, what=what)
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                # OSError(errno, ...) becomes ConnectionRefusedError etc.
                error = OSError(err, f"{os.strerror(err)}: cannot connect to {host}:{port}")
                error.target = (host, port)  # type: ignore[attr-defined]  # see refused_by
                raise error
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            last_exc = exc
            if isinstance(exc, TimeoutError):
                raise
        except BaseException:
            sock.close()
            raise
    if last_exc is None:  # getaddrinfo returned nothing (it raises gaierror otherwise)
        last_exc = OSError(errno.EHOSTUNREACH, f"no address for {host}:{port}")
    raise last_exc


def open_tcp(
    host: str, port: int, deadline: Deadline, cancel: threading.Event | None, what: str
) -> socket.socket:
    """:func:`resolve` then :func:`connect`, under the one deadline.

    Raises:
        OSError: name resolution failed, every address refused or timed out.
        OpenCancelled: ``cancel`` was set.
    """
    return connect(resolve(host, port, deadline, cancel, what), host, port, deadline, cancel, what)


def start_tls(
    sock: socket.socket,
    host: str,
    deadline: Deadline,
    cancel: threading.Event | None,
    what: str,
) -> ssl.SSLSocket:
    """Run the TLS handshake for ``wss://`` with the system's default trust store
    (``SSL_CERT_FILE``/``SSL_CERT_DIR`` apply) and hostname checking.

    Raises:
        ssl.SSLError: the handshake failed (an ``OSError``).
    """
    context = ssl.create_default_context()
    tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    tls.setblocking(False)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            wait_socket(tls, write=False, deadline=deadline, cancel=cancel, what=what)
        except ssl.SSLWantWriteError:
            wait_socket(tls, write=True, deadline=deadline, cancel=cancel, what=what)
    tls.setblocking(True)
    return tls


def refused_by(exc: BaseException) -> tuple[str, int] | None:
    """The ``(host, port)`` whose TCP connect failed with ``exc`` (raised by
    :func:`connect`), or None when ``exc`` did not come from a connect. A reconnect
    wait uses it to tell a refusal by the server's own port from one elsewhere (a
    direct route the server handed out)."""
    target = getattr(exc, "target", None)
    return target if isinstance(target, tuple) else None
