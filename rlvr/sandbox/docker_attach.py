"""The docker backend's attach plumbing: a container's stdin/stdout/stderr over the raw
socket of docker's attach endpoint, demultiplexed, capped, and as a running server's files.

Why the raw socket. The SDK's attach helpers buffer a whole stream or hide the socket; a run
needs its output capped while it streams (`CappedBuffer`), a server needs stdout as a real
pipe that `select()` works on and stdin that half-closes (`DockerServer`).
"""
from __future__ import annotations

import collections
import errno
import io
import os
import socket
import struct
import threading
from typing import Callable

from rlvr.errors import SandboxUnavailable

STREAM_STDOUT, STREAM_STDERR = 1, 2
READ_CHUNK = 1 << 16


def attach_socket(api, cid: str, *, stdin: bool):
    """Attach to the (not yet started) container's streams: the raw socket, plus the HTTP
    response object that must stay referenced while the socket is in use."""
    params = {"stdout": 1, "stderr": 1, "stream": 1, "stdin": 1 if stdin else 0}
    response = api.post(
        api._url("/containers/{0}/attach", cid), None, params=params, stream=True,
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
    )
    api._raise_for_status(response)
    raw = response.raw._fp.fp.raw  # the connection's SocketIO (unix socket or plain TCP)
    sock = getattr(raw, "_sock", raw)
    if not isinstance(sock, socket.socket):
        raise SandboxUnavailable(
            f"docker backend: attach over {api.base_url} did not give a plain socket; "
            "use a local unix-socket daemon (scripts/dockerd.sh start)"
        )
    sock.settimeout(None)
    return sock, (response, raw)


class Demux:
    """Parses docker's multiplexed attach stream: frames of [stream, 0, 0, 0, size(be32)]
    followed by `size` payload bytes (stream 1 = stdout, 2 = stderr)."""

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data: bytes):
        self._buf += data
        while len(self._buf) >= 8:
            kind, size = struct.unpack(">BxxxL", self._buf[:8])
            if len(self._buf) < 8 + size:
                break
            payload = bytes(self._buf[8:8 + size])
            del self._buf[:8 + size]
            yield kind, payload


class CappedBuffer:
    def __init__(self, cap: int):
        self.cap = cap
        self.data = bytearray()
        self.truncated = False
        self.total = 0  # bytes the process wrote, kept or not

    def add(self, payload: bytes) -> None:
        self.total += len(payload)
        room = self.cap - len(self.data)
        if len(payload) > room:
            self.truncated = True
            payload = payload[:max(room, 0)]
        self.data += payload

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class AttachStdin(io.RawIOBase):
    """The write half of an attach socket as a binary file: `write` + `flush`; `close` half-
    closes the connection, which (with StdinOnce) closes the process's stdin."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.closed:
            raise ValueError("write to closed sandbox stdin")
        data = bytes(data)
        with self._lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise BrokenPipeError(errno.EPIPE, f"sandbox server stdin: {exc}") from exc
        return len(data)

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        if not self.closed:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        super().close()


class DockerServer:
    """A running sandboxed server: `stdin`/`stdout` are binary files (stdout is a real pipe, so
    `select()` on `stdout.fileno()` works as with a subprocess); stderr is kept as a bounded
    tail in `stderr_tail()` for diagnostics. `close()` kills and removes the container
    (`destroy`, the backend's), then lets go of its staged mounts (`release`)."""

    def __init__(self, container_id: str, sock: socket.socket, keepalive, *,
                 destroy: Callable[[], None], release: Callable[[], None], stderr_cap: int):
        self.container_id = container_id
        self._sock = sock
        self._keepalive = keepalive
        self._destroy = destroy
        self._release = release
        self._stderr = collections.deque()
        self._stderr_len = 0
        self._stderr_cap = stderr_cap
        self._eof = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        read_fd, self._write_fd = os.pipe()
        os.set_inheritable(read_fd, False)
        self.stdout = os.fdopen(read_fd, "rb")
        self.stdin = AttachStdin(sock)
        self._reader = threading.Thread(target=self._pump,
                                        name=f"rlvr-docker-{container_id[:12]}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        demux = Demux()
        try:
            while True:
                try:
                    data = self._sock.recv(READ_CHUNK)
                except OSError:
                    break
                if not data:
                    break
                for kind, payload in demux.feed(data):
                    if kind == STREAM_STDOUT:
                        view = memoryview(payload)
                        while view:
                            try:
                                n = os.write(self._write_fd, view)
                            except OSError:
                                return  # reader side closed: nobody listens any more
                            view = view[n:]
                    elif kind == STREAM_STDERR:
                        payload = payload[-self._stderr_cap:]
                        self._stderr.append(payload)
                        self._stderr_len += len(payload)
                        while self._stderr_len > self._stderr_cap and len(self._stderr) > 1:
                            self._stderr_len -= len(self._stderr.popleft())
        finally:
            self._eof.set()
            try:
                os.close(self._write_fd)
            except OSError:
                pass

    def stderr_tail(self) -> str:
        """The last ~`Limits.output_bytes` the server wrote to stderr."""
        return b"".join(self._stderr).decode("utf-8", errors="replace")[-self._stderr_cap:]

    def alive(self) -> bool:
        """True until the server process exits (its attach stream ends) or `close()`."""
        return not self._closed and not self._eof.is_set()

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._destroy()
        finally:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            # Close our end of the stdout pipe first: a pump blocked writing into a full pipe
            # then fails with EPIPE instead of holding up the join.
            for f in (self.stdout, self.stdin):
                try:
                    f.close()
                except OSError:
                    pass
            self._reader.join(timeout=10)
        try:
            self._sock.close()
        except OSError:
            pass
        self._keepalive = None
        self._release()

    def __enter__(self) -> "DockerServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a forgotten handle must not leave a container behind
        try:
            self.close()
        except Exception:
            pass


def feed_stdin(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the process exited (or was killed) before reading all of it
