"""Who may reach the server: where it binds, and the token that guards it.

Rules (docs/viewer.md "Safety"): the server binds to 127.0.0.1 unless told otherwise; any other
address, and ``--write``, need a token; when a token is set, every request must carry it, as
``Authorization: Bearer TOKEN`` (the JSON API) or the cookie the viewer's sign-in form sets.
Without a token, a request must name a loopback host: a web page that rebinds its own domain to
127.0.0.1 (DNS rebinding) sends its own name in ``Host`` and is refused.
"""

from __future__ import annotations

import hmac
import ipaddress

from ..errors import ValidationError

__all__ = ["COOKIE", "DEFAULT_HOST", "MIN_TOKEN_LENGTH", "check_bind", "loopback_host", "token_matches"]

DEFAULT_HOST = "127.0.0.1"
#: The viewer's cookie holding the token (HttpOnly, SameSite=Strict).
COOKIE = "sessionstore_token"
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


def loopback_host(host_header: str) -> bool:
    """Whether a ``Host`` header (``name[:port]``, ``[v6]:port``) names this machine's loopback."""
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rpartition(":")[0]
    return _loopback(host)


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is the token (a constant-time comparison)."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())
