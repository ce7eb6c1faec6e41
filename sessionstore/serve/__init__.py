"""``sessionstore serve``: a local HTTP JSON API and an audit viewer over a store (the ``serve`` extra).

``create_app(store)`` builds the ASGI app; ``check_bind`` refuses an address or ``--write``
without a token. Importing this package needs FastAPI and Jinja2 (``pip install
'sessionstore[serve]'``); the command line imports it only when ``serve`` runs.
"""

from __future__ import annotations

from ._app import create_app
from ._errors import error_body, http_status
from ._limits import DEFAULT_LIMITS, ServeLimits
from ._safety import DEFAULT_HOST, MIN_TOKEN_LENGTH, check_bind
from ._server import server_config

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_LIMITS",
    "MIN_TOKEN_LENGTH",
    "ServeLimits",
    "check_bind",
    "create_app",
    "error_body",
    "http_status",
    "server_config",
]
