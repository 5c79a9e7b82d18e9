//! Metric names, read two ways, so the chart's dashboard can be checked against what the
//! real binaries expose: the names a PromQL expression selects ([`selected_names`]), and the
//! names a `/metrics` scrape offers ([`exposed_names`]). The alerts are checked by promtool
//! instead (tests/tests/it/alerts/mod.rs), on series whose names are checked against a scrape.

use std::collections::BTreeSet;

/// Keywords, and the aggregation operators (which may be followed by `by (...)` rather than
/// their parenthesis).
const KEYWORDS: [&str; 28] = [
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
    "limit_ratio",
    "atan2",
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
];

/// `text` without the spans between `open` and `close` (not nested), and without string
/// literals.
fn without_spans(text: &str, open: char, close: char) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            c if c == open => depth += 1,
            c if c == close && depth > 0 => depth -= 1,
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The metric names a PromQL expression selects: every identifier that is not a function,
/// a keyword, a label (in a matcher or a grouping clause) or part of a number or duration.
pub fn selected_names(expr: &str) -> BTreeSet<String> {
    // Label matchers and range/subquery durations go first (strings with them).
    let text = without_spans(&without_spans(expr, '{', '}'), '[', ']');
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // A number (1, 0.99, 1e3, 0x1f) or a duration: skip its letters too.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let call = chars.get(j) == Some(&'(');
            let lower = word.to_ascii_lowercase();
            if KEYWORDS.contains(&lower.as_str()) {
                let grouping = matches!(
                    lower.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                );
                if grouping && call {
                    // Skip its label list.
                    while j < chars.len() && chars[j] != ')' {
                        j += 1;
                    }
                    i = j + 1;
                }
                continue;
            }
            if !call {
                names.insert(word);
            }
            continue;
        }
        if c == '$' {
            // A Grafana variable outside a matcher ($__range etc.): not a metric.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    names
}

/// The names a `/metrics` text offers: every sample's name, and for every declared family
/// (`# TYPE`) the names its type gives samples even before it has any (a family with no
/// series yet — a label set never seen — is still exposed).
pub fn exposed_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["", "_sum", "_count", "_created"],
                "info" => &["_info"],
                _ => &[""],
            };
            for s in suffixes {
                names.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        selected_names(expr).into_iter().collect()
    }

    #[test]
    fn names_are_read_past_functions_matchers_groupings_and_durations() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (le, endpoint) (rate(a_bucket{ns=~"$namespace", x="a{b}"}[$__rate_interval])))"#
            ),
            ["a_bucket"]
        );
        assert_eq!(
            names(
                "rate(process_cpu_seconds_total{ns=\"x\"}[5m]) * on (namespace, pod) group_left (component) holdfast_build_info{ns=\"x\"}"
            ),
            ["holdfast_build_info", "process_cpu_seconds_total"]
        );
        assert_eq!(
            names("sum(x) < 1 or absent(y{a=\"1\"}) and z > 1e3 unless w offset 5m"),
            ["w", "x", "y", "z"]
        );
        assert_eq!(
            names(
                "time() - min by (kind) (holdfast_hold_oldest_placed_timestamp_seconds) > 259200"
            ),
            ["holdfast_hold_oldest_placed_timestamp_seconds"]
        );
        assert_eq!(names("increase(r_total[$__range])"), ["r_total"]);
        assert_eq!(names("count without(instance) (q)"), ["q"]);
    }

    #[test]
    fn exposed_names_include_declared_families_without_series() {
        let text = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
                    a_requests_total{verb=\"get\"} 3\n# TYPE b histogram\n# TYPE c gauge\n\
                    # TYPE d_build info\nd_build_info{v=\"1\"} 1\nprocess_open_fds 9\n# EOF\n";
        let got = exposed_names(text);
        for n in [
            "a_requests_total",
            "b_bucket",
            "b_count",
            "b_sum",
            "c",
            "d_build_info",
            "process_open_fds",
        ] {
            assert!(got.contains(n), "{n}: {got:?}");
        }
        assert!(!got.contains("a_requests"), "{got:?}");
    }
}
