"""Context-window arithmetic (SPEC section 4): the model table, the window's numbers and the token state."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionstore import (
    ValidationError,
)
from sessionstore.projections import _window
from sessionstore.projections._window import (
    AUTOCOMPACT_BUFFER_TOKENS,
    DEFAULT_MODEL_LIMITS,
    ERROR_THRESHOLD_BUFFER_TOKENS,
    MANUAL_COMPACT_BUFFER_TOKENS,
    MAX_OUTPUT_TOKENS_FOR_SUMMARY,
    WARNING_THRESHOLD_BUFFER_TOKENS,
    ModelLimits,
    TokenState,
    TokenWindow,
    WindowConfig,
    model_limits,
    token_state,
    token_window,
)

# The common case: a 200k model whose output limit exceeds the 20k reserve cap.
BIG_OUTPUT = ModelLimits(200_000, 64_000)
# From seed 001: effective 180,000, auto-compact 167,000, warning 147,000, blocking 177,000.
STANDARD = token_window(BIG_OUTPUT)


def _numbers(window: TokenWindow) -> dict[str, int | bool]:
    return dataclasses.asdict(window)


class TestConstants:
    def test_constants_match_spec_section_11(self) -> None:
        """The buffers are the seed values."""
        actual = (
            MAX_OUTPUT_TOKENS_FOR_SUMMARY,
            AUTOCOMPACT_BUFFER_TOKENS,
            WARNING_THRESHOLD_BUFFER_TOKENS,
            ERROR_THRESHOLD_BUFFER_TOKENS,
            MANUAL_COMPACT_BUFFER_TOKENS,
        )

        assert actual == (20_000, 13_000, 20_000, 20_000, 3_000)
        assert ModelLimits(200_000, 32_000) == DEFAULT_MODEL_LIMITS

    def test_all_is_sorted_and_importable(self) -> None:
        """The module's __all__ is in plain sorted order and every name exists."""
        assert _window.__all__ == sorted(_window.__all__)
        assert all(hasattr(_window, name) for name in _window.__all__)


class TestModelLimits:
    @pytest.mark.parametrize(
        ("model", "expected"),
        [
            ("claude-opus-4-5", ModelLimits(200_000, 64_000)),
            ("claude-opus-4-1", ModelLimits(200_000, 32_000)),
            ("claude-opus-4", ModelLimits(200_000, 32_000)),
            ("claude-sonnet-4-5", ModelLimits(200_000, 64_000)),
            ("claude-sonnet-4", ModelLimits(200_000, 64_000)),
            ("claude-haiku-4-5", ModelLimits(200_000, 64_000)),
            ("claude-3-7-sonnet", ModelLimits(200_000, 64_000)),
            ("claude-3-5-haiku", ModelLimits(200_000, 8_192)),
            ("claude-3-5-sonnet", ModelLimits(200_000, 8_192)),
            ("claude-3-opus", ModelLimits(200_000, 4_096)),
            ("claude-3-haiku", ModelLimits(200_000, 4_096)),
        ],
    )
    def test_every_table_entry(self, model: str, expected: ModelLimits) -> None:
        """Each current model has its documented window and output limit."""
        assert model_limits(model) == expected

    @pytest.mark.parametrize(
        ("model", "max_output"),
        [
            # Dated ids: the date suffix is dropped, then the longest prefix wins.
            ("claude-sonnet-4-5-20250929", 64_000),
            ("claude-opus-4-5-20251101", 64_000),
            ("claude-opus-4-1-20250805", 32_000),
            ("claude-opus-4-20250514", 32_000),
            ("claude-3-5-haiku-20241022", 8_192),
            ("claude-3-opus-20240229", 4_096),
            # Aliases.
            ("claude-opus-4-0", 32_000),
            ("claude-sonnet-4-0", 64_000),
            ("claude-3-7-sonnet-latest", 64_000),
            ("claude-3-5-sonnet-latest", 8_192),
            ("sonnet", 128_000),
            ("opus", 128_000),
            ("haiku", 128_000),
            ("claude-opus-4-7", 128_000),
            ("claude-opus-5-5-20261001", 128_000),
            # Cloud ids: Bedrock (with and without a region) and Vertex.
            ("anthropic.claude-3-5-sonnet-20241022-v2:0", 8_192),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 64_000),
            ("claude-opus-4-1@20250805", 32_000),
            ("claude-3-5-sonnet-v2@20241022", 8_192),
            # Case and surrounding spaces do not matter.
            ("  Claude-Opus-4-5-20251101 ", 64_000),
        ],
    )
    def test_dated_ids_and_aliases_resolve(self, model: str, max_output: int) -> None:
        """Ids are normalized before lookup; claude-opus-4-5 is never taken for claude-opus-4."""
        limits = model_limits(model)
        window = 1_000_000 if max_output == 128_000 else 200_000  # the current lineup has 1M windows

        assert limits == ModelLimits(window, max_output)

    @pytest.mark.parametrize(
        "model",
        [None, "", "gpt-4o", "claude-2.1", "claude-opus-40", "claude-sonnet", "my-claude-opus-4-5"],
    )
    def test_unknown_model_gets_the_default(self, model: str | None) -> None:
        """None, other vendors' ids and near misses (no "-" boundary) get the default limits."""
        custom = ModelLimits(100_000, 4_000)

        assert model_limits(model) == DEFAULT_MODEL_LIMITS
        assert model_limits(model, default=custom) is custom

    @pytest.mark.parametrize(
        ("model", "kwargs", "expected"),
        [
            ("claude-sonnet-4-5", {"context_window": 1_000_000}, ModelLimits(1_000_000, 64_000)),
            ("claude-sonnet-4-5", {"max_output_tokens": 16_384}, ModelLimits(200_000, 16_384)),
            ("gpt-4o", {"context_window": 128_000, "max_output_tokens": 8_000}, ModelLimits(128_000, 8_000)),
            (None, {"max_output_tokens": 8_000}, ModelLimits(200_000, 8_000)),
        ],
    )
    def test_explicit_numbers_replace_the_table(
        self, model: str | None, kwargs: dict[str, Any], expected: ModelLimits
    ) -> None:
        """A session that states its limits gets exactly those, even above the table's window."""
        assert model_limits(model, **kwargs) == expected

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"context_window": 0, "max_output_tokens": 1}, "context_window"),
            ({"context_window": -200_000, "max_output_tokens": 1}, "context_window"),
            ({"context_window": 200_000.0, "max_output_tokens": 1}, "context_window"),
            ({"context_window": True, "max_output_tokens": 1}, "context_window"),
            ({"context_window": 200_000, "max_output_tokens": 0}, "max_output_tokens"),
            ({"context_window": 200_000, "max_output_tokens": "64000"}, "max_output_tokens"),
        ],
    )
    def test_limits_must_be_positive_integers(self, kwargs: dict[str, Any], field: str) -> None:
        """A bad limit raises a ValueError naming the field."""
        with pytest.raises(ValidationError, match=field) as caught:
            ModelLimits(**kwargs)

        assert isinstance(caught.value, ValueError)
        assert caught.value.field == field

    def test_explicit_numbers_are_validated(self) -> None:
        """model_limits checks the numbers a session states."""
        with pytest.raises(ValidationError, match="context_window"):
            model_limits("claude-sonnet-4-5", context_window=0)


class TestWindowConfig:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"context_window_override": 0}, "context_window_override"),
            ({"context_window_override": -1}, "context_window_override"),
            ({"context_window_override": 150_000.0}, "context_window_override"),
            ({"context_window_override": True}, "context_window_override"),
            ({"autocompact_percent": 0}, "autocompact_percent"),
            ({"autocompact_percent": -10.0}, "autocompact_percent"),
            ({"autocompact_percent": 100.01}, "autocompact_percent"),
            ({"autocompact_percent": math.nan}, "autocompact_percent"),
            ({"autocompact_percent": math.inf}, "autocompact_percent"),
            ({"autocompact_percent": True}, "autocompact_percent"),
            ({"autocompact_percent": "80"}, "autocompact_percent"),
            ({"blocking_limit_override": 0}, "blocking_limit_override"),
            ({"blocking_limit_override": False}, "blocking_limit_override"),
            ({"disable_compaction": "false"}, "disable_compaction"),
            ({"disable_compaction": 1}, "disable_compaction"),
            ({"disable_auto_compact": None}, "disable_auto_compact"),
        ],
    )
    def test_bad_input_raises_naming_the_field(self, kwargs: dict[str, Any], field: str) -> None:
        """Every switch is checked on construction; the error is a ValueError that names it."""
        with pytest.raises(ValidationError, match=field) as caught:
            WindowConfig(**kwargs)

        assert isinstance(caught.value, ValueError)
        assert caught.value.field == field

    @pytest.mark.parametrize("percent", [100, 100.0, 80, 0.5, 1e-9])
    def test_percentages_in_range_are_accepted(self, percent: float) -> None:
        """The range is (0, 100]: 100 itself and tiny positive values are valid."""
        assert WindowConfig(autocompact_percent=percent).autocompact_percent == percent

    def test_is_frozen(self) -> None:
        """A config cannot change after it is built."""
        config = WindowConfig()

        with pytest.raises(dataclasses.FrozenInstanceError):
            config.disable_compaction = True  # type: ignore[misc]


class TestTokenWindow:
    @pytest.mark.parametrize(
        ("limits", "expected"),
        [
            # Seed 001's worked values: max output below the 20k cap is reserved in full.
            (
                ModelLimits(200_000, 16_384),
                {
                    "window": 200_000,
                    "reserve": 16_384,
                    "effective_window": 183_616,
                    "autocompact_threshold": 170_616,
                    "threshold": 170_616,
                    "warning_threshold": 150_616,
                    "error_threshold": 150_616,
                    "blocking_limit": 180_616,
                },
            ),
            # Max output at or above 20k: the reserve is capped at 20k.
            *[
                (
                    ModelLimits(200_000, max_output),
                    {
                        "window": 200_000,
                        "reserve": 20_000,
                        "effective_window": 180_000,
                        "autocompact_threshold": 167_000,
                        "threshold": 167_000,
                        "warning_threshold": 147_000,
                        "error_threshold": 147_000,
                        "blocking_limit": 177_000,
                    },
                )
                for max_output in (20_000, 32_000, 64_000)
            ],
        ],
    )
    def test_spec_worked_values(self, limits: ModelLimits, expected: dict[str, int]) -> None:
        """The numbers of SPEC section 4's worked examples, exactly."""
        window = token_window(limits)

        assert _numbers(window) == {**expected, "auto_compact_enabled": True, "compaction_enabled": True}

    @pytest.mark.parametrize(
        ("override", "window", "effective", "autocompact", "blocking"),
        [
            (150_000, 150_000, 130_000, 117_000, 127_000),  # below the model's window: used
            (200_000, 200_000, 180_000, 167_000, 177_000),  # equal: no change
            (250_000, 200_000, 180_000, 167_000, 177_000),  # above: capped at the model's window
            (1_000_000, 200_000, 180_000, 167_000, 177_000),
        ],
    )
    def test_window_override_never_exceeds_the_model(
        self, override: int, window: int, effective: int, autocompact: int, blocking: int
    ) -> None:
        """The override shrinks the window; it can never grow it past the model's."""
        result = token_window(BIG_OUTPUT, WindowConfig(context_window_override=override))

        assert (result.window, result.effective_window) == (window, effective)
        assert (result.autocompact_threshold, result.blocking_limit) == (autocompact, blocking)

    @pytest.mark.parametrize(
        ("limits", "override", "percent", "autocompact"),
        [
            (BIG_OUTPUT, None, 80, 144_000),  # floor(180,000 * 0.8) is below 167,000: it wins
            (BIG_OUTPUT, None, 92.5, 166_500),
            (BIG_OUTPUT, None, 93.3, 167_000),  # 167,940 is above the buffer rule: 167,000 wins
            (BIG_OUTPUT, None, 95, 167_000),
            (BIG_OUTPUT, None, 100, 167_000),
            (BIG_OUTPUT, None, 0.001, 1),  # floor(1.8)
            (ModelLimits(200_000, 16_384), None, 50, 91_808),  # 183,616 / 2
            (ModelLimits(200_000, 16_384), None, 33.3, 61_144),  # floor(61,144.128)
            # Exact decimal: floor(164,000 * 80.1 / 100) is 131,364; binary floats give 131,363.
            (BIG_OUTPUT, 184_000, 80.1, 131_364),
        ],
    )
    def test_percentage_override_can_only_lower_the_threshold(
        self, limits: ModelLimits, override: int | None, percent: float, autocompact: int
    ) -> None:
        """autocompact = min(floor(effective * p / 100), effective - 13,000); warnings follow it."""
        config = WindowConfig(context_window_override=override, autocompact_percent=percent)

        result = token_window(limits, config)

        assert result.autocompact_threshold == autocompact
        assert result.threshold == autocompact
        assert result.warning_threshold == result.error_threshold == autocompact - 20_000
        assert result.blocking_limit == result.effective_window - 3_000

    @pytest.mark.parametrize(
        ("override", "blocking"),
        [
            (100_000, 100_000),  # below the default 177,000
            (179_999, 179_999),  # above the default, below the effective window
            (180_000, 180_000),
            (190_000, 180_000),  # capped at the effective window
        ],
    )
    def test_blocking_override_is_capped_at_the_effective_window(self, override: int, blocking: int) -> None:
        """The override replaces effective - 3,000 but never passes the effective window."""
        result = token_window(BIG_OUTPUT, WindowConfig(blocking_limit_override=override))

        assert result.blocking_limit == blocking
        assert _numbers(result) == {**_numbers(STANDARD), "blocking_limit": blocking}

    @pytest.mark.parametrize(
        ("disable_compaction", "disable_auto_compact", "auto_enabled", "compaction_enabled", "threshold"),
        [
            (False, False, True, True, 167_000),
            (False, True, False, True, 180_000),  # manual compaction still works
            (True, False, False, False, 180_000),  # all compaction off
            (True, True, False, False, 180_000),
        ],
    )
    def test_disable_switches(
        self,
        disable_compaction: bool,
        disable_auto_compact: bool,
        auto_enabled: bool,
        compaction_enabled: bool,
        threshold: int,
    ) -> None:
        """With auto-compact off the threshold is the effective window; the auto number is still reported."""
        config = WindowConfig(
            disable_compaction=disable_compaction, disable_auto_compact=disable_auto_compact
        )

        result = token_window(BIG_OUTPUT, config)

        assert (result.auto_compact_enabled, result.compaction_enabled) == (auto_enabled, compaction_enabled)
        assert result.threshold == threshold
        assert result.warning_threshold == result.error_threshold == threshold - 20_000
        assert result.autocompact_threshold == 167_000
        assert result.blocking_limit == 177_000

    @pytest.mark.parametrize(
        ("limits", "config", "field"),
        [
            (ModelLimits(33_000, 20_000), WindowConfig(), "context_window"),  # effective exactly 13,000
            (ModelLimits(20_000, 8_192), WindowConfig(), "context_window"),
            (ModelLimits(4_000, 8_000), WindowConfig(), "context_window"),  # output above the window
            (BIG_OUTPUT, WindowConfig(context_window_override=30_000), "context_window_override"),
            (BIG_OUTPUT, WindowConfig(autocompact_percent=1e-4), "autocompact_percent"),  # floor(0.18)
            (
                BIG_OUTPUT,
                WindowConfig(autocompact_percent=1e-4, disable_auto_compact=True),
                "autocompact_percent",
            ),
        ],
    )
    def test_window_too_small_for_the_buffers_raises(
        self, limits: ModelLimits, config: WindowConfig, field: str
    ) -> None:
        """A window whose auto-compact threshold would be 0 or below is refused, naming the cause."""
        with pytest.raises(ValidationError, match=field) as caught:
            token_window(limits, config)

        assert caught.value.field == field

    def test_smallest_window_that_works(self) -> None:
        """At effective window 13,001 the auto-compact threshold is 1 token."""
        result = token_window(ModelLimits(33_001, 20_000))

        assert result.autocompact_threshold == 1
        assert result.blocking_limit == 10_001


class TestTokenState:
    @pytest.mark.parametrize(
        ("flag", "boundary"),
        [
            ("above_warning", STANDARD.warning_threshold),
            ("above_error", STANDARD.error_threshold),
            ("above_autocompact", STANDARD.autocompact_threshold),
            ("at_blocking_limit", STANDARD.blocking_limit),
        ],
    )
    @pytest.mark.parametrize(("offset", "expected"), [(-1, False), (0, True), (1, True)])
    def test_each_flag_turns_on_at_its_threshold(
        self, flag: str, boundary: int, offset: int, expected: bool
    ) -> None:
        """Every comparison is used >= threshold: off one token below, on at it."""
        state = token_state(boundary + offset, STANDARD)

        assert getattr(state, flag) is expected

    @pytest.mark.parametrize(
        ("used", "expected"),
        [
            (0, (False, False, False, False)),
            (146_999, (False, False, False, False)),
            (147_000, (True, True, False, False)),
            (167_000, (True, True, True, False)),
            (177_000, (True, True, True, True)),
            (250_000, (True, True, True, True)),  # estimates may run past the window
        ],
    )
    def test_flags_on_the_standard_window(self, used: int, expected: tuple[bool, bool, bool, bool]) -> None:
        """(above_warning, above_error, above_autocompact, at_blocking_limit) as usage grows."""
        state = token_state(used, STANDARD)
        flags = (state.above_warning, state.above_error, state.above_autocompact, state.at_blocking_limit)

        assert flags == expected

    @pytest.mark.parametrize(
        "config", [WindowConfig(disable_auto_compact=True), WindowConfig(disable_compaction=True)]
    )
    @pytest.mark.parametrize(
        ("used", "expected"),
        [
            (159_999, (False, False, False)),
            (160_000, (True, False, False)),  # warning = effective 180,000 - 20,000
            (177_000, (True, False, True)),  # the blocking limit still applies
            (200_000, (True, False, True)),
        ],
    )
    def test_flags_with_auto_compact_off(
        self, config: WindowConfig, used: int, expected: tuple[bool, bool, bool]
    ) -> None:
        """(above_warning, above_autocompact, at_blocking_limit): auto-compact never fires when disabled."""
        state = token_state(used, token_window(BIG_OUTPUT, config))

        assert (state.above_warning, state.above_autocompact, state.at_blocking_limit) == expected

    @pytest.mark.parametrize(
        ("used", "expected"),
        [
            (0, 100),
            (1, 100),  # 99.9994
            (835, 100),  # exactly 99.5: half rounds up
            (1_671, 99),  # 98.9994
            (83_500, 50),
            (162_825, 3),  # exactly 2.5: half up gives 3 (Python's round() would give 2)
            (164_495, 2),  # exactly 1.5
            (166_165, 1),  # exactly 0.5: half up gives 1 (round() would give 0)
            (166_166, 0),  # 0.4994
            (166_999, 0),
            (167_000, 0),  # at the threshold
            (170_000, 0),  # above it: never negative
            (1_000_000, 0),
        ],
    )
    def test_percent_left_rounds_half_up_and_floors_at_zero(self, used: int, expected: int) -> None:
        """percent_left = max(0, floor((threshold - used) / threshold * 100 + 1/2)), threshold 167,000."""
        assert token_state(used, STANDARD).percent_left == expected

    def test_percent_left_measures_against_the_effective_window_when_auto_is_off(self) -> None:
        """Without auto-compact the threshold, and so percent_left, uses the effective window."""
        window = token_window(BIG_OUTPUT, WindowConfig(disable_auto_compact=True))

        assert token_state(90_000, window).percent_left == 50
        assert token_state(180_000, window).percent_left == 0

    @pytest.mark.parametrize("used", [-1, True, 1.5, "100", None])
    def test_used_must_be_a_non_negative_integer(self, used: Any) -> None:
        """A bad token count raises a ValueError naming ``used``."""
        with pytest.raises(ValidationError, match="used") as caught:
            token_state(used, STANDARD)

        assert caught.value.field == "used"

    def test_direct_construction_derives_the_same_flags(self) -> None:
        """TokenState(used, window) computes its own flags, so they cannot disagree with ``used``."""
        state = TokenState(used=170_000, window=STANDARD)

        assert state == token_state(170_000, STANDARD)
        assert state.above_autocompact is True
        with pytest.raises(dataclasses.FrozenInstanceError):
            state.used = 0  # type: ignore[misc]

    def test_to_dict_is_flat_json_with_every_number_and_flag(self) -> None:
        """to_dict has used, the window's numbers and the flags, and survives a JSON round trip."""
        state = token_state(150_000, token_window(ModelLimits(200_000, 16_384)))

        data = state.to_dict()

        assert data == {
            "used": 150_000,
            "window": 200_000,
            "reserve": 16_384,
            "effective_window": 183_616,
            "autocompact_threshold": 170_616,
            "threshold": 170_616,
            "warning_threshold": 150_616,
            "error_threshold": 150_616,
            "blocking_limit": 180_616,
            "auto_compact_enabled": True,
            "compaction_enabled": True,
            "above_warning": False,
            "above_error": False,
            "above_autocompact": False,
            "at_blocking_limit": False,
            "percent_left": 12,  # 20,616 / 170,616 = 12.08 %
        }
        assert json.loads(json.dumps(data)) == data
        assert set(data) == {"used"} | {f.name for f in dataclasses.fields(TokenWindow)} | {
            f.name for f in dataclasses.fields(TokenState) if not f.init
        }


# Any model limits, including windows too small for the buffers.
_any_limits = st.builds(ModelLimits, st.integers(1, 3_000_000), st.integers(1, 300_000))
_configs = st.builds(
    WindowConfig,
    context_window_override=st.none() | st.integers(1, 3_000_000),
    autocompact_percent=st.none() | st.integers(1, 100) | st.floats(min_value=1e-6, max_value=100),
    blocking_limit_override=st.none() | st.integers(1, 3_000_000),
    disable_compaction=st.booleans(),
    disable_auto_compact=st.booleans(),
)
# Limits and configs that always give a usable window (effective window above 13,000).
_usable_limits = st.builds(ModelLimits, st.integers(33_001, 3_000_000), st.integers(1, 300_000))
_usable_configs = st.builds(
    WindowConfig,
    context_window_override=st.none() | st.integers(33_001, 3_000_000),
    autocompact_percent=st.none() | st.integers(1, 100) | st.floats(min_value=0.01, max_value=100),
    blocking_limit_override=st.none() | st.integers(1, 3_000_000),
    disable_compaction=st.booleans(),
    disable_auto_compact=st.booleans(),
)


class TestInvariants:
    @given(limits=_usable_limits, config=_usable_configs)
    def test_thresholds_are_ordered_and_capped(self, limits: ModelLimits, config: WindowConfig) -> None:
        """warning == error <= threshold <= effective < window <= the model's; blocking <= effective."""
        w = token_window(limits, config)

        assert w.warning_threshold == w.error_threshold <= w.threshold <= w.effective_window
        assert 1 <= w.autocompact_threshold <= w.effective_window - AUTOCOMPACT_BUFFER_TOKENS
        assert w.effective_window < w.window <= limits.context_window
        assert 1 <= w.blocking_limit <= w.effective_window
        if config.blocking_limit_override is None:
            assert w.blocking_limit == w.effective_window - MANUAL_COMPACT_BUFFER_TOKENS
        assert w.threshold == (w.autocompact_threshold if w.auto_compact_enabled else w.effective_window)
        assert w.auto_compact_enabled <= w.compaction_enabled

    @given(limits=_any_limits, config=_configs)
    def test_any_input_gives_a_window_or_a_validation_error(
        self, limits: ModelLimits, config: WindowConfig
    ) -> None:
        """token_window refuses exactly the windows whose auto-compact threshold would be below 1."""
        window = min(limits.context_window, config.context_window_override or limits.context_window)
        effective = window - min(limits.max_output_tokens, MAX_OUTPUT_TOKENS_FOR_SUMMARY)
        candidates = [effective - AUTOCOMPACT_BUFFER_TOKENS]
        if config.autocompact_percent is not None:
            candidates.append(math.floor(effective * Fraction(str(config.autocompact_percent)) / 100))
        usable = min(candidates) >= 1

        try:
            result: TokenWindow | None = token_window(limits, config)
        except ValidationError:
            result = None

        assert (result is not None) == usable

    @given(
        limits=_usable_limits,
        config=_usable_configs,
        used=st.integers(0, 4_000_000),
        more=st.integers(0, 100_000),
    )
    def test_percent_left_is_bounded_monotone_and_exact(
        self, limits: ModelLimits, config: WindowConfig, used: int, more: int
    ) -> None:
        """percent_left is in [0, 100], never grows with usage, and is the exact half-up rounding."""
        w = token_window(limits, config)
        exact = Fraction(100 * (w.threshold - used), w.threshold)

        state, later = token_state(used, w), token_state(used + more, w)

        assert 0 <= later.percent_left <= state.percent_left <= 100
        assert state.percent_left == max(0, math.floor(exact + Fraction(1, 2)))
        assert state.above_error == state.above_warning
        assert state.above_autocompact <= state.above_warning  # auto-compact fires after the warning
        assert later.at_blocking_limit >= state.at_blocking_limit
