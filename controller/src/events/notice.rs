//! What a part asks to publish: a type, a reason, an action and a note.

use k8s_openapi::api::core::v1::ObjectReference;

/// The apiserver refuses an Event note longer than this (bytes).
pub const MAX_NOTE_BYTES: usize = 1024;

/// The Event's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    Normal,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        }
    }
}

/// One Event to publish. Two Notices equal in every field about the same object are the
/// same Event: the second is counted in the first's series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Notice {
    pub severity: Severity,
    /// PascalCase, bounded (at most 128 bytes): `HoldPlaced`, `ReadmissionWaiting`.
    pub reason: &'static str,
    /// What holdfast did or tried: `Hold`, `Release`, `Open`, `Readmission`, `Snapshot`,
    /// `RotateCertificate`.
    pub action: &'static str,
    /// For people; cut to [`MAX_NOTE_BYTES`].
    pub note: String,
}

impl Notice {
    pub fn normal(reason: &'static str, action: &'static str, note: impl Into<String>) -> Self {
        Notice {
            severity: Severity::Normal,
            reason,
            action,
            note: truncate_note(note.into()),
        }
    }

    pub fn warning(reason: &'static str, action: &'static str, note: impl Into<String>) -> Self {
        Notice {
            severity: Severity::Warning,
            reason,
            action,
            note: truncate_note(note.into()),
        }
    }
}

/// The object an Event is about, as a hashable key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Regarding {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Regarding {
    pub fn of(r: &ObjectReference) -> Self {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        Regarding {
            api_version: s(&r.api_version),
            kind: s(&r.kind),
            namespace: s(&r.namespace),
            name: s(&r.name),
            uid: s(&r.uid),
        }
    }

    pub fn reference(&self) -> ObjectReference {
        let o = |v: &str| (!v.is_empty()).then(|| v.to_owned());
        ObjectReference {
            api_version: o(&self.api_version),
            kind: o(&self.kind),
            namespace: o(&self.namespace),
            name: o(&self.name),
            uid: o(&self.uid),
            ..ObjectReference::default()
        }
    }
}

/// `text` cut on a char boundary to fit an Event's note, marked with `...` when cut.
pub fn truncate_note(mut text: String) -> String {
    if text.len() > MAX_NOTE_BYTES {
        let mut cut = MAX_NOTE_BYTES - 3;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_char_boundary_and_marked() {
        let cut = truncate_note("é".repeat(800));
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert_eq!(truncate_note("short".into()), "short");
        let exact = "a".repeat(MAX_NOTE_BYTES);
        assert_eq!(
            truncate_note(exact.clone()),
            exact,
            "at the limit: kept whole"
        );
    }

    #[test]
    fn a_reference_round_trips_through_the_key() {
        let r = ObjectReference {
            api_version: Some("trainer.kubeflow.org/v1alpha1".into()),
            kind: Some("TrainJob".into()),
            namespace: Some("ns".into()),
            name: Some("job".into()),
            uid: Some("u-1".into()),
            ..ObjectReference::default()
        };
        assert_eq!(Regarding::of(&r).reference(), r);
    }
}
