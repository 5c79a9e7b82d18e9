//! RFC 3339 timestamps as holdfast reads and writes them: the hold API's deadlines, the
//! annotations' times and the User-Agent's deadline. Always written in UTC with `Z`.

use chrono::{DateTime, SecondsFormat, Utc};

pub type Timestamp = DateTime<Utc>;

/// Why a string is not an RFC 3339 timestamp.
pub type Rfc3339Error = chrono::ParseError;

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn parse(s: &str) -> Result<Timestamp, Rfc3339Error> {
    DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc))
}

/// Whole seconds, the fraction dropped: `2026-11-29T12:00:00Z`.
pub fn seconds(t: Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Milliseconds, always three digits: `2026-11-29T12:00:00.000Z`.
pub fn millis(t: Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Nanoseconds, always nine digits: `2026-11-29T12:00:00.123456789Z`.
pub fn nanos(t: Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// As many digits as the fraction needs, in groups of three: none, 3, 6 or 9.
pub fn auto(t: Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
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
    }
}
