//! From the runtime the apiserver returned to the snapshot YAML and its provenance.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

use super::{SnapshotError, required_str};
use crate::names;

/// kubectl's copy of the last applied manifest: a second, stale copy of the object, left out.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What was copied: the runtime's identity and version when the snapshot was taken, and the
/// digest of the YAML written. Goes into the snapshot ConfigMap's annotations, not the YAML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// `metadata.uid` of the runtime copied.
    pub uid: String,
    /// `metadata.resourceVersion` of the runtime copied.
    pub resource_version: String,
    /// `metadata.generation` of the runtime copied, where the object has one.
    pub generation: Option<i64>,
    /// Lower-case hex SHA-256 of the YAML bytes.
    pub sha256: String,
}

/// A runtime rendered for a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The `runtime` value of the snapshot ConfigMap.
    pub yaml: String,
    /// The same content as JSON: what [`snapshot_form`] kept of the runtime.
    pub object: Value,
    /// Where it came from.
    pub provenance: Provenance,
}

/// The part of a runtime object a snapshot holds. Kind-agnostic and total: it never fails,
/// so a snapshot and a live object can always be brought to the same form and compared.
///
/// Kept: every top-level field except `status` and `metadata` verbatim (`apiVersion`, `kind`,
/// `spec`, and whatever other top-level fields a runtime kind defines: a kind holdfast does
/// not know may keep its configuration outside `spec`); of `metadata`, only `name`,
/// `namespace` (when non-empty), `labels` (when non-empty) and `annotations` less
/// [`LAST_APPLIED_ANNOTATION`] (when any remain).
///
/// Left out: `status` and all other metadata — what the server sets (`uid`,
/// `resourceVersion`, `generation`, `creationTimestamp`, `deletionTimestamp`,
/// `deletionGracePeriodSeconds`, `managedFields`, `selfLink`) and what describes the object's
/// relations to other live objects rather than its configuration (`ownerReferences`,
/// `finalizers` — Trainer itself adds and removes a finalizer on runtimes as TrainJobs come
/// and go — and `generateName`).
pub fn snapshot_form(runtime: &Value) -> Value {
    let Value::Object(fields) = runtime else {
        return runtime.clone();
    };
    let mut out = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "status" => {}
            "metadata" => {
                let meta = metadata_form(value);
                if !meta.is_empty() {
                    out.insert(key.clone(), Value::Object(meta));
                }
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

fn metadata_form(metadata: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let Value::Object(meta) = metadata else {
        return out;
    };
    for key in ["name", "namespace"] {
        match meta.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(v) => {
                out.insert(key.to_owned(), v.clone());
            }
        }
    }
    if let Some(Value::Object(labels)) = meta.get("labels")
        && !labels.is_empty()
    {
        out.insert("labels".to_owned(), Value::Object(labels.clone()));
    }
    if let Some(Value::Object(annotations)) = meta.get("annotations") {
        let kept: Map<String, Value> = annotations
            .iter()
            .filter(|(k, _)| k.as_str() != LAST_APPLIED_ANNOTATION)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            out.insert("annotations".to_owned(), Value::Object(kept));
        }
    }
    out
}

/// Whether `value` nests mappings and sequences more than `limit` levels deep (the root
/// mapping is level 1, as the YAML parser counts). Iterative: no recursion on input.
pub fn deeper_than(value: &Value, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        if depth > limit {
            return true;
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    false
}

/// Renders a runtime object, exactly as the apiserver returned it, for a snapshot.
///
/// The object must be one the apiserver served: `apiVersion`, `kind`, `metadata.name`,
/// `metadata.uid` and `metadata.resourceVersion` are required. The YAML is deterministic:
/// map keys are written in byte order whatever order the input had, so the same runtime
/// always gives byte-identical YAML and the same digest. Strings that a YAML 1.1 reader
/// (Go's `yaml.v2`, which Trainer's `sigs.k8s.io/yaml` uses) would take for a bool, number,
/// null or timestamp are quoted.
pub fn render(runtime: &Value) -> Result<Rendered, SnapshotError> {
    const OBJ: &str = "runtime";
    if !runtime.is_object() {
        return Err(SnapshotError::InvalidField {
            object: OBJ,
            field: "(root)",
            expected: "an object",
        });
    }
    required_str(runtime, "apiVersion", OBJ, "apiVersion")?;
    required_str(runtime, "kind", OBJ, "kind")?;
    let meta = runtime.get("metadata").ok_or(SnapshotError::MissingField {
        object: OBJ,
        field: "metadata",
    })?;
    required_str(meta, "name", OBJ, "metadata.name")?;
    let uid = required_str(meta, "uid", OBJ, "metadata.uid")?.to_owned();
    let resource_version =
        required_str(meta, "resourceVersion", OBJ, "metadata.resourceVersion")?.to_owned();
    let generation = match meta.get("generation") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or(SnapshotError::InvalidField {
            object: OBJ,
            field: "metadata.generation",
            expected: "an integer",
        })?),
    };
    if deeper_than(runtime, super::bounds::MAX_DEPTH) {
        return Err(SnapshotError::TooDeep {
            limit: super::bounds::MAX_DEPTH,
        });
    }
    let object = snapshot_form(runtime);
    let yaml = to_yaml(&object)?;
    let sha256 = sha256_hex(&yaml);
    Ok(Rendered {
        yaml,
        object,
        provenance: Provenance {
            uid,
            resource_version,
            generation,
            sha256,
        },
    })
}

/// The provenance annotations of a snapshot ConfigMap (SPEC: `holdfast.dev/runtime-*`).
pub fn provenance_annotations(provenance: &Provenance) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert(names::ANN_RUNTIME_UID.to_owned(), provenance.uid.clone());
    out.insert(
        names::ANN_RUNTIME_RESOURCE_VERSION.to_owned(),
        provenance.resource_version.clone(),
    );
    if let Some(generation) = provenance.generation {
        out.insert(
            names::ANN_RUNTIME_GENERATION.to_owned(),
            generation.to_string(),
        );
    }
    out.insert(
        names::ANN_RUNTIME_SHA256.to_owned(),
        provenance.sha256.clone(),
    );
    out
}

/// Lower-case hex SHA-256 of a string's bytes.
pub(crate) fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// YAML of a JSON value, keys sorted, YAML 1.1 look-alike strings quoted.
pub(crate) fn to_yaml(value: &Value) -> Result<String, SnapshotError> {
    let options = serde_saphyr::ser_options! {
        // Multi-line strings as `|` literal blocks; long single-line strings stay on one line
        // (no `>` folding, whose whitespace rules are where YAML readers disagree).
        prefer_block_scalars: true,
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(&Sorted(value), options)
        .map_err(|e| SnapshotError::Yaml(e.to_string()))
}

/// Serializes a JSON value with every object's keys in byte order, whether or not
/// serde_json's `preserve_order` feature is on somewhere in the build.
struct Sorted<'a>(&'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    out.serialize_entry(key, &Sorted(value))?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Sorted(item))?;
                }
                out.end()
            }
            scalar => scalar.serialize(serializer),
        }
    }
}
