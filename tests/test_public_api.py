"""The package facade: everything public is exported, sorted, and importable."""

from __future__ import annotations

import types

import sessionstore


def test_all_is_sorted_and_complete() -> None:
    """__all__ lists exactly the public names, in sorted order."""
    public = {
        name
        for name, value in vars(sessionstore).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)  # the layer packages
    }
    public -= {"annotations"}  # the __future__ import

    assert sessionstore.__all__ == sorted(sessionstore.__all__)
    assert set(sessionstore.__all__) == public


def test_every_error_shares_one_root() -> None:
    """Callers can catch everything sessionstore raises with one class."""
    errors = [
        getattr(sessionstore, name) for name in sessionstore.__all__ if name.endswith(("Error", "Violation"))
    ]

    assert errors
    assert all(issubclass(error, sessionstore.SessionStoreError) for error in errors)
    assert issubclass(sessionstore.ValidationError, ValueError)
    assert issubclass(sessionstore.SessionNotFoundError, LookupError)
