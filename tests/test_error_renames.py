"""Error names renamed in 0.2.0 keep working in user code, as deprecated aliases of the new class."""

from __future__ import annotations

import pytest

import sessionstore
from sessionstore import errors


@pytest.mark.parametrize(("old", "new"), sorted(errors.DEPRECATED_NAMES.items()))
def test_old_name_is_the_new_class_with_a_warning(old: str, new: str) -> None:
    """``from sessionstore.errors import SummaryFailed`` still catches what is raised now."""
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        alias = getattr(errors, old)

    assert alias is getattr(errors, new)
    assert issubclass(alias, errors.SessionStoreError)


@pytest.mark.parametrize(("old", "new"), sorted(errors.DEPRECATED_NAMES.items()))
def test_old_name_resolves_from_the_facade_but_is_not_exported(old: str, new: str) -> None:
    """Code written against 0.1 imported errors from the package itself; that keeps working."""
    with pytest.warns(DeprecationWarning):
        alias = getattr(sessionstore, old)

    assert alias is getattr(errors, new)
    assert old not in sessionstore.__all__
    assert old not in errors.__all__


def test_a_deprecated_import_statement_works() -> None:
    with pytest.warns(DeprecationWarning):
        from sessionstore.errors import SummaryFailed

    assert SummaryFailed is errors.SummaryFailedError


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchError"):
        _ = errors.NoSuchError
    with pytest.raises(AttributeError, match="NoSuchError"):
        _ = sessionstore.NoSuchError


def test_the_summary_errors_no_longer_look_like_the_agent_loop_error() -> None:
    """The summarizer's too-long error and the agent loop's are two classes with distinct names."""
    # Typed as the base class: mypy knows the two class statements make two classes, the test
    # checks that neither name was turned into an alias of the other.
    summary_error: type[errors.SessionStoreError] = errors.SummaryPromptTooLongError
    assert summary_error is not errors.PromptTooLongError
    assert summary_error.__name__ != errors.PromptTooLongError.__name__
    assert issubclass(errors.SummaryPromptTooLongError, errors.SummaryFailedError)
    assert not issubclass(errors.PromptTooLongError, errors.SummaryFailedError)
