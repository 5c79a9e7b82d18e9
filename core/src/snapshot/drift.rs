//! Whether a snapshot still equals the live runtime, and whether it copied the version
//! the TrainJob was admitted against.

use jsonptr::PointerBuf;
use serde_json::{Map, Number, Value};

use super::snapshot_form;

/// At most this many differing paths are listed in a [`Drift::Drifted`].
pub const MAX_DRIFT_PATHS: usize = 16;

/// How a TrainJob's snapshot compares with the live runtime it was copied from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drift {
    /// The live runtime still says what the snapshot says.
    InSync,
    /// An edit since the snapshot did not reach this TrainJob. `paths` are JSON pointers
    /// (into the runtime object) of the first differences, at most [`MAX_DRIFT_PATHS`].
    Drifted { paths: Vec<String> },
}

impl Drift {
    pub fn is_drifted(&self) -> bool {
        matches!(self, Drift::Drifted { .. })
    }
}

/// Compares a snapshot's runtime with the live runtime, both brought to [`snapshot_form`]
/// first, so server fields (uid, resourceVersion, managedFields, status...) never count.
///
/// Numbers compare by value (`1` equals `1.0`). A snapshot copied as a whole typed object (as
/// Trainer writes it: its metadata carries server fields such as `uid`) is compared with
/// tolerance for what Go's typed round trip adds or drops: a field only one side has whose
/// value is `null`, `{}` or `[]` does not count — unless both sides have such one-sided fields
/// in the same object, which is a swap (`torch: {}` became `mpi: {}`), not an artefact.
/// holdfast's own snapshots are verbatim, and are compared exactly.
pub fn drift(snapshot_runtime: &Value, live_runtime: &Value) -> Drift {
    let tolerant = is_whole_object_copy(snapshot_runtime);
    let snapshot = snapshot_form(snapshot_runtime);
    let live = snapshot_form(live_runtime);
    let mut paths = Vec::new();
    let mut at = Vec::new();
    compare(&snapshot, &live, tolerant, &mut at, &mut paths);
    if paths.is_empty() {
        Drift::InSync
    } else {
        Drift::Drifted { paths }
    }
}

/// Whether the snapshot's runtime differs from the live runtime ([`drift`]).
pub fn drifted(snapshot_runtime: &Value, live_runtime: &Value) -> bool {
    drift(snapshot_runtime, live_runtime).is_drifted()
}

/// Whether the snapshot copied another runtime version than the one the TrainJob was
/// admitted against (kubeflow/trainer#3975: an edit between admission and first reconcile is
/// snapshotted unseen). resourceVersions are opaque, so only equality is meaningful: any
/// difference is flagged. No recorded admission version (a TrainJob admitted before holdfast
/// ran) flags nothing.
pub fn admission_race(admitted_rv: Option<&str>, snapshotted_rv: &str) -> bool {
    admitted_rv.is_some_and(|admitted| admitted != snapshotted_rv)
}

/// A snapshot whose YAML carries server-set metadata was copied as a whole object.
fn is_whole_object_copy(runtime: &Value) -> bool {
    runtime.get("metadata").is_some_and(|m| {
        [
            "uid",
            "resourceVersion",
            "managedFields",
            "creationTimestamp",
        ]
        .iter()
        .any(|k| m.get(*k).is_some())
    })
}

fn compare(a: &Value, b: &Value, tolerant: bool, at: &mut Vec<String>, out: &mut Vec<String>) {
    if out.len() >= MAX_DRIFT_PATHS {
        return;
    }
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => compare_objects(a, b, tolerant, at, out),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                at.push(i.to_string());
                compare(x, y, tolerant, at, out);
                at.pop();
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            if !same_number(x, y) {
                record(at, out);
            }
        }
        _ => {
            if a != b {
                record(at, out);
            }
        }
    }
}

fn compare_objects(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    tolerant: bool,
    at: &mut Vec<String>,
    out: &mut Vec<String>,
) {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let one_sided_empty = |mine: &Map<String, Value>, theirs: &Map<String, Value>| {
        mine.iter()
            .any(|(k, v)| !theirs.contains_key(k) && is_empty(v))
    };
    // Empty one-sided fields on both sides: a swap, which counts.
    let swap = one_sided_empty(a, b) && one_sided_empty(b, a);
    for key in keys {
        at.push(key.clone());
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => compare(x, y, tolerant, at, out),
            (Some(v), None) | (None, Some(v)) => {
                if !(tolerant && !swap && is_empty(v)) {
                    record(at, out);
                }
            }
            (None, None) => {}
        }
        at.pop();
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn same_number(x: &Number, y: &Number) -> bool {
    match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
        (Some(a), Some(b), _, _) => a == b,
        (_, _, Some(a), Some(b)) => a == b,
        _ => x.as_f64() == y.as_f64(),
    }
}

fn record(at: &[String], out: &mut Vec<String>) {
    if out.len() < MAX_DRIFT_PATHS {
        out.push(PointerBuf::from_tokens(at).to_string());
    }
}
