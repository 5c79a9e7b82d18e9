//! A TrainJob's runtime as every later use must see it: its snapshot first.

use holdfast_core::names;
use holdfast_core::snapshot::{
    self as core, Integrity, RuntimeRef, SnapshotError, SnapshotFault, Source, Writer,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::runtimes::KIND_MISS_TTL;
use holdfast_cluster::runtime_kinds::{KindError, RuntimeKinds};
use holdfast_core::snapshot::RuntimeResources;

/// Where a resolved runtime came from.
#[derive(Clone, Debug, PartialEq)]
pub enum RuntimeOrigin {
    /// The TrainJob's snapshot ConfigMap, which passed the checks Trainer's reader makes.
    Snapshot {
        writer: Writer,
        source: Source,
        integrity: Integrity,
    },
    /// The live runtime object: the TrainJob has no snapshot (yet).
    Live { resource_version: String },
}

/// A TrainJob's runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedRuntime {
    /// `spec.runtimeRef`.
    pub reference: RuntimeRef,
    /// The runtime: as the snapshot holds it, or the live object in the form a snapshot
    /// would hold it (`holdfast_core::snapshot::snapshot_form`: no server fields, no status).
    pub runtime: Value,
    pub origin: RuntimeOrigin,
}

impl ResolvedRuntime {
    /// Whether the runtime came from the snapshot.
    pub fn from_snapshot(&self) -> bool {
        matches!(self.origin, RuntimeOrigin::Snapshot { .. })
    }
}

/// Why a TrainJob's runtime could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The TrainJob lacks name, namespace, uid or a valid `spec.runtimeRef`.
    #[error("the TrainJob cannot be resolved: {0}")]
    TrainJob(#[source] SnapshotError),
    /// A ConfigMap sits at the snapshot's name but is not a snapshot of this TrainJob's
    /// runtime. The live runtime is deliberately not used instead: the TrainJob would
    /// silently run against whatever the runtime says now.
    #[error("the snapshot ConfigMap is not trusted: {0}")]
    Untrusted(#[source] SnapshotFault),
    /// No snapshot, and the runtime does not exist.
    #[error("the TrainJob has no snapshot and its runtime {0} does not exist")]
    RuntimeNotFound(RuntimeRef),
    /// No snapshot, and the cluster does not serve the runtime's kind.
    #[error("the TrainJob has no snapshot and the cluster serves no kind {0}")]
    KindNotServed(String),
    /// A request failed.
    #[error("kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The runtime object could not be used.
    #[error("the runtime cannot be read: {0}")]
    Runtime(String),
}

impl ResolveError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ResolveError::TrainJob(e) => e.metric_label(),
            ResolveError::Untrusted(f) => f.metric_label(),
            ResolveError::RuntimeNotFound(_) => "runtime_not_found",
            ResolveError::KindNotServed(_) => "kind_not_served",
            ResolveError::Kube(_) => "api",
            ResolveError::Runtime(_) => "runtime_invalid",
        }
    }
}

/// Resolves a TrainJob's runtime (the TrainJob as JSON, as the apiserver returns it): its
/// snapshot ConfigMap when one exists — checked as Kubeflow Trainer's reader checks it —
/// and the live runtime (found by discovery, whatever its kind) only when none exists.
/// [`ResolvedRuntime::origin`] says which. One request when the snapshot exists.
pub async fn resolve_runtime(
    client: &kube::Client,
    trainjob: &Value,
) -> Result<ResolvedRuntime, ResolveError> {
    let reference = core::runtime_ref(trainjob).map_err(ResolveError::TrainJob)?;
    let field = |ptr: &str, name: &'static str| {
        trainjob
            .pointer(ptr)
            .and_then(Value::as_str)
            .ok_or(ResolveError::TrainJob(SnapshotError::MissingField {
                object: "TrainJob",
                field: name,
            }))
    };
    let namespace = field("/metadata/namespace", "metadata.namespace")?;
    let name = field("/metadata/name", "metadata.name")?;

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    if let Some(cm) = configmaps.get_opt(&names::snapshot_name(name)).await? {
        let cm = serde_json::to_value(&cm).map_err(|e| ResolveError::Runtime(e.to_string()))?;
        let snapshot = super::read::read_snapshot(cm, trainjob.clone())
            .await
            .map_err(|fault| match fault {
                SnapshotFault::TrainJob(e) => ResolveError::TrainJob(e),
                other => ResolveError::Untrusted(other),
            })?;
        return Ok(ResolvedRuntime {
            reference,
            runtime: snapshot.runtime,
            origin: RuntimeOrigin::Snapshot {
                writer: snapshot.writer,
                source: snapshot.source,
                integrity: snapshot.integrity,
            },
        });
    }

    let kind = RuntimeKinds::new(client.clone(), RuntimeResources::default(), KIND_MISS_TTL)
        .resolve(&reference.api_group, &reference.kind)
        .await
        .map_err(|e| match e {
            KindError::Discovery { source, .. } => ResolveError::Kube(source),
            _ => ResolveError::KindNotServed(format!("{}.{}", reference.kind, reference.api_group)),
        })?;
    let api: Api<DynamicObject> = if kind.namespaced {
        Api::namespaced_with(client.clone(), namespace, &kind.resource)
    } else {
        Api::all_with(client.clone(), &kind.resource)
    };
    let Some(live) = api.get_opt(&reference.name).await? else {
        return Err(ResolveError::RuntimeNotFound(reference));
    };
    let mut live = serde_json::to_value(&live).map_err(|e| ResolveError::Runtime(e.to_string()))?;
    if let Value::Object(map) = &mut live {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(kind.resource.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(kind.resource.kind.clone()));
    }
    let resource_version = live
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(ResolvedRuntime {
        reference,
        runtime: core::snapshot_form(&live),
        origin: RuntimeOrigin::Live { resource_version },
    })
}
