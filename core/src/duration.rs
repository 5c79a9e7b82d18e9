//! The one duration format of holdfast's flags, chart values and command line: a whole
//! number with a unit, or several run together, largest unit first is customary but not
//! required (`50ms`, `15s`, `2m`, `1h30m`, `26280h`, `90d`).
//!
//! Not kube's `Duration` (Go's `time.ParseDuration`): that one also takes fractions, signs,
//! a bare `0` and `ns`/`us`, has no `d`, and panics on a number too large (its
//! `Duration::mul_f64`); a wrapper keeping these forms would have to read the text first,
//! which is all this parser does. See the decisions page.

use std::time::Duration;

/// The units and their length in milliseconds.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Why a text is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration ({problem}); write e.g. 50ms, 15s, 2m, 1h30m or 90d")]
pub struct DurationError {
    text: String,
    problem: &'static str,
}

/// Parse a duration: one or more `<whole number><unit>` with the units `ms`, `s`, `m`, `h`
/// and `d`. A bare number, a fraction, a sign or an unknown unit is refused, so that no flag
/// silently takes seconds for milliseconds.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let fail = |problem| DurationError {
        text: text.to_owned(),
        problem,
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(fail("each part must start with a whole number"));
        }
        let number: u64 = rest[..digits].parse().map_err(|_| fail("too large"))?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let millis = UNITS
            .iter()
            .find(|(name, _)| *name == &rest[..letters])
            .map(|(_, millis)| *millis)
            .ok_or_else(|| {
                fail(if letters == 0 {
                    "each number needs a unit: ms, s, m, h or d"
                } else {
                    "unknown unit; use ms, s, m, h or d"
                })
            })?;
        rest = &rest[letters..];
        total = number
            .checked_mul(millis)
            .and_then(|part| total.checked_add(Duration::from_millis(part)))
            .ok_or_else(|| fail("too large"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form the flags, chart values and `--wait=DURATION` accept today, and its value.
    const ACCEPTED: [(&str, Duration); 17] = [
        ("50ms", Duration::from_millis(50)),
        ("1500ms", Duration::from_millis(1_500)),
        ("15s", Duration::from_secs(15)),
        ("0s", Duration::ZERO),
        ("0ms", Duration::ZERO),
        ("2m", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3_600)),
        ("26280h", Duration::from_secs(26_280 * 3_600)),
        ("90d", Duration::from_secs(90 * 86_400)),
        ("1h30m", Duration::from_secs(5_400)),
        ("1m30s500ms", Duration::from_millis(90_500)),
        // Largest unit first is customary, not required; a unit may repeat.
        ("30s1m", Duration::from_secs(90)),
        ("1s1s", Duration::from_secs(2)),
        ("007s", Duration::from_secs(7)),
        // Surrounding space is trimmed.
        (" 0s ", Duration::ZERO),
        ("\t15s\n", Duration::from_secs(15)),
        // A part's milliseconds must fit 64 bits; the sum may pass them.
        (
            "18446744073709551615ms1ms",
            Duration::from_millis(u64::MAX).saturating_add(Duration::from_millis(1)),
        ),
    ];

    /// Every form refused today, with the reason its message gives. The first group are
    /// forms Go's `time.ParseDuration` (kube's `Duration`) reads.
    const REFUSED: [(&str, &str); 28] = [
        ("0", "each number needs a unit: ms, s, m, h or d"),
        ("1.5s", "each number needs a unit: ms, s, m, h or d"),
        (".5s", "each part must start with a whole number"),
        ("-1s", "each part must start with a whole number"),
        ("+1s", "each part must start with a whole number"),
        ("1ns", "unknown unit; use ms, s, m, h or d"),
        ("1us", "unknown unit; use ms, s, m, h or d"),
        ("1\u{b5}s", "each number needs a unit: ms, s, m, h or d"),
        ("1\u{3bc}s", "each number needs a unit: ms, s, m, h or d"),
        ("1h-1m", "each part must start with a whole number"),
        ("1s0", "each number needs a unit: ms, s, m, h or d"),
        ("1e3s", "unknown unit; use ms, s, m, h or d"),
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("60", "each number needs a unit: ms, s, m, h or d"),
        ("s", "each part must start with a whole number"),
        ("3w", "unknown unit; use ms, s, m, h or d"),
        ("1S", "unknown unit; use ms, s, m, h or d"),
        ("1 s", "each number needs a unit: ms, s, m, h or d"),
        ("1sm", "unknown unit; use ms, s, m, h or d"),
        ("1s2", "each number needs a unit: ms, s, m, h or d"),
        ("1s 2s", "each part must start with a whole number"),
        ("1s,2s", "each part must start with a whole number"),
        ("1d\u{2}", "each part must start with a whole number"),
        ("90 days", "each number needs a unit: ms, s, m, h or d"),
        ("99999999999999999999d", "too large"),
        ("999999999999999d", "too large"),
        ("18446744073709551616ms", "too large"),
    ];

    #[test]
    fn every_form_accepted_and_refused_is_pinned() {
        for (text, want) in ACCEPTED {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
        for (text, problem) in REFUSED {
            let err = parse(text).expect_err(text);
            assert_eq!(
                err.to_string(),
                format!(
                    "{text:?} is not a duration ({problem}); write e.g. 50ms, 15s, 2m, 1h30m or 90d"
                ),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_largest_accepted_values_are_exact() {
        // Whole-number arithmetic to the last millisecond, where Go's float reading rounds.
        assert_eq!(
            parse("18446744073709551615ms"),
            Ok(Duration::from_millis(u64::MAX))
        );
        assert_eq!(
            parse("99999999999999ms"),
            Ok(Duration::from_millis(99_999_999_999_999))
        );
        assert_eq!(
            parse("17999999999999999s"),
            Ok(Duration::from_secs(17_999_999_999_999_999))
        );
        assert_eq!(
            parse("213503982334d"),
            Ok(Duration::from_secs(213_503_982_334 * 86_400))
        );
    }
}
