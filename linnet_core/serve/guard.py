"""What `linnet serve` checks before a request reaches a route, for every route alike (an ASGI middleware), and the
connection timeouts uvicorn lacks.

In this order, each refusal an OpenAI-style error body:
- Host (loopback binds only): the Host header must name this machine (localhost, 127.0.0.1, [::1] or the bound
  address), else 400: a web page on another name that resolves to 127.0.0.1 (DNS rebinding) cannot reach the server.
- API key (when set): every route but /health needs `Authorization: Bearer <key>`, else 401. /health stays open so
  that a load balancer or orchestrator can probe the server without the key, as vLLM's does; it tells the model's
  name and the rows in use, nothing a request could not learn.
- POST bodies: `Content-Type: application/json` (415 otherwise: a browser's cross-site form or `text/plain` POST
  cannot be one without a CORS preflight, which this server never grants); at most `max_body_bytes` (413, from
  Content-Length before a byte is read, or while counting a chunked body); each part of the body must arrive within
  `timeout_s` (408); the body must be JSON that Python can hold (400 for nesting too deep or an integer of
  thousands of digits), since the route parses it again. The body is read here, whole and bounded, and handed to the
  route; a client that goes away while uploading is dropped without a word in the log.
Headers must arrive within the same `timeout_s` of a connection opening or of the previous response (uvicorn times out
only idle keep-alive connections), so stalled connections are closed. The listening socket is bound here too, before
the engine is built, so that a port in use is a one-line error and the startup line comes after the bind."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import re
import socket
from dataclasses import dataclass

from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from linnet_core.errors import UserError

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a prompt of ~100k token ids as JSON, far beyond any row this server holds
TIMEOUT_S = 30.0  # the longest wait for a request's headers (from the connection or the last response), or for the
# next part of its body: a client that stalls longer is cut off
OPEN_ROUTES = ("/health",)  # served without the API key
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
# RFC 9110's Host: a name or IPv4 address, or an IPv6 address in brackets, then an optional port of digits
HOST_HEADER = re.compile(r"(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?")


@dataclass(frozen=True)
class GuardSettings:
    api_key: str | None = None  # required as a bearer token on every route but OPEN_ROUTES when set
    allowed_hosts: frozenset[str] | None = None  # Host header names accepted (loopback binds); None accepts any
    max_body_bytes: int = MAX_BODY_BYTES
    timeout_s: float = TIMEOUT_S


def is_loopback(host: str) -> bool:
    """Whether binding this address serves this machine only."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def settings_for(host: str, api_key: str | None, timeout_s: float = TIMEOUT_S) -> GuardSettings:
    """Host checking for a loopback bind (the bound address itself is a good name too); none beyond loopback."""
    allowed = frozenset(LOOPBACK_NAMES | {host.strip("[]").lower()}) if is_loopback(host) else None
    return GuardSettings(api_key=api_key or None, allowed_hosts=allowed, timeout_s=timeout_s)


class Refused(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "code": self.status}}
        return JSONResponse(body, self.status, self.headers)


class Guard:
    """The ASGI middleware: checks every HTTP request (see the module's docstring), reads a POST body whole and
    bounded, then calls the app with that body."""

    def __init__(self, app, settings: GuardSettings = GuardSettings()):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            self.check_host(headers)
            self.check_key(scope, headers)
            if scope["method"] == "POST":
                receive = await self.read_body(headers, receive)
                if receive is None:
                    return  # the client went away while uploading: nobody to answer
        except Refused as e:
            return await e.response()(scope, receive, send)
        await self.app(scope, receive, send)

    def check_host(self, headers: dict) -> None:
        allowed = self.settings.allowed_hosts
        if allowed is None:
            return
        host = headers.get("host", "")
        parsed = HOST_HEADER.fullmatch(host)  # a host and a port, nothing else: "localhost:80@evil.com" is refused
        if parsed is None or parsed["name"].strip("[]").lower() not in allowed:
            raise Refused(400, f"Host {host[:100]!r} is not this server's name; use http://127.0.0.1 or http://localhost")

    def check_key(self, scope, headers: dict) -> None:
        key = self.settings.api_key
        if key is None or scope["path"] in OPEN_ROUTES:
            return
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise Refused(401, "a valid API key is required: send the header `Authorization: Bearer <key>`",
                          "authentication_error", {"WWW-Authenticate": "Bearer"})  # fmt: skip

    async def read_body(self, headers: dict, receive):
        """The whole body, within the limits; a receive() that replays it, or None when the client went away."""
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise Refused(415, f"the body must be JSON: send `Content-Type: application/json`, not {kind[:60]!r}")
        limit = self.settings.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise Refused(413, f"the request body is over {limit} bytes")
        parts, size, more = [], 0, True
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.settings.timeout_s)
            except asyncio.TimeoutError:
                raise Refused(408, f"the request body did not arrive within {self.settings.timeout_s:g} s") from None
            if message["type"] == "http.disconnect":
                return None
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > limit:
                raise Refused(413, f"the request body is over {limit} bytes")
            more = message.get("more_body", False)
        body = b"".join(parts)
        check_json(body)
        return replay(body, receive)


def check_json(body: bytes) -> None:
    """Refuses JSON that Python cannot hold: the route's own parser then sees only what it can answer."""
    try:
        json.loads(body)
    except RecursionError:
        raise Refused(400, "the request body is not valid JSON (nested too deep)") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, or an integer of more than 4300 digits
        raise Refused(400, f"the request body is not valid JSON ({str(e).splitlines()[0][:200]})") from None


def replay(body: bytes, receive):
    """A receive() that gives the app the body read here, then the connection's own messages (a disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def timed_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for request headers (the http= of uvicorn.Config)."""
    return type("HeaderTimeoutH11", (HeaderTimeoutH11,), {"header_timeout_s": timeout_s})


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers do not arrive within header_timeout_s."""

    header_timeout_s = TIMEOUT_S

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.arm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.arm_header_deadline()

    def arm_header_deadline(self) -> None:
        if getattr(self, "header_deadline", None) is not None:
            self.header_deadline.cancel()
        self.header_deadline = self.loop.call_later(self.header_timeout_s, self.headers_late)

    def headers_late(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete  # no request since the deadline was armed
        if waiting and not self.transport.is_closing():
            try:
                self.timeout_keep_alive_handler()  # closes the connection as an idle keep-alive one
            except Exception:  # h11 refused to say goodbye mid-headers: close it anyway
                self.transport.close()

    def connection_lost(self, exc) -> None:
        if getattr(self, "header_deadline", None) is not None:
            self.header_deadline.cancel()
        super().connection_lost(exc)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (IPv4 or IPv6), or a one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn binds: "localhost" is IPv4
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except (OSError, OverflowError) as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
