//! Reading a snapshot ConfigMap back, with the checks Trainer's reader makes.

use serde_json::Value;

use super::{SnapshotFault, TrainJobIdentity, check_identity, render::sha256_hex, runtime_ref};
use crate::names;

/// Who wrote a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    /// It carries holdfast's label `holdfast.dev/runtime-snapshot: "true"`.
    Holdfast,
    /// It does not: Kubeflow Trainer (2.3 or later) wrote it, or another KEP-2599 writer.
    /// Its YAML is then a copy of the whole object, server fields included.
    Trainer,
}

impl Writer {
    /// As logs and metrics name it.
    pub fn label(self) -> &'static str {
        match self {
            Writer::Holdfast => "holdfast",
            Writer::Trainer => "trainer",
        }
    }
}

/// What the snapshot says about the runtime version it copied: holdfast's provenance
/// annotations where present, else the server fields a whole-object copy carries in its YAML.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
}

/// Whether the snapshot's YAML is still the one written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Integrity {
    /// Its SHA-256 equals the `holdfast.dev/runtime-sha256` annotation.
    Verified,
    /// No digest was recorded (a snapshot Trainer wrote).
    Unrecorded,
    /// The data differs from what was written: someone changed it past the webhook. It is
    /// still the runtime Trainer uses, so it is returned; the caller raises the alarm.
    Altered { recorded: String, actual: String },
}

/// A snapshot that passed every check: the runtime to use for this TrainJob.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotRuntime {
    /// The runtime object, as the YAML holds it.
    pub runtime: Value,
    pub writer: Writer,
    pub source: Source,
    pub integrity: Integrity,
}

impl SnapshotRuntime {
    /// The runtime's resourceVersion when it was copied, if the snapshot records it.
    pub fn resource_version(&self) -> Option<&str> {
        self.source.resource_version.as_deref()
    }
}

/// Reads a snapshot ConfigMap as the runtime of `trainjob`, checking what Trainer's reader
/// checks, in its order:
///
/// 1. the ConfigMap's controller ownerReference (the first with `controller: true`) has the
///    TrainJob's uid, else [`SnapshotFault::Squatted`];
/// 2. `data.runtime` is present and decodes as YAML to an object, else
///    [`SnapshotFault::Malformed`];
/// 3. the object's `apiVersion` group, `kind` and `metadata.name` equal `spec.runtimeRef`'s
///    (a missing one counts as `""`), else [`SnapshotFault::Mismatch`];
///
/// and one Trainer does not: a `metadata.namespace` in the YAML must be the TrainJob's (a
/// runtime reference has no namespace; Trainer's writer only ever writes the TrainJob's, so
/// no snapshot Trainer wrote fails this).
///
/// The YAML is decoded as Go's `yaml.v2` does for Trainer: YAML 1.1 booleans and legacy
/// octal numbers, and a repeated key keeps its last value.
pub fn read_snapshot(
    configmap: &Value,
    trainjob: &Value,
) -> Result<SnapshotRuntime, SnapshotFault> {
    let job = TrainJobIdentity::of(trainjob).map_err(SnapshotFault::TrainJob)?;
    let reference = runtime_ref(trainjob).map_err(SnapshotFault::TrainJob)?;

    let owner = controller_uid(configmap);
    if owner != Some(job.uid) {
        return Err(SnapshotFault::Squatted {
            owner: owner.map(str::to_owned),
        });
    }

    let yaml = match configmap.pointer("/data/runtime") {
        Some(Value::String(yaml)) => yaml,
        Some(_) => {
            return Err(SnapshotFault::Malformed {
                reason: format!("data.{} is not a string", names::SNAPSHOT_DATA_KEY),
            });
        }
        None => {
            return Err(SnapshotFault::Malformed {
                reason: format!("no data key {:?}", names::SNAPSHOT_DATA_KEY),
            });
        }
    };
    let runtime = parse_yaml(yaml).map_err(|reason| SnapshotFault::Malformed { reason })?;
    if !runtime.is_object() {
        return Err(SnapshotFault::Malformed {
            reason: "the runtime YAML is not a mapping".to_owned(),
        });
    }
    check_identity(&runtime, &reference, job.namespace).map_err(|(field, expected, found)| {
        SnapshotFault::Mismatch {
            field,
            expected,
            found,
        }
    })?;

    let annotation = |key: &str| {
        configmap
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    };
    let in_yaml = |key: &str| runtime.pointer("/metadata").and_then(|m| m.get(key));
    let writer = match configmap
        .pointer("/metadata/labels")
        .and_then(|l| l.get(names::LABEL_RUNTIME_SNAPSHOT))
        .and_then(Value::as_str)
    {
        Some("true") => Writer::Holdfast,
        _ => Writer::Trainer,
    };
    let source = Source {
        uid: annotation(names::ANN_RUNTIME_UID)
            .or_else(|| in_yaml("uid").and_then(Value::as_str))
            .map(str::to_owned),
        resource_version: annotation(names::ANN_RUNTIME_RESOURCE_VERSION)
            .or_else(|| in_yaml("resourceVersion").and_then(Value::as_str))
            .map(str::to_owned),
        generation: match annotation(names::ANN_RUNTIME_GENERATION) {
            Some(text) => text.parse().ok(),
            None => in_yaml("generation").and_then(Value::as_i64),
        },
    };
    let integrity = match annotation(names::ANN_RUNTIME_SHA256) {
        None => Integrity::Unrecorded,
        Some(recorded) => {
            let actual = sha256_hex(yaml);
            if recorded.eq_ignore_ascii_case(&actual) {
                Integrity::Verified
            } else {
                Integrity::Altered {
                    recorded: recorded.to_owned(),
                    actual,
                }
            }
        }
    };
    Ok(SnapshotRuntime {
        runtime,
        writer,
        source,
        integrity,
    })
}

/// The uid of an object's controller ownerReference: the first one with `controller: true`,
/// as Kubernetes' `metav1.GetControllerOf` picks it.
fn controller_uid(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// Decodes snapshot YAML the way Go's `yaml.v2` reads it for Trainer, within the bounds of
/// [`super::bounds`]: size, nesting depth, nodes and alias expansion. A YAML past any of them
/// is refused (as malformed) after at most a few milliseconds and megabytes.
pub(crate) fn parse_yaml(yaml: &str) -> Result<Value, String> {
    use super::bounds;
    bounds::check_size(yaml)?;
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        legacy_octal_numbers: true,
        // Errors go into events: no quoted excerpt of the YAML.
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: bounds::MAX_DEPTH,
            flow_nesting_limit: bounds::MAX_DEPTH,
            max_nodes: bounds::MAX_NODES,
            max_events: bounds::MAX_EVENTS,
            max_aliases: bounds::MAX_ALIASES,
            max_documents: 1,
            max_total_scalar_bytes: bounds::MAX_YAML_BYTES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: bounds::MAX_REPLAYED_EVENTS,
            max_replay_stack_depth: bounds::MAX_REPLAY_DEPTH,
        },
    };
    serde_saphyr::from_str_with_options::<Value>(yaml, options).map_err(|e| e.to_string())
}
