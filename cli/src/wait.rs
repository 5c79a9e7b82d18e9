//! Waiting on the cluster: `release --wait` (retrying `PodsRemain` and `Conflict`), `hold
//! --wait-stopped` (until the held execution's pods are gone) and `check --wait`. The pure
//! parts: which answers are retried, the pauses between tries, and the line naming the pods
//! still there.

use std::time::Duration;

use holdfast_core::hold::printable;
use serde_json::Value;

/// The first pause between two tries.
pub const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause between two tries.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// The pauses between tries: [`FIRST_PAUSE`], doubling up to [`LONGEST_PAUSE`], and never
/// past the end of the wait. So a wait of D makes at most D / FIRST_PAUSE + 1 tries.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST_PAUSE }
    }
}

impl Backoff {
    /// The pause before the next try, with `left` of the wait to go; `None` when nothing is
    /// left (the wait is over: no more tries).
    pub fn pause(&mut self, left: Duration) -> Option<Duration> {
        if left.is_zero() {
            return None;
        }
        let pause = self.next.min(left);
        self.next = (self.next * 2).min(LONGEST_PAUSE);
        Some(pause)
    }
}

/// Whether `release --wait` tries again after this answer: `PodsRemain` (the held
/// execution's pods are still there) and `Conflict` (other writers won every try); nothing
/// else, least of all `Unknown` (the release may have landed).
pub fn retried(status: u16, body: &Value) -> bool {
    !(200..300).contains(&status)
        && matches!(
            body.get("error").and_then(Value::as_str),
            Some("PodsRemain" | "Conflict")
        )
}

/// Whether a Status answer says the TrainJob's executions have no pod left: its
/// `remainingPods` is there and empty. `None` when it does not say (not a Status answer).
pub fn stopped(status: &Value) -> Option<bool> {
    status
        .get("remainingPods")
        .and_then(Value::as_array)
        .map(Vec::is_empty)
}

/// One line naming the pods a Status answer lists as remaining, each with its node, the
/// node's state and why it counts: `pods still there: mnist-node-0-0 (node n1, notReady,
/// terminating)`. Printable whatever the names hold.
pub fn remaining_pods_line(status: &Value) -> Option<String> {
    let pods = status.get("remainingPods")?.as_array()?;
    if pods.is_empty() {
        return None;
    }
    let text = |p: &Value, k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
    let each: Vec<String> = pods
        .iter()
        .map(|p| {
            let about: Vec<String> = [
                text(p, "node").map(|n| format!("node {n}")),
                text(p, "nodeState"),
                text(p, "why"),
            ]
            .into_iter()
            .flatten()
            .collect();
            let name = text(p, "name").unwrap_or_else(|| "?".to_owned());
            if about.is_empty() {
                name
            } else {
                format!("{name} ({})", about.join(", "))
            }
        })
        .collect();
    Some(printable(&format!("pods still there: {}", each.join(", "))).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn release_wait_retries_pods_remain_and_conflict_only() {
        assert!(retried(423, &json!({"error": "PodsRemain"})));
        assert!(retried(503, &json!({"error": "Conflict"})));
        for (status, body) in [
            (200, json!({"result": "Ok", "outcome": "Released"})),
            (409, json!({"error": "Rejected", "cause": "StaleHold"})),
            (504, json!({"error": "Unknown"})),
            (503, json!({"error": "Unavailable"})),
            (400, json!({"error": "Invalid"})),
            (502, json!("bad gateway")),
        ] {
            assert!(!retried(status, &body), "{status} {body}");
        }
    }

    #[test]
    fn waits_back_off_to_a_bound_and_end_with_the_wait() {
        let mut b = Backoff::default();
        let long = Duration::from_secs(600);
        let pauses: Vec<Duration> = (0..6).filter_map(|_| b.pause(long)).collect();
        assert_eq!(
            pauses,
            [500, 1000, 2000, 4000, 5000, 5000].map(Duration::from_millis)
        );
        assert_eq!(
            b.pause(Duration::from_millis(300)),
            Some(Duration::from_millis(300)),
            "never past the end of the wait"
        );
        assert_eq!(b.pause(Duration::ZERO), None, "no try after the wait");
        // Bounded: a wait of 3s, each pause using up the wait, makes at most 3s / 500ms tries.
        let (mut b, mut left, mut tries) = (Backoff::default(), Duration::from_secs(3), 0);
        while let Some(p) = b.pause(left) {
            left -= p;
            tries += 1;
        }
        assert!(tries <= 6, "{tries}");
    }

    #[test]
    fn the_pods_still_there_are_named_with_their_node() {
        let status = json!({"remainingPods": [
            {"name": "mnist-node-0-0", "node": "n1", "nodeState": "notReady", "why": "terminating"},
            {"name": "mnist-node-0-1\u{1b}[2J"}]});
        assert_eq!(
            remaining_pods_line(&status).as_deref(),
            Some(
                "pods still there: mnist-node-0-0 (node n1, notReady, terminating), mnist-node-0-1\\u{1b}[2J"
            )
        );
        assert_eq!(stopped(&status), Some(false));
        let none = json!({"remainingPods": []});
        assert_eq!(remaining_pods_line(&none), None);
        assert_eq!(stopped(&none), Some(true));
        assert_eq!(stopped(&json!({"error": "Forbidden"})), None);
    }
}
