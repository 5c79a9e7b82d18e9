//! Arming holdfast's webhook configurations: what the controller changes in one, pure.
//!
//! The chart registers every protected entry disarmed (`failurePolicy: Ignore`), so an
//! install whose pods never answer refuses nothing; the configuration's annotation
//! [`ANN_FAILS_CLOSED`] names the entries that fail closed once holdfast serves. The
//! controller arms them (`Fail`) once its webhook has answered the probe entry
//! ([`PROBE_ENTRY`]) through the apiserver, and marks the configuration [`ANN_ARMED`]. From
//! then on the mark alone re-arms an entry someone set back to `Ignore`, with no probe: holdfast
//! has served, and fails closed.

use serde_json::Value;

/// On a webhook configuration: the entries that fail closed once armed, comma-separated.
pub const ANN_FAILS_CLOSED: &str = "holdfast.dev/fails-closed";
/// On a webhook configuration: holdfast's webhook has answered; its entries stay armed.
pub const ANN_ARMED: &str = "holdfast.dev/armed";
/// On the probe's object (a dry-run ConfigMap): what the probe entry sends.
pub const LABEL_PROBE: &str = "holdfast.dev/webhook-probe";
/// The validating entry that sends the probe (and nothing else) to the webhook.
pub const PROBE_ENTRY: &str = "probe.validate.holdfast.dev";
/// The failure policy of an armed entry.
pub const ARMED_POLICY: &str = "Fail";

/// What arming one configuration (its JSON) changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Arming {
    /// Indexes of the entries in `webhooks` to set to [`ARMED_POLICY`].
    pub entries: Vec<usize>,
    /// Whether the [`ANN_ARMED`] mark is to be added.
    pub mark: bool,
}

impl Arming {
    /// Nothing to change: the configuration is armed.
    pub fn is_done(&self) -> bool {
        self.entries.is_empty() && !self.mark
    }
}

fn annotation<'a>(configuration: &'a Value, key: &str) -> Option<&'a str> {
    configuration
        .pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
}

/// Whether `configuration` carries the [`ANN_ARMED`] mark.
pub fn is_marked(configuration: &Value) -> bool {
    annotation(configuration, ANN_ARMED).is_some()
}

/// The entries [`ANN_FAILS_CLOSED`] names (none when absent or empty).
pub fn fails_closed(configuration: &Value) -> Vec<&str> {
    annotation(configuration, ANN_FAILS_CLOSED)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect()
}

/// What arming `configuration` changes: each entry [`ANN_FAILS_CLOSED`] names that is not
/// [`ARMED_POLICY`] yet (an entry without a policy is `Fail` already, the apiserver's
/// default), and the mark if it is missing.
pub fn arming(configuration: &Value) -> Arming {
    let named = fails_closed(configuration);
    let entries = configuration
        .get("webhooks")
        .and_then(Value::as_array)
        .map(|hooks| {
            hooks
                .iter()
                .enumerate()
                .filter(|(_, h)| {
                    h.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| named.contains(&n))
                        && h.get("failurePolicy")
                            .and_then(Value::as_str)
                            .is_some_and(|p| p != ARMED_POLICY)
                })
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default();
    Arming {
        entries,
        mark: !is_marked(configuration),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configuration(annotations: Value) -> Value {
        json!({
            "metadata": {"name": "hf", "annotations": annotations},
            "webhooks": [
                {"name": PROBE_ENTRY, "failurePolicy": "Ignore"},
                {"name": "snapshots.validate.holdfast.dev", "failurePolicy": "Ignore"},
                {"name": "queues.validate.holdfast.dev", "failurePolicy": "Ignore"},
                {"name": "jobs.validate.holdfast.dev", "failurePolicy": "Fail"},
            ]
        })
    }

    #[test]
    fn arming_sets_only_the_named_entries_to_fail_and_marks_the_configuration() {
        let c = configuration(json!({
            ANN_FAILS_CLOSED: "snapshots.validate.holdfast.dev, jobs.validate.holdfast.dev"
        }));
        assert_eq!(
            arming(&c),
            Arming {
                entries: vec![1],
                mark: true
            }
        );
    }

    #[test]
    fn an_armed_configuration_needs_nothing_and_a_disarmed_entry_is_rearmed() {
        let names = "snapshots.validate.holdfast.dev,jobs.validate.holdfast.dev";
        let mut c = configuration(json!({ANN_FAILS_CLOSED: names, ANN_ARMED: "true"}));
        c["webhooks"][1]["failurePolicy"] = json!("Fail");
        assert!(arming(&c).is_done());
        // Someone set an armed entry back to Ignore: the mark stays, the entry is armed again.
        c["webhooks"][3]["failurePolicy"] = json!("Ignore");
        assert_eq!(
            arming(&c),
            Arming {
                entries: vec![3],
                mark: false
            }
        );
    }

    #[test]
    fn without_the_list_nothing_is_armed_but_the_mark() {
        for annotations in [json!({}), json!({ANN_FAILS_CLOSED: ""}), Value::Null] {
            let c = configuration(annotations);
            assert_eq!(
                arming(&c),
                Arming {
                    entries: vec![],
                    mark: true
                }
            );
            assert!(fails_closed(&c).is_empty());
        }
    }
}
