//! RFC 3339 timestamps as holdfast reads and writes them, and the one place it does: the hold
//! API's deadlines (the CLI's too), the annotations' times, the hold mark's deadline, the
//! User-Agent's deadline, the fences ConfigMap's times and the pod times a fence is compared
//! with, the certificates' ends in Events and Secrets, the Lease renewal `holdfast check` shows. Always written in UTC
//! with `Z`, by jiff's formatter.
//!
//! The reader is RFC 3339's `date-time` and nothing looser (jiff's own parser also takes
//! ISO 8601 and Temporal forms: `12:00Z`, `+0100`, `[UTC]`): `YYYY-MM-DD`, `T` (or `t` or a
//! space), `HH:MM:SS`, an optional fraction of any length (digits past the ninth dropped),
//! then `Z`, `z` or `±HH:MM` (`−`, U+2212, accepted as minus) below a day. A leap second
//! (`:60`) reads as the second before it. Each refusal names its reason as the hold API has
//! always reported it.

use jiff::{Timestamp, civil::DateTime, tz::Offset};

/// Why a string is not an RFC 3339 timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rfc3339Error {
    #[error("premature end of input")]
    TooShort,
    #[error("input contains invalid characters")]
    Invalid,
    #[error("input is out of range")]
    OutOfRange,
    #[error("trailing input")]
    Trailing,
}

use Rfc3339Error::{Invalid, OutOfRange, TooShort, Trailing};

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, as the module's header describes.
pub fn parse(s: &str) -> Result<Timestamp, Rfc3339Error> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return Err(TooShort);
    }
    let num = |at: usize, len: usize| -> Result<i32, Rfc3339Error> {
        b[at..at + len].iter().try_fold(0i32, |n, &c| {
            if c.is_ascii_digit() {
                Ok(n * 10 + i32::from(c - b'0'))
            } else {
                Err(Invalid)
            }
        })
    };
    let sep = |at: usize, ok: &[u8]| {
        if ok.contains(&b[at]) {
            Ok(())
        } else {
            Err(Invalid)
        }
    };
    let year = num(0, 4)?;
    sep(4, b"-")?;
    let month = num(5, 2)?;
    sep(7, b"-")?;
    let day = num(8, 2)?;
    let date = jiff::civil::Date::new(narrow(year)?, narrow(month)?, narrow(day)?)
        .map_err(|_| OutOfRange)?;
    sep(10, b"Tt ")?;
    let hour = num(11, 2)?;
    sep(13, b":")?;
    let minute = num(14, 2)?;
    sep(16, b":")?;
    let second = num(17, 2)?;

    let mut rest = &s[19..];
    let mut nanos = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(if fraction.is_empty() {
                TooShort
            } else {
                Invalid
            });
        }
        nanos = fraction.as_bytes()[..digits]
            .iter()
            .chain(std::iter::repeat(&b'0'))
            .take(9)
            .fold(0i32, |n, &c| n * 10 + i32::from(c - b'0'));
        rest = &fraction[digits..];
    }
    // The leap second reads as the one before it; anything else past 59 is out of range.
    let second = if second == 60 { 59 } else { second };
    let time = jiff::civil::Time::new(narrow(hour)?, narrow(minute)?, narrow(second)?, nanos)
        .map_err(|_| OutOfRange)?;

    let (offset, rest) = offset(rest)?;
    if !rest.is_empty() {
        return Err(Trailing);
    }
    if offset.abs() >= 24 * 3600 {
        return Err(OutOfRange);
    }
    let offset = Offset::from_seconds(offset).map_err(|_| OutOfRange)?;
    offset
        .to_timestamp(DateTime::from_parts(date, time))
        .map_err(|_| OutOfRange)
}

/// `Z`, `z` or `±HH:MM` in seconds east, and what follows it.
fn offset(s: &str) -> Result<(i32, &str), Rfc3339Error> {
    let (negative, s) = if let Some(s) = s.strip_prefix(['Z', 'z']) {
        return Ok((0, s));
    } else if let Some(s) = s.strip_prefix('+') {
        (false, s)
    } else if let Some(s) = s.strip_prefix(['-', '\u{2212}']) {
        (true, s)
    } else if s.is_empty() {
        return Err(TooShort);
    } else {
        return Err(Invalid);
    };
    let b = s.as_bytes();
    let two = |at: usize| -> Result<Option<i32>, Rfc3339Error> {
        match b.get(at..at + 2) {
            Some(&[d1, d2]) if d1.is_ascii_digit() && d2.is_ascii_digit() => {
                Ok(Some(i32::from(d1 - b'0') * 10 + i32::from(d2 - b'0')))
            }
            Some(_) => Ok(None),
            None => Err(TooShort),
        }
    };
    let hours = two(0)?.ok_or(Invalid)?;
    match b.get(2) {
        Some(b':') => {}
        Some(_) => return Err(Invalid),
        None => return Err(TooShort),
    }
    let minutes = two(3)?.ok_or(Invalid)?;
    if minutes > 59 {
        return Err(OutOfRange);
    }
    let seconds = hours * 3600 + minutes * 60;
    Ok((if negative { -seconds } else { seconds }, &s[5..]))
}

fn narrow<T: TryFrom<i32>>(n: i32) -> Result<T, Rfc3339Error> {
    T::try_from(n).map_err(|_| OutOfRange)
}

/// Whole seconds, the fraction dropped: `2026-11-29T12:00:00Z`.
pub fn seconds(t: Timestamp) -> String {
    format!("{t:.0}")
}

/// Milliseconds, always three digits (the rest dropped): `2026-11-29T12:00:00.000Z`.
pub fn millis(t: Timestamp) -> String {
    format!("{t:.3}")
}

/// Nanoseconds, always nine digits: `2026-11-29T12:00:00.123456789Z`.
pub fn nanos(t: Timestamp) -> String {
    format!("{t:.9}")
}

/// As many digits as the fraction needs, trailing zeros dropped: `2026-11-29T12:00:00.5Z`.
pub fn shortest(t: Timestamp) -> String {
    t.to_string()
}

/// As many digits as the fraction needs, in groups of three: none, 3, 6 or 9.
pub fn auto(t: Timestamp) -> String {
    let ns = t.subsec_nanosecond();
    let digits = if ns == 0 {
        0
    } else if ns % 1_000_000 == 0 {
        3
    } else if ns % 1_000 == 0 {
        6
    } else {
        9
    };
    format!("{t:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        parse(s).expect("test time")
    }

    #[test]
    fn accepted_forms() {
        let noon = "2026-11-29T12:00:00Z";
        for s in [
            noon,
            "2026-11-29T13:00:00+01:00",
            "2026-11-29T10:30:00-01:30",
            "2026-11-29T12:00:00-00:00",
            "2026-11-29T11:00:00\u{2212}01:00",
            "2026-11-29t12:00:00z",
            "2026-11-29 12:00:00Z",
            "2026-11-30T11:01:00+23:01",
        ] {
            assert_eq!(seconds(t(s)), noon, "{s}");
        }
        assert_eq!(
            nanos(t("2026-11-29T12:00:00.5Z")),
            "2026-11-29T12:00:00.500000000Z"
        );
        // Digits past the ninth are dropped, not rounded.
        assert_eq!(
            nanos(t("2026-11-29T12:00:00.1234567899999Z")),
            "2026-11-29T12:00:00.123456789Z"
        );
        assert_eq!(
            nanos(t("2026-11-29T13:00:00.000000001+01:00")),
            "2026-11-29T12:00:00.000000001Z"
        );
        // A leap second is accepted.
        assert!(parse("2016-12-31T23:59:60Z").is_ok());
        assert!(parse("2016-12-31T23:59:60.5Z").is_ok());
    }

    #[test]
    fn refused_forms() {
        for (s, why) in [
            ("tomorrow", "premature end of input"),
            ("2026-11-29 12:00", "premature end of input"),
            ("2026-11-29T12:00Z", "premature end of input"),
            ("2026-11-29T12:00:00", "premature end of input"),
            ("2026-11-29T12:00:00+01", "premature end of input"),
            (
                "2026-11-29T12:00:00+0100",
                "input contains invalid characters",
            ),
            ("2026-11-29T12:00:00 Z", "input contains invalid characters"),
            (
                "2026-11-29T12:00:00UTC",
                "input contains invalid characters",
            ),
            ("2026-11-29T12:00:00.Z", "input contains invalid characters"),
            (
                "2026-11-29T12:00:00,5Z",
                "input contains invalid characters",
            ),
            ("2026-11-29X12:00:00Z", "input contains invalid characters"),
            ("2026/11/29T12:00:00Z", "input contains invalid characters"),
            ("+2026-11-29T12:00:00Z", "input contains invalid characters"),
            ("2026-11-29T12:00:00Z ", "trailing input"),
            ("2026-11-29T12:00:00Z[UTC]", "trailing input"),
            ("2026-11-29T12:00:00+01:00:00", "trailing input"),
            ("2026-02-30T12:00:00Z", "input is out of range"),
            ("2026-13-01T12:00:00Z", "input is out of range"),
            ("2026-11-29T24:00:00Z", "input is out of range"),
            ("2026-11-29T12:60:00Z", "input is out of range"),
            ("2026-11-29T12:00:61Z", "input is out of range"),
            ("2026-11-29T12:00:00+24:00", "input is out of range"),
            ("2026-11-29T12:00:00+01:60", "input is out of range"),
        ] {
            let err = parse(s).expect_err(s);
            assert_eq!(err.to_string(), why, "{s}");
        }
    }

    #[test]
    fn written_forms() {
        let plain = t("2026-11-29T12:00:00Z");
        let frac = |f: &str| t(&format!("2026-11-29T12:00:00.{f}Z"));
        assert_eq!(seconds(plain), "2026-11-29T12:00:00Z");
        assert_eq!(seconds(frac("999999999")), "2026-11-29T12:00:00Z");
        assert_eq!(seconds(t("0001-01-01T00:00:00Z")), "0001-01-01T00:00:00Z");

        assert_eq!(millis(plain), "2026-11-29T12:00:00.000Z");
        assert_eq!(millis(frac("9999")), "2026-11-29T12:00:00.999Z");
        assert_eq!(millis(frac("05")), "2026-11-29T12:00:00.050Z");

        assert_eq!(nanos(plain), "2026-11-29T12:00:00.000000000Z");
        assert_eq!(nanos(frac("123456789")), "2026-11-29T12:00:00.123456789Z");

        for (f, written) in [
            ("0", "2026-11-29T12:00:00Z"),
            ("5", "2026-11-29T12:00:00.500Z"),
            ("12", "2026-11-29T12:00:00.120Z"),
            ("123", "2026-11-29T12:00:00.123Z"),
            ("1234", "2026-11-29T12:00:00.123400Z"),
            ("000001", "2026-11-29T12:00:00.000001Z"),
            ("1234567", "2026-11-29T12:00:00.123456700Z"),
            ("000000001", "2026-11-29T12:00:00.000000001Z"),
        ] {
            assert_eq!(auto(frac(f)), written, "{f}");
        }
        assert_eq!(auto(plain), "2026-11-29T12:00:00Z");

        assert_eq!(shortest(plain), "2026-11-29T12:00:00Z");
        assert_eq!(shortest(frac("50")), "2026-11-29T12:00:00.5Z");
        assert_eq!(shortest(frac("1234")), "2026-11-29T12:00:00.1234Z");
    }
}
