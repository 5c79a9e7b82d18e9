//! Reading the apiserver's audit log (see `ControlPlane::settled_audit_events`).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What the audit log shows was written to ConfigMaps in one namespace.
#[derive(Debug, Default)]
pub struct ConfigMapWrites {
    /// Every update or patch (a snapshot is never rewritten), whole events.
    pub rewrites: Vec<Value>,
    /// Successful creates (201) per ConfigMap name.
    pub created: BTreeMap<String, usize>,
    /// Names some create was sent for, whatever its answer: a create whose client was killed
    /// mid-request may be committed yet logged as failed (504, context canceled).
    pub attempted: BTreeSet<String>,
}

impl ConfigMapWrites {
    /// The ConfigMap writes of `events` in namespace `ns`.
    pub fn in_namespace(events: &[Value], ns: &str) -> Self {
        let mut out = ConfigMapWrites::default();
        let in_ns = events.iter().filter(|e| {
            e["objectRef"]["resource"] == "configmaps" && e["objectRef"]["namespace"] == ns
        });
        for e in in_ns {
            let name = e["objectRef"]["name"].as_str().unwrap_or_default();
            match e["verb"].as_str() {
                Some("update" | "patch") => out.rewrites.push(e.clone()),
                Some("create") => {
                    out.attempted.insert(name.to_owned());
                    if e["responseStatus"]["code"] == 201 {
                        *out.created.entry(name.to_owned()).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Successful creates of `name`.
    pub fn creates_of(&self, name: &str) -> usize {
        self.created.get(name).copied().unwrap_or(0)
    }
}
