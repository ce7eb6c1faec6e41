"""Who a session belongs to: its tenant, user and external id, checked and inherited.

The rules, in one place for every write path (``create_session``, ``write_sessions``,
``get_or_create_session``):

* a user belongs to a tenant, so ``user`` needs ``tenant``; an ``external_id`` needs both (it is
  unique per tenant and user, and only a full key is held unique by the database);
* a fork or child session belongs to its parent's tenant and user: left out, they are
  inherited; given, they must be the parent's (a fork shares its parent's log, so it cannot
  move that history to another owner). The external id is the session's own, never inherited.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError
from ._contract import check_owner_key
from ._hashing import SessionIdentity

__all__ = ["Owner", "check_owner", "inherit_owner"]


@dataclass(frozen=True)
class Owner:
    """A session's (tenant, user, external id) as a write asks for them (None: not given)."""

    tenant: str | None = None
    user: str | None = None
    external_id: str | None = None


def check_owner(tenant: object, user: object, external_id: object) -> Owner:
    """The keys checked one by one (see ``check_owner_key``).

    Raises:
        ValidationError: a key that is not a usable string.
    """
    return Owner(
        None if tenant is None else check_owner_key("tenant", tenant),
        None if user is None else check_owner_key("user", user),
        None if external_id is None else check_owner_key("external_id", external_id),
    )


def inherit_owner(session_id: str, owner: Owner, parent: SessionIdentity | None) -> Owner:
    """The owner the session is created with: ``owner`` completed from its parent (if any).

    Raises:
        ValidationError: a tenant or user that is not the parent's; a user without a tenant;
            an external id without a tenant and a user.
    """
    tenant, user = owner.tenant, owner.user
    if parent is not None:
        for name, given, inherited in (("tenant", tenant, parent.tenant), ("user", user, parent.user)):
            if given is not None and given != inherited:
                msg = (
                    f"session {session_id!r}: {name} {given!r} is not its parent "
                    f"{parent.session_id!r}'s ({inherited!r}); a fork or child session belongs to "
                    f"its parent's {name}: leave it out"
                )
                raise ValidationError(msg, field=name)
        tenant, user = parent.tenant, parent.user
    if user is not None and tenant is None:
        msg = f"session {session_id!r}: a user needs a tenant (users are counted per tenant)"
        raise ValidationError(msg, field="tenant")
    if owner.external_id is not None and (tenant is None or user is None):
        msg = f"session {session_id!r}: an external_id needs a tenant and a user (it is unique per pair)"
        raise ValidationError(msg, field="external_id")
    return Owner(tenant, user, owner.external_id)
