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

    #[test]
    fn every_unit_and_their_sums() {
        let cases = [
            ("50ms", Duration::from_millis(50)),
            ("15s", Duration::from_secs(15)),
            ("2m", Duration::from_secs(120)),
            ("26280h", Duration::from_secs(26_280 * 3_600)),
            ("90d", Duration::from_secs(90 * 86_400)),
            ("1h30m", Duration::from_secs(5_400)),
            ("1m30s500ms", Duration::from_millis(90_500)),
            (" 0s ", Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn forms_kubes_duration_takes_are_refused() {
        // Go's time.ParseDuration (kube's Duration) reads each of these; a flag must not.
        for bad in [
            "0", "1.5s", ".5s", "-1s", "+1s", "1ns", "1us", "1\u{b5}s", "1e3s", "1h-1m",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // And one it has no unit for.
        assert_eq!(parse("90d"), Ok(Duration::from_secs(90 * 86_400)));
    }

    #[test]
    fn anything_else_is_refused_with_the_text_in_the_message() {
        for bad in [
            "",
            "   ",
            "60",
            "s",
            "1.5s",
            "-1s",
            "+1s",
            "3w",
            "1 s",
            "1sm",
            "1s2",
            "99999999999999999999d",
            "999999999999999d",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!(
            parse("60")
                .expect_err("a bare number")
                .to_string()
                .contains("needs a unit")
        );
    }
}
