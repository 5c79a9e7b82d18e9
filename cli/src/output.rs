//! Printing answers: JSON (as the hold API sent it), YAML, or a table for status.

use holdfast_core::hold::printable;
use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::args::Output;

/// `value` as JSON or YAML; tables are made by [`status_table`].
pub fn document(value: &Value, format: Output) -> String {
    match format {
        Output::Yaml => serde_saphyr::to_string(value).unwrap_or_else(|_| value.to_string()),
        Output::Json | Output::Table => {
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        }
    }
}

/// One line for an answer that is not a status: `team-a/mnist: Held`, or the error with its
/// cause and message.
pub fn answer_line(what: &str, status: u16, body: &Value) -> String {
    let field = |k: &str| body.get(k).and_then(Value::as_str);
    if (200..300).contains(&status) {
        let outcome = field("outcome").unwrap_or("Ok");
        let detail = ["resumed", "started"]
            .iter()
            .find_map(|k| {
                body.get(*k)
                    .and_then(Value::as_bool)
                    .map(|b| format!(" ({k}: {b})"))
            })
            .unwrap_or_default();
        return printable(&format!("{what}: {outcome}{detail}")).into_owned();
    }
    let error = field("error").map_or_else(|| format!("HTTP {status}"), str::to_owned);
    let cause = field("cause")
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    let message = field("message").map(str::to_owned).unwrap_or_else(|| {
        body.as_str()
            .map_or_else(|| body.to_string(), str::to_owned)
    });
    printable(&format!("{what}: {error}{cause}: {message}")).into_owned()
}

/// A status row: TrainJob `namespace/name` and the Status call's answer (or the same read
/// from the cluster).
pub struct Row<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub status: &'a Value,
}

const HEADER: [&str; 10] = [
    "NAMESPACE",
    "NAME",
    "MODE",
    "HOLD",
    "HOLDER",
    "REASON",
    "AGE",
    "OPENED",
    "ATTEMPT",
    "STATE",
];

/// The rows as a table, columns padded to their widest cell. Every cell is printed
/// [`printable`]: a reason (or any text read from the cluster) with a control character
/// shows it escaped, and can neither drive the terminal nor forge a row.
pub fn status_table(rows: &[Row<'_>], now: Timestamp) -> String {
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| cells(r, now).map(|c| printable(&c).into_owned()))
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("   ").trim_end().to_owned()
    };
    let mut out = vec![line(&HEADER.map(str::to_owned))];
    out.extend(cells.iter().map(|r| line(r)));
    out.join("\n")
}

fn cells(r: &Row<'_>, now: Timestamp) -> [String; 10] {
    let s = r.status;
    let text = |p: &str| {
        s.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let hold = s.get("hold").filter(|h| !h.is_null());
    let instance = hold.map_or_else(
        || "-".to_owned(),
        |h| match h.get("instance").and_then(Value::as_u64) {
            Some(i) => i.to_string(),
            None => format!(
                "unreadable:{}",
                h.get("unreadableInstance")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ),
        },
    );
    let reason = hold
        .and_then(|h| h.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("-")
        .to_owned();
    // The username that alone may release it (besides an overrider); `-`: none recorded
    // (placed before holdfast recorded holders) or no hold.
    let holder = hold
        .and_then(|h| h.get("holder"))
        .and_then(Value::as_str)
        .unwrap_or("-")
        .to_owned();
    let age = hold
        .and_then(|h| h.get("placedAt"))
        .and_then(Value::as_str)
        .and_then(|t| holdfast_core::rfc3339::parse(t).ok())
        .map_or_else(|| "-".to_owned(), |at| age(now.duration_since(at)));
    [
        r.namespace.to_owned(),
        r.name.to_owned(),
        text("/mode"),
        instance,
        holder,
        reason,
        age,
        s.get("opened")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .to_string(),
        s.get("attempt")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .to_string(),
        state(s.get("state").unwrap_or(&Value::Null)),
    ]
}

/// The pods of the job's executions that remain (Status's `remainingPods`), a row each with
/// its node and what the node says; `None` when none remains.
pub fn remaining_pods_table(status: &Value) -> Option<String> {
    let pods = status.get("remainingPods")?.as_array()?;
    if pods.is_empty() {
        return None;
    }
    let text = |p: &Value, key: &str| p.get(key).and_then(Value::as_str).unwrap_or("-").to_owned();
    let node_state = |p: &Value| match p.get("nodeState").and_then(Value::as_str) {
        Some("ready") => "Ready".to_owned(),
        Some("notReady") => "NotReady".to_owned(),
        Some("gone") => "Deleted".to_owned(),
        Some(other) => other.to_owned(),
        None => "-".to_owned(),
    };
    let mut rows = vec![[
        "REMAINING POD".to_owned(),
        "NODE".to_owned(),
        "NODE STATE".to_owned(),
        "WHY".to_owned(),
    ]];
    rows.extend(pods.iter().map(|p| {
        [
            text(p, "name"),
            text(p, "node"),
            node_state(p),
            text(p, "why"),
        ]
        .map(|c| printable(&c).into_owned())
    }));
    let mut widths = [0usize; 4];
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|row| {
            row.iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("   ")
                .trim_end()
                .to_owned()
        })
        .collect();
    Some(lines.join("\n"))
}

/// `HeldByUs`, `HeldByUs/DeactivatedByKueue:Reason`, `Finished/succeeded`, ...
fn state(state: &Value) -> String {
    let kind = state.get("kind").and_then(Value::as_str).unwrap_or("?");
    let mut text = kind.to_owned();
    if let Some(u) = state
        .get("underlying")
        .and_then(|u| u.get("kind"))
        .and_then(Value::as_str)
    {
        text = format!("{text}/{u}");
    }
    if let Some(reason) = state
        .get("reason")
        .or_else(|| state.pointer("/underlying/reason"))
        .and_then(Value::as_str)
    {
        text = format!("{text}:{reason}");
    }
    if let Some(ok) = state.get("succeeded").and_then(Value::as_bool) {
        text = format!("{text}/{}", if ok { "succeeded" } else { "failed" });
    }
    text
}

/// kubectl's style: `42s`, `5m3s`, `3h12m`, `2d4h`.
fn age(d: SignedDuration) -> String {
    let s = d.as_secs().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_lists_the_pods_that_remain_with_their_node() {
        let status = json!({"remainingPods": [
            {"name": "mnist-node-0-0", "node": "n1", "nodeState": "notReady", "why": "terminating"},
            {"name": "mnist-node-0-1", "why": "notFinished"}]});
        assert_eq!(
            remaining_pods_table(&status).expect("a table"),
            "REMAINING POD    NODE   NODE STATE   WHY\n\
             mnist-node-0-0   n1     NotReady     terminating\n\
             mnist-node-0-1   -      -            notFinished"
        );
        assert_eq!(remaining_pods_table(&json!({"remainingPods": []})), None);
        assert_eq!(remaining_pods_table(&json!({})), None);
    }

    #[test]
    fn a_status_row_shows_instance_reason_age_and_state() {
        let now: Timestamp = "2026-11-29T12:05:03Z".parse().expect("time");
        let status = json!({"result": "Ok", "mode": "plain", "heldObject": "TrainJob",
            "hold": {"instance": 3, "reason": "node lost", "placedAt": "2026-11-29T12:00:00Z",
                     "holder": "system:serviceaccount:team-a:dispatch"},
            "opened": true, "attempt": 2, "state": {"kind": "HeldByUs", "instance": 3}});
        let free = json!({"mode": "kueue", "hold": null, "opened": false, "attempt": 0,
            "state": {"kind": "DeactivatedByKueue", "reason": "RequeuingLimitExceeded"}});
        let table = status_table(
            &[
                Row {
                    namespace: "team-a",
                    name: "mnist",
                    status: &status,
                },
                Row {
                    namespace: "team-b",
                    name: "llm",
                    status: &free,
                },
            ],
            now,
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "team-a",
                "mnist",
                "plain",
                "3",
                "system:serviceaccount:team-a:dispatch",
                "node",
                "lost",
                "5m3s",
                "true",
                "2",
                "HeldByUs"
            ]
        );
        assert!(lines[0].starts_with("NAMESPACE"), "{table}");
        assert!(
            lines[2].ends_with("DeactivatedByKueue:RequeuingLimitExceeded"),
            "{table}"
        );
        assert_eq!(age(SignedDuration::from_secs(2 * 86400 + 3 * 3600)), "2d3h");
    }

    #[test]
    fn a_reason_with_control_characters_is_printed_escaped_and_forges_no_row() {
        let now: Timestamp = "2026-11-29T12:05:03Z".parse().expect("time");
        let status = json!({"mode": "plain",
            "hold": {"instance": 3, "reason": "lost\u{1b}[2J\nteam-b   llm   plain   9\u{202E}",
                "placedAt": "2026-11-29T12:00:00Z", "holder": "mallory\u{1b}[2J\nx"},
            "opened": true, "attempt": 2, "state": {"kind": "HeldByUs\r", "instance": 3}});
        let table = status_table(
            &[Row {
                namespace: "team-a",
                name: "mnist",
                status: &status,
            }],
            now,
        );
        assert_eq!(table.lines().count(), 2, "one row: {table}");
        assert!(
            table
                .lines()
                .all(|l| !l.chars().any(holdfast_core::hold::unprintable)),
            "{table:?}"
        );
        assert!(
            table.contains("lost\\u{1b}[2J\\u{a}team-b   llm   plain   9\\u{202e}"),
            "{table}"
        );
        assert!(table.contains("HeldByUs\\u{d}"), "{table}");
        assert!(table.contains("mallory\\u{1b}[2J\\u{a}x"), "{table}");
        let body = json!({"error": "Invalid", "message": "bad\u{1b}]0;title\u{7}"});
        let line = answer_line("team-a/mnist", 400, &body);
        assert_eq!(line, "team-a/mnist: Invalid: bad\\u{1b}]0;title\\u{7}");
        let pods = json!({"remainingPods": [{"name": "p\n0", "why": "x"}]});
        let pods = remaining_pods_table(&pods).expect("a table");
        assert_eq!(pods.lines().count(), 2, "{pods}");
    }

    #[test]
    fn an_error_line_names_the_error_its_cause_and_message() {
        let body =
            json!({"error": "Rejected", "cause": "StaleHold", "message": "hold 1 is in force"});
        assert_eq!(
            answer_line("team-a/mnist", 409, &body),
            "team-a/mnist: Rejected (StaleHold): hold 1 is in force"
        );
        let ok = json!({"result": "Ok", "outcome": "Released", "resumed": true});
        assert_eq!(
            answer_line("team-a/mnist", 200, &ok),
            "team-a/mnist: Released (resumed: true)"
        );
    }
}
