//! The one duration format of holdfast's flags, chart values and command line: whole numbers
//! with units, run together, largest unit first customary but not required (`50ms`, `15s`,
//! `2m`, `1h30m`, `26280h`, `90d`). The units are kube's `Duration`'s (Go's
//! `time.ParseDuration`, as Kubernetes reads durations): it reads each unit's length.
//!
//! It does not read the whole text, because it differs from holdfast's format (the table below
//! pins it):
//! - it also takes a fraction (`1.5s`), a sign (`-1s`, `+1s`; the minus lost on the way to a
//!   std `Duration`), a bare `0`, an empty text, a trailing bare `0` (`1s0`), `ns`, `us` and
//!   `µs`: all refused here, so that no flag silently takes seconds for milliseconds;
//! - it has no `d` (here 24 of its hours) and refuses space around the text (trimmed here);
//! - it multiplies floats: a large part is rounded (`99999999999999ms` reads as
//!   99999999999.999008179s), and one too large panics (`99999999999999999999h`).
//!   Here the arithmetic is whole milliseconds: exact, and too large is an error.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration ({problem}); write e.g. 50ms, 15s, 2m, 1h30m or 90d")]
pub struct DurationError {
    text: String,
    problem: &'static str,
}

/// Parse a duration: one or more `<whole number><unit>` with the units `ms`, `s`, `m`, `h`
/// and `d`. A bare number, a fraction, a sign or an unknown unit is refused.
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
        let millis = unit_millis(&rest[..letters]).ok_or_else(|| {
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

/// A unit's length in milliseconds, as kube's `Duration` reads one of it; a day is 24 hours.
fn unit_millis(unit: &str) -> Option<u64> {
    let (unit, times) = match unit {
        "ms" | "s" | "m" | "h" => (unit, 1),
        "d" => ("h", 24),
        _ => return None,
    };
    let one: kube_core::Duration = format!("1{unit}").parse().ok()?;
    let millis = u64::try_from(Duration::from(one).as_millis()).ok()?;
    Some(millis * times)
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
