"""Context-window arithmetic: how full the context may get before we warn, compact or refuse.

Implements SPEC section 4 exactly. From a model's limits and a session's switches
(:class:`WindowConfig`), :func:`token_window` derives every fixed number of the window
(:class:`TokenWindow`); :func:`token_state` compares a token count against it
(:class:`TokenState`). Everything here is a pure function of its arguments: no I/O, no clock.

The arithmetic, with the constants of SPEC section 11::

    reserve               = min(max_output_tokens, MAX_OUTPUT_TOKENS_FOR_SUMMARY)
    window                = min(context_window, context_window_override)
    effective_window      = window - reserve
    autocompact_threshold = effective_window - AUTOCOMPACT_BUFFER_TOKENS, or with a percentage p
                            min(floor(effective_window * p / 100), that)
    threshold             = autocompact_threshold if auto-compact is enabled else effective_window
    warning_threshold     = threshold - WARNING_THRESHOLD_BUFFER_TOKENS
    error_threshold       = threshold - ERROR_THRESHOLD_BUFFER_TOKENS
    blocking_limit        = effective_window - MANUAL_COMPACT_BUFFER_TOKENS, or the override
    percent_left          = max(0, round_half_up((threshold - used) / threshold * 100))
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

from ..errors import ValidationError

__all__ = [
    "AUTOCOMPACT_BUFFER_TOKENS",
    "DEFAULT_MODEL_LIMITS",
    "ERROR_THRESHOLD_BUFFER_TOKENS",
    "MANUAL_COMPACT_BUFFER_TOKENS",
    "MAX_OUTPUT_TOKENS_FOR_SUMMARY",
    "ModelLimits",
    "TokenState",
    "TokenWindow",
    "WARNING_THRESHOLD_BUFFER_TOKENS",
    "WindowConfig",
    "model_limits",
    "token_state",
    "token_window",
]

#: Output tokens held back from the window for the reply (and for a compaction summary).
MAX_OUTPUT_TOKENS_FOR_SUMMARY = 20_000
#: Auto-compact fires this many tokens below the effective window.
AUTOCOMPACT_BUFFER_TOKENS = 13_000
#: The warning state starts this many tokens below the threshold.
WARNING_THRESHOLD_BUFFER_TOKENS = 20_000
#: The error state starts this many tokens below the threshold.
ERROR_THRESHOLD_BUFFER_TOKENS = 20_000
#: Room kept under the effective window so a manual compact can still run at the blocking limit.
MANUAL_COMPACT_BUFFER_TOKENS = 3_000


def _check_positive_int(value: object, name: str) -> None:
    # bool is an int subclass; True as a token count is always a caller's mistake.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{name} must be a positive integer, got {value!r}"
        raise ValidationError(msg, field=name)


def _check_bool(value: object, name: str) -> None:
    # A string such as "false" would be truthy and silently switch compaction off.
    if not isinstance(value, bool):
        msg = f"{name} must be a bool, got {value!r}"
        raise ValidationError(msg, field=name)


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A model's context window and maximum output, in tokens.

    Args:
        context_window: tokens the model accepts (prompt and output together).
        max_output_tokens: the most tokens one response may produce.

    Raises:
        ValidationError: (a ``ValueError``) either number is not a positive integer.
    """

    context_window: int
    max_output_tokens: int

    def __post_init__(self) -> None:
        _check_positive_int(self.context_window, "context_window")
        _check_positive_int(self.max_output_tokens, "max_output_tokens")


#: What an unknown model (or none) gets: the common 200k window with a middling output limit.
DEFAULT_MODEL_LIMITS = ModelLimits(context_window=200_000, max_output_tokens=32_000)

# This table is data, not logic: keep it current as Anthropic ships models (check it against the
# "Models overview" page of Anthropic's docs). Keys are model ids without a date suffix;
# lookup takes the longest key that is the whole id or a "-"-separated prefix of it.
_MODEL_TABLE: dict[str, ModelLimits] = {
    # Current lineup (Anthropic's models overview, late 2026): 1M-token windows, 128K output.
    "claude-fable-5": ModelLimits(1_000_000, 128_000),
    "claude-mythos-5": ModelLimits(1_000_000, 128_000),
    "claude-opus-5": ModelLimits(1_000_000, 128_000),
    "claude-sonnet-5": ModelLimits(1_000_000, 128_000),
    "claude-haiku-5": ModelLimits(1_000_000, 128_000),
    "claude-mythos-preview": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-8": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-7": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-6": ModelLimits(1_000_000, 128_000),
    "claude-sonnet-4-6": ModelLimits(1_000_000, 128_000),
    # Earlier models.
    "claude-opus-4-5": ModelLimits(200_000, 64_000),
    "claude-opus-4-1": ModelLimits(200_000, 32_000),
    "claude-opus-4": ModelLimits(200_000, 32_000),
    "claude-sonnet-4-5": ModelLimits(200_000, 64_000),
    "claude-sonnet-4": ModelLimits(200_000, 64_000),
    "claude-haiku-4-5": ModelLimits(200_000, 64_000),
    "claude-3-7-sonnet": ModelLimits(200_000, 64_000),
    "claude-3-5-haiku": ModelLimits(200_000, 8_192),
    "claude-3-5-sonnet": ModelLimits(200_000, 8_192),
    "claude-3-opus": ModelLimits(200_000, 4_096),
    "claude-3-haiku": ModelLimits(200_000, 4_096),
}
# Claude Code's short aliases; they move to the newest model of each family (also data).
_ALIASES: dict[str, str] = {
    "opus": "claude-opus-5-5",
    "sonnet": "claude-sonnet-5-5",
    "haiku": "claude-haiku-5-5",
    "fable": "claude-fable-5-2",
}
# Longest first, so "claude-opus-4-5" wins over its prefix "claude-opus-4".
_KEYS_LONGEST_FIRST = sorted(_MODEL_TABLE, key=len, reverse=True)

# Bedrock ids: "anthropic.claude-...-v1:0", with an optional region prefix ("us.anthropic.").
_BEDROCK_PREFIX = re.compile(r"^(?:[a-z]+\.)?anthropic\.")
_VERSION_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")
_DATE_SUFFIX = re.compile(r"-\d{8}$")


def _normalize_model_id(model: str) -> str:
    name = model.strip().lower()
    name = _BEDROCK_PREFIX.sub("", name)
    name = name.split("@", 1)[0]  # Vertex: "claude-sonnet-4-5@20250929"
    name = _VERSION_SUFFIX.sub("", name)  # Bedrock "-v1:0", Vertex "claude-3-5-sonnet-v2"
    name = name.removesuffix("-latest")
    name = _DATE_SUFFIX.sub("", name)
    return _ALIASES.get(name, name)


def model_limits(
    model: str | None,
    *,
    default: ModelLimits = DEFAULT_MODEL_LIMITS,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
) -> ModelLimits:
    """The limits of a Claude model, looked up by id.

    The id is normalized first: case and surrounding spaces are ignored; a date suffix
    (``claude-sonnet-4-5-20250929``), ``-latest``, Bedrock's ``[region.]anthropic.`` prefix and
    ``-v1:0`` suffix and Vertex's ``@date`` are dropped; the aliases ``opus``, ``sonnet`` and
    ``haiku`` name the newest model of their family. Then the longest table entry that is
    the whole id or a ``-``-separated prefix of it wins, so ``claude-opus-4-5`` is not read as
    ``claude-opus-4`` and ``claude-opus-4-0`` is.

    Args:
        model: a model id or alias, or None when the session did not say.
        default: the limits for None or an id the table does not know.
        context_window: a number the session states explicitly; replaces the table's window
            (it may be larger, e.g. for a long-context beta).
        max_output_tokens: a number the session states explicitly; replaces the table's.

    Returns:
        The table's limits (or ``default`` itself), with the explicit numbers substituted.

    Raises:
        ValidationError: (a ``ValueError``) an explicit number is not a positive integer.
    """
    found = default
    if model is not None:
        name = _normalize_model_id(model)
        for key in _KEYS_LONGEST_FIRST:
            if name == key or name.startswith(key + "-"):
                found = _MODEL_TABLE[key]
                break
    if context_window is None and max_output_tokens is None:
        return found
    return ModelLimits(
        context_window=found.context_window if context_window is None else context_window,
        max_output_tokens=found.max_output_tokens if max_output_tokens is None else max_output_tokens,
    )


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """A session's switches for the context window; every one is optional.

    Args:
        context_window_override: a smaller window to work within. Capped at the model's
            window: it can only shrink it, never grow it.
        autocompact_percent: auto-compact at this percentage p of the effective window,
            0 < p <= 100. It can only make auto-compact fire earlier than the
            13,000-token buffer rule, never later.
        blocking_limit_override: refuse requests from this many tokens on, instead of
            ``effective_window - 3,000``. Capped at the effective window.
        disable_compaction: no compaction at all, automatic or manual.
        disable_auto_compact: no automatic compaction; a manual compact still works.

    Raises:
        ValidationError: (a ``ValueError``) naming the field: an override that is not a
            positive integer, a percentage outside (0, 100] or not a number, or a switch
            that is not a bool.
    """

    context_window_override: int | None = None
    autocompact_percent: float | None = None
    blocking_limit_override: int | None = None
    disable_compaction: bool = False
    disable_auto_compact: bool = False

    def __post_init__(self) -> None:
        if self.context_window_override is not None:
            _check_positive_int(self.context_window_override, "context_window_override")
        if self.blocking_limit_override is not None:
            _check_positive_int(self.blocking_limit_override, "blocking_limit_override")
        p = self.autocompact_percent
        if p is not None and (
            isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 100  # NaN fails too
        ):
            msg = f"autocompact_percent must be a number in (0, 100], got {p!r}"
            raise ValidationError(msg, field="autocompact_percent")
        _check_bool(self.disable_compaction, "disable_compaction")
        _check_bool(self.disable_auto_compact, "disable_auto_compact")


@dataclass(frozen=True, slots=True)
class TokenWindow:
    """Every fixed number of a session's context window (SPEC section 4), in tokens.

    Build it with :func:`token_window`; the fields are not re-checked here.

    Attributes:
        window: the context window in use (the model's, or a smaller override).
        reserve: held back for the response: ``min(max_output_tokens, 20,000)``.
        effective_window: ``window - reserve``; what the prompt may fill.
        autocompact_threshold: auto-compact fires at or above this.
        threshold: ``autocompact_threshold`` if auto-compact is enabled, else
            ``effective_window``; warnings and ``percent_left`` measure against it.
        warning_threshold: ``threshold - 20,000``.
        error_threshold: ``threshold - 20,000``.
        blocking_limit: requests are refused at or above this.
        auto_compact_enabled: neither compaction switch is off.
        compaction_enabled: manual compaction is allowed.
    """

    window: int
    reserve: int
    effective_window: int
    autocompact_threshold: int
    threshold: int
    warning_threshold: int
    error_threshold: int
    blocking_limit: int
    auto_compact_enabled: bool
    compaction_enabled: bool


# The default WindowConfig() is built once and shared; safe because it is frozen.
def token_window(limits: ModelLimits, config: WindowConfig = WindowConfig()) -> TokenWindow:
    """Derive the context window's numbers from a model's limits and a session's switches.

    Guarantees ``warning_threshold == error_threshold <= threshold <= effective_window``,
    ``1 <= autocompact_threshold <= effective_window - 13,000``,
    ``blocking_limit <= effective_window`` (strictly below without an override) and
    ``window <= limits.context_window``.

    Args:
        limits: the model's limits (see :func:`model_limits`).
        config: the session's switches.

    Returns:
        The window's numbers.

    Raises:
        ValidationError: (a ``ValueError``) the window is too small for the buffers (the
            effective window must exceed 13,000 tokens; names ``context_window`` or
            ``context_window_override``, whichever set it), or ``autocompact_percent`` is so
            small that the auto-compact threshold rounds down to 0 tokens.
    """
    reserve = min(limits.max_output_tokens, MAX_OUTPUT_TOKENS_FOR_SUMMARY)
    window = limits.context_window
    if config.context_window_override is not None:
        # An override can shrink the window but never promise more than the model accepts.
        window = min(window, config.context_window_override)
    effective_window = window - reserve
    autocompact_threshold = effective_window - AUTOCOMPACT_BUFFER_TOKENS
    if autocompact_threshold < 1:
        # Name whichever number set the window, so the caller knows what to fix.
        name = "context_window" if window == limits.context_window else "context_window_override"
        msg = (
            f"{name}={window:,} is too small: its effective window {effective_window:,} "
            f"(window - reserve {reserve:,}) must exceed {AUTOCOMPACT_BUFFER_TOKENS:,} tokens"
        )
        raise ValidationError(msg, field=name)
    if config.autocompact_percent is not None:
        # Exact decimal arithmetic on the percentage as written: in binary floats
        # floor(164_000 * 80.1 / 100) is 131,363, one short of the true 131,364.
        by_percent = math.floor(effective_window * Fraction(str(config.autocompact_percent)) / 100)
        if by_percent < 1:
            msg = (
                f"autocompact_percent={config.autocompact_percent} gives an auto-compact threshold "
                f"of 0 tokens for an effective window of {effective_window:,}"
            )
            raise ValidationError(msg, field="autocompact_percent")
        autocompact_threshold = min(by_percent, autocompact_threshold)
    compaction_enabled = not config.disable_compaction
    auto_compact_enabled = compaction_enabled and not config.disable_auto_compact
    threshold = autocompact_threshold if auto_compact_enabled else effective_window
    blocking_limit = effective_window - MANUAL_COMPACT_BUFFER_TOKENS
    if config.blocking_limit_override is not None:
        # Above the effective window a request would eat the response's reserve.
        blocking_limit = min(config.blocking_limit_override, effective_window)
    return TokenWindow(
        window=window,
        reserve=reserve,
        effective_window=effective_window,
        autocompact_threshold=autocompact_threshold,
        threshold=threshold,
        warning_threshold=threshold - WARNING_THRESHOLD_BUFFER_TOKENS,
        error_threshold=threshold - ERROR_THRESHOLD_BUFFER_TOKENS,
        blocking_limit=blocking_limit,
        auto_compact_enabled=auto_compact_enabled,
        compaction_enabled=compaction_enabled,
    )


def _percent_left(used: int, threshold: int) -> int:
    # Rounds half up, like Math.round in the reference implementation (Python's round()
    # would round half to even: 2.5 -> 2). Integer arithmetic, so an exact half is never
    # misread through float error: floor(100 * (t - u) / t + 1/2) == (200 * (t - u) + t) // (2 * t).
    return max(0, (200 * (threshold - used) + threshold) // (2 * threshold))


@dataclass(frozen=True, slots=True)
class TokenState:
    """How full the context is: a token count measured against a :class:`TokenWindow`.

    The flags are derived from ``used`` and ``window`` on construction, so they always agree.

    Args:
        used: tokens in the context now (SPEC section 4, "Used" tokens).
        window: the session's window.

    Attributes:
        above_warning: ``used >= window.warning_threshold``.
        above_error: ``used >= window.error_threshold``.
        above_autocompact: auto-compact is enabled and ``used >= window.autocompact_threshold``.
        at_blocking_limit: ``used >= window.blocking_limit``; the request must be refused.
        percent_left: ``max(0, round_half_up((threshold - used) / threshold * 100))``, in [0, 100].

    Raises:
        ValidationError: (a ``ValueError``) ``used`` is not a non-negative integer.
    """

    used: int
    window: TokenWindow
    above_warning: bool = field(init=False)
    above_error: bool = field(init=False)
    above_autocompact: bool = field(init=False)
    at_blocking_limit: bool = field(init=False)
    percent_left: int = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.used, bool) or not isinstance(self.used, int) or self.used < 0:
            msg = f"used must be a non-negative integer, got {self.used!r}"
            raise ValidationError(msg, field="used")
        w, used = self.window, self.used
        # Frozen: derived fields are set once, here, through object.__setattr__.
        object.__setattr__(self, "above_warning", used >= w.warning_threshold)
        object.__setattr__(self, "above_error", used >= w.error_threshold)
        above_autocompact = w.auto_compact_enabled and used >= w.autocompact_threshold
        object.__setattr__(self, "above_autocompact", above_autocompact)
        object.__setattr__(self, "at_blocking_limit", used >= w.blocking_limit)
        object.__setattr__(self, "percent_left", _percent_left(used, w.threshold))

    def to_dict(self) -> dict[str, int | bool]:
        """Every number and flag, flat, for JSON output (e.g. the CLI's ``--json``).

        Returns:
            ``used``, the fields of :class:`TokenWindow` and the flags, keyed by field name;
            a new dict each call.
        """
        w = self.window
        return {
            "used": self.used,
            "window": w.window,
            "reserve": w.reserve,
            "effective_window": w.effective_window,
            "autocompact_threshold": w.autocompact_threshold,
            "threshold": w.threshold,
            "warning_threshold": w.warning_threshold,
            "error_threshold": w.error_threshold,
            "blocking_limit": w.blocking_limit,
            "auto_compact_enabled": w.auto_compact_enabled,
            "compaction_enabled": w.compaction_enabled,
            "above_warning": self.above_warning,
            "above_error": self.above_error,
            "above_autocompact": self.above_autocompact,
            "at_blocking_limit": self.at_blocking_limit,
            "percent_left": self.percent_left,
        }


def token_state(used: int, window: TokenWindow) -> TokenState:
    """Measure a token count against a window.

    Args:
        used: tokens in the context now; may exceed the window (estimates run over).
        window: from :func:`token_window`.

    Returns:
        The state with every flag and ``percent_left``.

    Raises:
        ValidationError: (a ``ValueError``) ``used`` is not a non-negative integer.
    """
    return TokenState(used=used, window=window)
