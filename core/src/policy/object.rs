//! What the policy reads of an object, listed once.
//!
//! The rules see `request.object` and `request.oldObject` only as a [`Doc`], and the object in
//! it only as an [`Object`], whose one reader takes a [`Field`]. Every `Field` is declared in
//! the [`fields!`] list below, which also makes [`FIELDS`]: exactly what
//! `request::decode_review` keeps of an object when it prunes it. So a rule cannot read a
//! member the pruning drops: a rule that needs another member adds one line here, and the
//! pruning keeps it from then on. (`policy_fuzz` also checks, on generated requests, that
//! every decision on pruned objects equals the one on whole objects.)

use serde_json::{Map, Value};
use std::fmt;

/// A member of an object the policy reads: its path from the object's root. Made only by
/// [`fields!`], so every one is in [`FIELDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field(&'static [&'static str]);

impl Field {
    /// The member names from the root, at least one.
    pub(crate) fn path(self) -> &'static [&'static str] {
        self.0
    }
}

/// `metadata.labels`, as in messages.
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// Declares each field as a constant and all of them as [`FIELDS`], from one list.
macro_rules! fields {
    ($($(#[$doc:meta])* $name:ident = [$($member:literal),+];)+) => {
        $($(#[$doc])* pub(crate) const $name: Field = Field(&[$($member),+]);)+

        /// Every member of an object the policy reads; what pruning keeps.
        pub(crate) const FIELDS: &[Field] = &[$($name),+];
    };
}

fields! {
    /// Snapshot evidence (the name's suffix), and `object_ref` when the request has no name.
    NAME = ["metadata", "name"];
    /// The webhook reads a TrainJob's Workloads by it when Kueue unsuspends the job.
    UID = ["metadata", "uid"];
    LABELS = ["metadata", "labels"];
    ANNOTATIONS = ["metadata", "annotations"];
    FINALIZERS = ["metadata", "finalizers"];
    OWNER_REFERENCES = ["metadata", "ownerReferences"];
    DATA = ["data"];
    BINARY_DATA = ["binaryData"];
    IMMUTABLE = ["immutable"];
    SUSPEND = ["spec", "suspend"];
    ACTIVE = ["spec", "active"];
    /// A Workload's LocalQueue.
    QUEUE_NAME = ["spec", "queueName"];
    /// A Workload's pod sets: what its pods request (`workload_requests`).
    POD_SETS = ["spec", "podSets"];
    /// The runtime a TrainJob names, read (by `snapshot::runtime_ref`) at its CREATE: see
    /// `policy::runtime_to_record`.
    RUNTIME_REF = ["spec", "runtimeRef"];
    /// A JobSet's replicated Jobs: whose Job template gets `podReplacementPolicy: Failed`
    /// (`policy::pod_replacement`). Kept whole: the rule patches by index.
    REPLICATED_JOBS = ["spec", "replicatedJobs"];
}

/// A JSON object as the rules may read it: by [`Field`] only.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Object<'a>(&'a Map<String, Value>);

/// How far a [`Field`]'s path can be followed in an object: where a patch can write it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Walk<'a> {
    /// The member at this depth (0: the first name of the path) is absent or `null`.
    Missing(usize),
    /// The member at this depth, above the field itself, is not an object.
    Blocked(usize),
    /// The field's value (never `null`).
    Found(&'a Value),
}

impl<'a> Object<'a> {
    /// The value of `field` as sent (`null` included); `None` when it is absent or a member
    /// on its way is absent or not an object.
    pub(crate) fn get(self, field: Field) -> Option<&'a Value> {
        let (last, parents) = field.0.split_last()?;
        let mut map = self.0;
        for key in parents {
            map = map.get(*key)?.as_object()?;
        }
        map.get(*last)
    }

    /// Follows `field`'s path as far as it goes.
    pub(crate) fn walk(self, field: Field) -> Walk<'a> {
        let mut map = self.0;
        let last = field.0.len().saturating_sub(1);
        for (depth, key) in field.0.iter().enumerate() {
            match map.get(*key) {
                None | Some(Value::Null) => return Walk::Missing(depth),
                Some(v) if depth == last => return Walk::Found(v),
                Some(Value::Object(m)) => map = m,
                Some(_) => return Walk::Blocked(depth),
            }
        }
        Walk::Missing(0)
    }
}

/// One side (old or new) of a request, as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Doc<'a> {
    /// Not sent, or `null`.
    Missing,
    /// Sent, but not a JSON object (the type's name).
    Malformed(&'static str),
    Object(Object<'a>),
}

impl<'a> Doc<'a> {
    pub(crate) fn of(v: Option<&'a Value>) -> Self {
        match v {
            None | Some(Value::Null) => Doc::Missing,
            Some(Value::Object(m)) => Doc::Object(Object(m)),
            Some(other) => Doc::Malformed(type_name(other)),
        }
    }

    pub(crate) fn object(self) -> Option<Object<'a>> {
        match self {
            Doc::Object(o) => Some(o),
            _ => None,
        }
    }

    /// Why this side cannot be read, for a "malformed" message.
    pub(crate) fn problem(self) -> &'static str {
        match self {
            Doc::Missing => "missing",
            Doc::Malformed(t) => t,
            Doc::Object(_) => "an object",
        }
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn walk(v: &Value, f: Field) -> Walk<'_> {
        Doc::of(Some(v)).object().unwrap().walk(f)
    }

    #[test]
    fn no_field_is_listed_twice_or_inside_another() {
        for (i, a) in FIELDS.iter().enumerate() {
            assert!(!a.path().is_empty());
            for b in &FIELDS[i + 1..] {
                assert!(
                    !a.path().starts_with(b.path()) && !b.path().starts_with(a.path()),
                    "{a} and {b}"
                );
            }
        }
    }

    #[test]
    fn get_reads_the_value_as_sent_and_nothing_through_a_non_object() {
        let v = json!({"metadata": {"name": "a", "uid": null}, "spec": [1], "data": {}});
        let o = Doc::of(Some(&v)).object().unwrap();
        assert_eq!(o.get(NAME), Some(&json!("a")));
        assert_eq!(o.get(UID), Some(&Value::Null));
        assert_eq!(o.get(LABELS), None);
        assert_eq!(o.get(SUSPEND), None);
        assert_eq!(o.get(DATA), Some(&json!({})));
    }

    #[test]
    fn walk_says_where_the_path_stops() {
        assert_eq!(walk(&json!({}), ANNOTATIONS), Walk::Missing(0));
        assert_eq!(
            walk(&json!({"metadata": null}), ANNOTATIONS),
            Walk::Missing(0)
        );
        assert_eq!(walk(&json!({"metadata": 1}), ANNOTATIONS), Walk::Blocked(0));
        assert_eq!(
            walk(&json!({"metadata": {}}), ANNOTATIONS),
            Walk::Missing(1)
        );
        assert_eq!(
            walk(&json!({"metadata": {"annotations": null}}), ANNOTATIONS),
            Walk::Missing(1)
        );
        assert_eq!(
            walk(&json!({"metadata": {"annotations": "x"}}), ANNOTATIONS),
            Walk::Found(&json!("x"))
        );
        assert_eq!(walk(&json!({"data": 2}), DATA), Walk::Found(&json!(2)));
    }

    #[test]
    fn a_field_reads_as_its_path_in_messages() {
        assert_eq!(LABELS.to_string(), "metadata.labels");
        assert_eq!(DATA.to_string(), "data");
    }
}
