"""Who may reach the server: where it binds, and the token that guards it.

Rules (docs/viewer.md "Safety"): the server binds to 127.0.0.1 unless told otherwise; any other
address, and ``--write``, need a token; when a token is set, every request must carry it, as
``Authorization: Bearer TOKEN`` (the JSON API) or the cookie the viewer's sign-in form sets.
Without a token, a request must name a loopback host: a web page that rebinds its own domain to
127.0.0.1 (DNS rebinding) sends its own name in ``Host`` and is refused.

A page of another site on this machine (another port of 127.0.0.1 is the same *site*, so the
browser sends it the SameSite=Strict cookie) must not drive the viewer's forms: a request that
changes anything is refused when the browser says it comes from another origin (``Sec-Fetch-Site``,
``Origin``), and the viewer's forms carry a token of the signed-in session that no other origin
can read (``csrf_token``). Failed sign-ins and wrong tokens are throttled per client
(``AuthThrottle``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from ..errors import ValidationError

__all__ = [
    "COOKIE",
    "DEFAULT_HOST",
    "MIN_TOKEN_LENGTH",
    "SAFE_METHODS",
    "AuthThrottle",
    "check_bind",
    "cookie_session",
    "cross_origin",
    "csrf_matches",
    "csrf_token",
    "loopback_host",
    "new_session_cookie",
    "parse_host",
    "token_matches",
]

DEFAULT_HOST = "127.0.0.1"
#: The viewer's cookie: a signed-in session, ``ID.MAC`` (HttpOnly, SameSite=Strict). It holds no
#: token: the MAC is keyed by it, so a new token signs every session out.
COOKIE = "sessionstore_session"
#: Methods that change nothing: every other one is checked for its origin.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: A token shorter than this is refused: it guards the whole log.
MIN_TOKEN_LENGTH = 16


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_bind(host: str, *, token: str | None, write: bool) -> None:
    """Refuse a configuration that would expose the log or its write operations unguarded.

    Raises:
        ValidationError: ``host`` is not a loopback address and there is no token; ``write``
            without a token; a token shorter than ``MIN_TOKEN_LENGTH`` characters.
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        msg = f"the token must have at least {MIN_TOKEN_LENGTH} characters"
        raise ValidationError(msg, field="token")
    if token is None and not _loopback(host):
        msg = f"--host {host} would expose every session to the network: pass a token (--token) too"
        raise ValidationError(msg, field="host")
    if token is None and write:
        raise ValidationError(
            "--write needs a token (--token): it guards append, revert and erase", field="token"
        )


#: ``host[:port]``: a DNS name or IPv4 address, or ``[IPv6]``; ASCII digits for the port.
_HOST = re.compile(
    r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?))"
    r"(?::(?P<port>[0-9]{1,5}))?"
)


def parse_host(host_header: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header that is exactly ``host[:port]`` (``[v6]:port`` for
    IPv6, a port from 1 to 65535); None for anything else (``localhost:80@evil.example``, a
    second colon, a space, userinfo, a path)."""
    found = _HOST.fullmatch(host_header.lower())
    if found is None:
        return None
    port = found["port"]
    if port is not None and not 1 <= int(port) <= 65535:
        return None
    v6 = found["v6"]
    if v6 is not None:
        try:
            ipaddress.IPv6Address(v6)
        except ValueError:
            return None
    return (v6 or found["name"], None if port is None else int(port))


def loopback_host(host_header: str) -> bool:
    """Whether a ``Host`` header (``name[:port]``, ``[v6]:port``, parsed by ``parse_host``) names
    this machine's loopback."""
    parsed = parse_host(host_header)
    return parsed is not None and _loopback(parsed[0])


_DEFAULT_PORTS = {"http": 80, "https": 443}


def cross_origin(method: str, headers: Mapping[str, str]) -> str | None:
    """Why a browser's request from another origin must not change anything; None: allow it.

    A request of a safe method, or one without ``Sec-Fetch-Site`` and ``Origin`` (a program, not a
    browser: it cannot send the viewer's cookie for someone else) passes. Otherwise the browser's
    ``Sec-Fetch-Site`` must be ``same-origin`` (or ``none``: the user's own navigation) and the
    ``Origin`` must name the server's own ``Host``: a page on another port of 127.0.0.1 is the same
    site (its cookies go along) but not the same origin.
    """
    if method.upper() in SAFE_METHODS:
        return None
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() not in {"same-origin", "none"}:
        return f"a {fetch_site} request (Sec-Fetch-Site) may not change anything"
    origin = headers.get("origin")
    if origin is None:
        return None
    host = parse_host(headers.get("host", ""))
    parts = urlsplit(origin.lower()) if origin != "null" else None
    if parts is None or parts.scheme not in _DEFAULT_PORTS or host is None:
        return f"a request from origin {origin[:100]!r} may not change anything"
    try:
        origin_port = parts.port or _DEFAULT_PORTS[parts.scheme]
    except ValueError:  # a port past 65535
        origin_port = -1
    # Behind a TLS proxy the browser's origin is https while this server hears http: the host
    # and port the browser addressed are what must match (no port in Host: either default one).
    ports = {host[1]} if host[1] is not None else set(_DEFAULT_PORTS.values())
    exact = not (parts.path or parts.query or parts.fragment or parts.username is not None)
    if not exact or parts.hostname != host[0] or origin_port not in ports:
        return f"a request from origin {origin[:100]!r} may not change anything"
    return None


def new_session_cookie(token: str) -> str:
    """A signed-in session's cookie value: a random id and its MAC under the token."""
    session = secrets.token_urlsafe(24)
    return f"{session}.{_mac(token, 'session', session)}"


def cookie_session(value: str | None, token: str) -> str | None:
    """The session id of a cookie value signed under ``token``; None when absent or forged."""
    session, _, mac = (value or "").partition(".")
    if not session or not hmac.compare_digest(mac.encode(), _mac(token, "session", session).encode()):
        return None
    return session


def csrf_token(token: str, session: str) -> str:
    """The form token of a signed-in session (a page of another origin cannot read it)."""
    return _mac(token, "form", session)


def csrf_matches(given: str | None, token: str, session: str) -> bool:
    """Whether ``given`` is the session's form token (a constant-time comparison)."""
    return given is not None and hmac.compare_digest(given.encode(), csrf_token(token, session).encode())


def _mac(token: str, purpose: str, value: str) -> str:
    return hmac.new(token.encode(), f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


class AuthThrottle:
    """Failed authentications per client: after ``failures`` within ``window`` seconds, the client
    is refused (429, ``Retry-After``) until the oldest of them is ``window`` seconds old, the right
    token included (else guessing goes on). At most ``clients`` are remembered (the oldest are
    forgotten first), so a flood of addresses cannot grow it without bound."""

    def __init__(
        self,
        failures: int,
        window: float,
        *,
        clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = failures
        self._window = window
        self._clients = clients
        self._clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str) -> deque[float]:
        times = self._seen.get(client)
        if times is None:
            return deque()
        cutoff = self._clock() - self._window
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._seen[client]
        return times

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again (rounded up); None: not throttled."""
        times = self._recent(client)
        if len(times) < self._failures:
            return None
        return max(1, int(times[0] + self._window - self._clock() + 0.999))

    def failed(self, client: str) -> None:
        """Count one failed authentication of ``client``."""
        times = self._seen.setdefault(client, deque(maxlen=self._failures))
        times.append(self._clock())
        self._seen.move_to_end(client)
        while len(self._seen) > self._clients:
            self._seen.popitem(last=False)


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is the token (a constant-time comparison)."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())
