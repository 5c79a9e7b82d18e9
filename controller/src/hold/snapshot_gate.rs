//! Open's snapshot check (`holdfast_core::snapshot::open_gate`): the reads it needs.
//!
//! A managed TrainJob is opened only once its runtime snapshot exists; without one it would
//! run from the live runtime. When none exists, the runtime is read and rendered as the
//! snapshot reconciler would render it, to tell a snapshot not written *yet* (Open waits for
//! it) from one that cannot be written at all (Open is refused, naming the cause).

use holdfast_cluster::runtime_kinds::RuntimeKinds;
use holdfast_core::names;
use holdfast_core::snapshot::{self as core, RuntimeResources, SnapshotPresence, Snapshottable};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ApiResource;
use serde_json::Value;
use std::time::Duration;

use super::requests::{CallRequests, RequestError};
use holdfast_core::hold::HoldError;

/// How long a discovery of the runtime's group is trusted (one Open's reads).
const KIND_MISS_TTL: Duration = Duration::from_secs(2);

fn configmaps() -> ApiResource {
    ApiResource::erase::<ConfigMap>(&())
}

/// Whether the TrainJob's snapshot exists: a ConfigMap at its name controlled by the job.
pub(super) async fn presence(
    reqs: &mut CallRequests<'_>,
    namespace: &str,
    name: &str,
    trainjob: &Value,
) -> Result<SnapshotPresence, HoldError> {
    let what = format!(
        "reading the snapshot ConfigMap {namespace}/{}",
        names::snapshot_name(name)
    );
    let cm = match reqs
        .get(&configmaps(), namespace, &names::snapshot_name(name))
        .await
    {
        Ok(cm) => cm,
        Err(RequestError::Api { code: 404, .. }) => return Ok(SnapshotPresence::Absent),
        Err(e) => return Err(e.into_hold_error(&what)),
    };
    let uid = trainjob.pointer("/metadata/uid").and_then(Value::as_str);
    let controller = cm
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str);
    Ok(if uid.is_some() && controller == uid {
        SnapshotPresence::Present
    } else {
        SnapshotPresence::NameTaken
    })
}

/// Whether the runtime of a TrainJob without a snapshot can be snapshotted: read (its kind
/// found by discovery, Trainer's runtime kinds only) and rendered as the reconciler renders
/// it, off the async threads.
pub(super) async fn snapshottable(
    client: &kube::Client,
    reqs: &mut CallRequests<'_>,
    namespace: &str,
    trainjob: &Value,
) -> Snapshottable {
    let Ok(reference) = core::runtime_ref(trainjob) else {
        return Snapshottable::Unknown;
    };
    let Ok(left) = reqs.time_left() else {
        return Snapshottable::Unknown;
    };
    let kinds = RuntimeKinds::new(client.clone(), RuntimeResources::default(), KIND_MISS_TTL);
    let kind = match tokio::time::timeout(
        left,
        kinds.resolve(&reference.api_group, &reference.kind),
    )
    .await
    {
        Ok(Ok(kind)) => kind,
        _ => return Snapshottable::Unknown,
    };
    let runtime_namespace = if kind.namespaced { namespace } else { "" };
    let Ok(mut live) = reqs
        .get(&kind.resource, runtime_namespace, &reference.name)
        .await
    else {
        return Snapshottable::Unknown;
    };
    if let Value::Object(map) = &mut live {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(kind.resource.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(kind.resource.kind.clone()));
    }
    let trainjob = trainjob.clone();
    let built = tokio::task::spawn_blocking(move || {
        core::render(&live).and_then(|rendered| core::snapshot_configmap(&trainjob, &rendered))
    })
    .await;
    match built {
        Ok(Ok(_)) => Snapshottable::Yes,
        Ok(Err(error)) => Snapshottable::No(error),
        Err(_) => Snapshottable::Unknown,
    }
}

/// A TrainJob's reference for the gate's messages: `namespace/name`.
pub(super) fn job_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The start gate's snapshot check for a call of `kind` on the TrainJob read: `Go` unless an
/// Open would start a managed, unfinished TrainJob that has no snapshot. `snapshottable`
/// keeps what the runtime's rendering said across the call's reads (it is rendered once).
pub(super) async fn gate(
    client: &kube::Client,
    reqs: &mut CallRequests<'_>,
    namespace: &str,
    name: &str,
    trainjob: &Value,
    snapshottable: &mut Option<Snapshottable>,
) -> Result<core::OpenGate, HoldError> {
    let job = holdfast_core::readmission::TrainJobView::read(trainjob);
    // Opened already (Open answers AlreadyOpen), or ended or going (the reconciler snapshots
    // neither, and neither starts again): nothing to check.
    if !job.managed || job.opened || job.ended || job.terminating {
        return Ok(core::OpenGate::Go);
    }
    let presence = presence(reqs, namespace, name, trainjob).await?;
    let runtime = match (&presence, snapshottable.clone()) {
        (SnapshotPresence::Absent, None) => {
            let found = self::snapshottable(client, reqs, namespace, trainjob).await;
            *snapshottable = Some(found.clone());
            found
        }
        (_, Some(found)) => found,
        (_, None) => Snapshottable::Unknown,
    };
    Ok(core::open_gate(
        &job_name(namespace, name),
        true,
        &presence,
        || runtime,
    ))
}
