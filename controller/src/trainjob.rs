//! The TrainJob as the controller holds it, and the one watch of TrainJobs.
//!
//! A TrainJob's spec and status can be kilobytes (pod templates, per-job status); the
//! controller's watches read its name, namespace, uid, resourceVersion, deletionTimestamp,
//! the labels and annotations holdfast reads (managed, opened, attempt, admitted runtime
//! version, a hold's instance and start), `spec.runtimeRef` and the `Complete`/`Failed` conditions. [`TrainJob`] has those
//! fields only, so the rest of each object is skipped while decoding, and a store holds a few
//! hundred bytes per TrainJob. Objects arrive wrapped in a [`DeserializeGuard`]: one that does
//! not decode (a CRD version this code does not know) is reported, not a failed watch.
//!
//! [`Watch`] is the one TrainJob watch of the leader: the snapshot reconciler and, in kueue
//! mode, the readmission gate each [`Watch::subscribe`] to it and reflect its events into a
//! store of their own (kube-runtime's store wakes one waiter only, so two Controllers cannot
//! share one). Writers (the hold
//! executor, the reconcilers' fresh reads) read TrainJobs from the apiserver, not from here.

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::channel::oneshot;
use futures::{FutureExt, Stream, StreamExt};
use holdfast_core::hold::classify::trainjob_finished;
use holdfast_core::names;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A watched TrainJob: decoded, or the metadata of one that did not decode.
pub type Watched = DeserializeGuard<TrainJob>;

/// A reference to a TrainJob in a store of [`Watched`].
pub type JobRef = ObjectRef<Watched>;

/// The part of a TrainJob the controller reads.
///
/// Once [`strip`]ped, `metadata.labels` and `metadata.annotations` are `None` and the few
/// entries kept are in `marks`; [`TrainJob::annotation`] and the serialized object (as
/// [`TrainJob::as_json`] and the readmission gate read it) see both.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct TrainJob {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TrainJobSpec,
    #[serde(default)]
    pub status: TrainJobStatus,
    #[serde(skip)]
    marks: Marks,
}

/// The labels and annotations [`strip`] keeps, out of `ObjectMeta`'s maps: a `BTreeMap`
/// allocates a node for eleven entries (about half a KiB of `String`s) for its first one,
/// per map and per cached TrainJob; here each kept entry costs its value.
#[derive(Clone, Debug, Default, PartialEq)]
struct Marks {
    labels: Vec<(&'static str, String)>,
    annotations: Vec<(&'static str, String)>,
}

impl Serialize for TrainJob {
    /// As the apiserver's object (the kept labels and annotations back in `metadata`).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Object<'a> {
            metadata: Cow<'a, ObjectMeta>,
            spec: &'a TrainJobSpec,
            status: &'a TrainJobStatus,
        }
        Object {
            metadata: self.full_metadata(),
            spec: &self.spec,
            status: &self.status,
        }
        .serialize(serializer)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    /// `spec.runtimeRef`, as stored (the CRD applies its defaults on admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_ref: Option<RuntimeRefFields>,
    /// `spec.managedBy`: `kueue.x-k8s.io/multikueue` puts the job under MultiKueue
    /// (`holdfast_core::readmission::multikueue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// `apiGroup` and `kind` are nearly always the CRD's defaults: those values are [`shared`],
/// not copied into every cached TrainJob.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRefFields {
    #[serde(
        default,
        deserialize_with = "shared",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_group: Option<Cow<'static, str>>,
    #[serde(
        default,
        deserialize_with = "shared",
        skip_serializing_if = "Option::is_none"
    )]
    pub kind: Option<Cow<'static, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The values of `spec.runtimeRef`'s `apiGroup` and `kind` that most TrainJobs carry.
const SHARED_VALUES: [&str; 3] = [
    names::TRAINER_GROUP,
    names::CLUSTER_TRAINING_RUNTIME_KIND,
    names::TRAINING_RUNTIME_KIND,
];

/// A string, borrowed from [`SHARED_VALUES`] when it is one of them.
fn shared<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'static, str>>, D::Error> {
    let value = Option::<String>::deserialize(deserializer)?;
    Ok(
        value.map(|v| match SHARED_VALUES.iter().find(|s| **s == v) {
            Some(s) => Cow::Borrowed(*s),
            None => Cow::Owned(v),
        }),
    )
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainJobStatus {
    /// Only `type` and `status` of each condition are read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

impl kube::Resource for TrainJob {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(names::TRAINJOB_KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(names::TRAINER_GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(names::TRAINER_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(holdfast_cluster::resources::TRAINJOB_PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A reference to a TrainJob.
pub fn trainjob_ref(namespace: &str, name: &str) -> JobRef {
    ObjectRef::new(name).within(namespace)
}

/// The labels kept by [`strip`].
const KEPT_LABELS: [&str; 1] = [names::LABEL_MANAGED];

/// The annotations kept by [`strip`]. The hold's instance and start are kept for the held
/// gauges (`crate::held`): plain mode holds a TrainJob itself.
const KEPT_ANNOTATIONS: [&str; 6] = [
    names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION,
    names::ANN_OPENED,
    names::ANN_ATTEMPT,
    names::ANN_HOLD_INSTANCE,
    names::ANN_HOLD_PLACED_AT,
    // Kueue mode's hold mark, for the leader's sweep of stale ones (`hold::mark`).
    names::ANN_HOLD_MARK,
];

/// Drops the metadata no reader reads (managedFields above all) and the conditions other
/// than `Complete` and `Failed`; a decoded TrainJob's kept labels and annotations move out
/// of their maps into its compact marks.
pub fn strip(job: &mut Watched) {
    let meta = match &mut job.0 {
        Ok(job) => {
            job.status
                .conditions
                .retain(|c| matches!(c.type_.as_str(), "Complete" | "Failed"));
            job.status.conditions.shrink_to_fit();
            strip_meta(&mut job.metadata);
            job.marks.take_from(&mut job.metadata);
            return;
        }
        Err(invalid) => &mut invalid.metadata,
    };
    strip_meta(meta);
}

fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.creation_timestamp = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| KEPT_LABELS.contains(&k.as_str()));
        if labels.is_empty() {
            meta.labels = None;
        }
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| KEPT_ANNOTATIONS.contains(&k.as_str()));
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

impl Marks {
    /// Moves the kept labels and annotations out of `meta` (whose maps are left `None`).
    fn take_from(&mut self, meta: &mut ObjectMeta) {
        fn take(
            map: Option<std::collections::BTreeMap<String, String>>,
            kept: &[&'static str],
            into: &mut Vec<(&'static str, String)>,
        ) {
            let Some(mut map) = map else { return };
            for key in kept {
                if let Some(value) = map.remove(*key)
                    && !into.iter().any(|(k, _)| k == key)
                {
                    into.push((key, value));
                }
            }
            into.shrink_to_fit();
        }
        take(meta.labels.take(), &KEPT_LABELS, &mut self.labels);
        take(
            meta.annotations.take(),
            &KEPT_ANNOTATIONS,
            &mut self.annotations,
        );
    }

    /// `meta` with the marks back in its maps.
    fn put_into(&self, meta: &mut ObjectMeta) {
        for (entries, map) in [
            (&self.labels, &mut meta.labels),
            (&self.annotations, &mut meta.annotations),
        ] {
            if !entries.is_empty() {
                let map = map.get_or_insert_with(Default::default);
                for (k, v) in entries {
                    map.insert((*k).to_owned(), v.clone());
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// What a consumer of a [`Watch`] receives: the watcher's events (objects stripped), and
/// its errors, shared by every consumer.
pub type Update = Result<watcher::Event<Watched>, Arc<watcher::Error>>;

/// One watch of the TrainJobs of a namespace (all when `None`), fanned out to every
/// [`Feed`] subscribed before it runs.
///
/// The watch starts only once every feed is being read ([`Feed::reflect`]) or has been
/// dropped: a consumer that waits before reading (the snapshot reconciler waits for its
/// ConfigMap cache) would otherwise have every TrainJob event queued for it, without bound,
/// for as long as it waits — and a user patching a TrainJob in a loop decides how many.
pub struct Watch {
    api: Api<Watched>,
    consumers: Vec<UnboundedSender<Update>>,
    reading: Vec<oneshot::Receiver<()>>,
}

impl Watch {
    pub fn new(client: kube::Client, namespace: Option<&str>) -> Self {
        let api = match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        Watch {
            api,
            consumers: Vec::new(),
            reading: Vec::new(),
        }
    }

    /// A new consumer: it receives every event from the start of [`Watch::run`], which
    /// waits until it reads them.
    pub fn subscribe(&mut self) -> Feed {
        let (tx, rx) = unbounded();
        let (reading_tx, reading_rx) = oneshot::channel();
        self.consumers.push(tx);
        self.reading.push(reading_rx);
        Feed {
            events: rx,
            reading: reading_tx,
        }
    }

    /// Ready once every feed subscribed so far is being read or has been dropped.
    fn all_reading(&mut self) -> impl Future<Output = ()> + use<> {
        // A feed read or dropped completes its signal either way.
        futures::future::join_all(std::mem::take(&mut self.reading)).map(|_| ())
    }

    /// Watches (kube's watcher: relists and retries with backoff) until `shutdown` is
    /// cancelled or every consumer is gone (seen at the next event).
    pub async fn run(mut self, shutdown: CancellationToken) {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = self.all_reading() => {}
        }
        let events = watcher(self.api, watcher::Config::default().any_semantic())
            .modify(strip)
            .default_backoff();
        let mut events = std::pin::pin!(events);
        while !self.consumers.is_empty() {
            let next = tokio::select! {
                () = shutdown.cancelled() => return,
                next = events.next() => next,
            };
            let Some(event) = next else { return };
            let update: Update = event.map_err(Arc::new);
            self.consumers
                .retain(|consumer| consumer.unbounded_send(update.clone()).is_ok());
        }
    }
}

/// One consumer's copy of a [`Watch`]'s events.
pub struct Feed {
    events: UnboundedReceiver<Update>,
    /// Told when the consumer starts reading ([`Feed::reflect`]).
    reading: oneshot::Sender<()>,
}

impl Feed {
    /// The events, each applied to `writer`'s store before it is yielded.
    pub fn reflect(self, mut writer: Writer<Watched>) -> impl Stream<Item = Update> + Send {
        // The receiver may be gone (the watch already stopped): nothing to tell then.
        let _ = self.reading.send(());
        self.events.inspect(move |update| {
            if let Ok(event) = update {
                writer.apply_watcher_event(event);
            }
        })
    }
}

/// The TrainJob an update brings (listed, created or changed) as a Controller's trigger:
/// its namespace and name only.
///
/// A Controller keeps each queued trigger's reference twice (its schedule's map and its
/// delay queue) until the job is reconciled, and a reference made from a whole object also
/// carries copies of its resourceVersion and uid: at start-up every TrainJob is queued at
/// once. The reconcilers read the job from their store by namespace and name, never from
/// the trigger, and a reference's resourceVersion and uid take no part in finding it.
pub fn applied(update: Update) -> Option<Result<Watched, watcher::Error>> {
    match update {
        Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) => {
            Some(Ok(trigger_of(&job)))
        }
        _ => None,
    }
}

/// The name and namespace of `job` alone, as a [`Watched`].
fn trigger_of(job: &Watched) -> Watched {
    let meta = kube::Resource::meta(job);
    DeserializeGuard(Ok(TrainJob {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            ..ObjectMeta::default()
        },
        ..TrainJob::default()
    }))
}

impl TrainJob {
    /// Whether the TrainJob has finished (`Complete` or `Failed` true): it gets no snapshot.
    pub fn finished(&self) -> bool {
        trainjob_finished(&self.conditions_json()).is_some()
    }

    /// The runtime resourceVersion recorded at admission, if the webhook recorded one.
    pub fn admitted_runtime_version(&self) -> Option<&str> {
        self.annotation(names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION)
    }

    /// Annotation `key`, kept by [`strip`] or (not stripped) in `metadata`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.marks
            .annotations
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
            .or_else(|| {
                self.metadata
                    .annotations
                    .as_ref()?
                    .get(key)
                    .map(String::as_str)
            })
    }

    /// `metadata` as the apiserver sent it, but for what [`strip`] dropped.
    fn full_metadata(&self) -> Cow<'_, ObjectMeta> {
        if self.marks.is_empty() {
            return Cow::Borrowed(&self.metadata);
        }
        let mut meta = self.metadata.clone();
        self.marks.put_into(&mut meta);
        Cow::Owned(meta)
    }

    /// The TrainJob as the JSON object `holdfast_core::snapshot` functions take.
    pub fn as_json(&self) -> Result<Value, serde_json::Error> {
        let mut value = serde_json::to_value(self)?;
        if let Value::Object(map) = &mut value {
            map.insert(
                "apiVersion".to_owned(),
                Value::String(format!(
                    "{}/{}",
                    names::TRAINER_GROUP,
                    names::TRAINER_VERSION
                )),
            );
            map.insert(
                "kind".to_owned(),
                Value::String(names::TRAINJOB_KIND.to_owned()),
            );
        }
        Ok(value)
    }

    /// `spec.runtimeRef` with the CRD's defaults (as `holdfast_core::snapshot::runtime_ref`).
    pub fn runtime_ref(
        &self,
    ) -> Result<holdfast_core::snapshot::RuntimeRef, holdfast_core::snapshot::SnapshotError> {
        let spec = serde_json::json!({ "spec": self.spec });
        holdfast_core::snapshot::runtime_ref(&spec)
    }

    fn conditions_json(&self) -> Value {
        Value::Array(
            self.status
                .conditions
                .iter()
                .map(|c| serde_json::json!({ "type": c.type_, "status": c.status }))
                .collect(),
        )
    }
}

/// The reference an Event on a TrainJob (as read, JSON) carries: `kubectl describe` finds
/// Events by kind, namespace, name and uid. `None` without a uid.
pub fn reference(object: &Value) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
    let field = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let ar = holdfast_cluster::resources::trainjob();
    Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(ar.api_version),
        kind: Some(ar.kind),
        namespace: field("/metadata/namespace"),
        name: field("/metadata/name"),
        uid: Some(field("/metadata/uid")?),
        ..Default::default()
    })
}

/// Whether `name` is a DNS-1123 subdomain (a TrainJob's name) and `namespace` a DNS-1123
/// label: checked before either goes into a request path, so that a name like `a%2Fb` from
/// the hold API cannot address another resource.
pub fn check_name(namespace: &str, name: &str) -> Result<(), String> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !label(namespace) {
        return Err(format!("namespace {namespace:?} is not a DNS-1123 label"));
    }
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label) {
        return Err(format!("name {name:?} is not a DNS-1123 subdomain"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn watched(v: Value) -> Watched {
        serde_json::from_value(v).expect("a TrainJob")
    }

    #[test]
    fn only_what_the_reconciler_reads_is_kept() {
        let mut j = watched(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"x": "y"},
                "annotations": {
                    "holdfast.dev/admitted-runtime-resource-version": "41",
                    "other": "z"
                },
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 4}},
            "status": {"conditions": [
                {"type": "Suspended", "status": "True"},
                {"type": "Complete", "status": "True", "message": "done"}
            ], "jobsStatus": []}
        }));
        strip(&mut j);
        let job = j.0.expect("decoded");
        assert_eq!(job.admitted_runtime_version(), Some("41"));
        assert!(job.metadata.labels.is_none());
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(job.metadata.uid.as_deref(), Some("u1"));
        assert!(job.finished());
        let v = job.as_json().expect("json");
        assert_eq!(v["kind"], "TrainJob");
        assert_eq!(v["apiVersion"], "trainer.kubeflow.org/v1alpha1");
        assert_eq!(v["metadata"]["name"], "a");
        assert_eq!(v["spec"], json!({"runtimeRef": {"name": "torch"}}));
        assert_eq!(
            v["status"],
            json!({"conditions": [{"type": "Complete", "status": "True"}]})
        );
        let r = job.runtime_ref().expect("ref");
        assert_eq!(
            (r.api_group.as_str(), r.kind.as_str(), r.name.as_str()),
            ("trainer.kubeflow.org", "ClusterTrainingRuntime", "torch")
        );
    }

    #[test]
    fn a_cached_trainjob_keeps_what_the_readers_read_outside_metadata_maps() {
        let metadata = json!({
            "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
            "labels": {"holdfast.dev/managed": "true"},
            "annotations": {
                "holdfast.dev/admitted-runtime-resource-version": "41",
                "holdfast.dev/opened": "true",
                "holdfast.dev/attempt": "2",
                "holdfast.dev/hold-instance": "5",
                "holdfast.dev/hold-placed-at": "2026-01-01T00:00:00Z"
            }
        });
        let mut full = metadata.clone();
        full["labels"]["team"] = json!("x");
        full["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!("{}");
        full["managedFields"] = json!([{"manager": "kubectl"}]);
        let mut j = watched(json!({"metadata": full, "spec": {"runtimeRef": {"name": "torch"}}}));
        strip(&mut j);
        let job = j.0.expect("decoded");
        // No map is left to allocate per cached job: the kept entries live in the marks.
        assert!(job.metadata.labels.is_none() && job.metadata.annotations.is_none());
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(job.admitted_runtime_version(), Some("41"));
        assert_eq!(job.annotation("holdfast.dev/hold-instance"), Some("5"));
        // Serialized (the snapshot functions and the gate read this), as the apiserver sent
        // it but for what no reader reads.
        let v = job.as_json().expect("json");
        assert_eq!(v["metadata"], metadata);
        assert_eq!(
            serde_json::to_value(&job).expect("json")["metadata"],
            metadata
        );
        let mut held = crate::held::HoldCount::default();
        held.add(|k| job.annotation(k));
        assert_eq!(held.held, 1);
        assert!(held.oldest_placed.is_some());
    }

    #[test]
    fn a_runtime_refs_default_group_and_kind_are_shared_not_copied() {
        let j = watched(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime", "name": "torch"}}
        }));
        let job = j.0.expect("decoded");
        let r = job.spec.runtime_ref.clone().expect("runtimeRef");
        assert!(matches!(
            r.api_group,
            Some(Cow::Borrowed("trainer.kubeflow.org"))
        ));
        assert!(matches!(
            r.kind,
            Some(Cow::Borrowed("ClusterTrainingRuntime"))
        ));
        assert_eq!(
            job.as_json().expect("json")["spec"],
            json!({"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime", "name": "torch"}})
        );
        let other = watched(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"runtimeRef": {"apiGroup": "example.com", "kind": "Other", "name": "x"}}
        }));
        let r = other
            .0
            .expect("decoded")
            .spec
            .runtime_ref
            .expect("runtimeRef");
        assert_eq!(
            (r.api_group.as_deref(), r.kind.as_deref()),
            (Some("example.com"), Some("Other"))
        );
    }

    #[test]
    fn a_running_job_is_not_finished() {
        let j = watched(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}},
            "status": {"conditions": [{"type": "Complete", "status": "False"}]}
        }));
        let job = j.0.expect("decoded");
        assert!(!job.finished());
        assert_eq!(job.admitted_runtime_version(), None);
        assert_eq!(job.runtime_ref().expect("ref").kind, "TrainingRuntime");
    }

    #[test]
    fn what_the_readmission_gate_reads_is_kept() {
        let mut j = watched(json!({
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"holdfast.dev/managed": "true", "x": "y"},
                "annotations": {
                    "holdfast.dev/opened": "true",
                    "holdfast.dev/attempt": "3",
                    "other": "z"
                },
                "finalizers": ["f"]
            },
            "spec": {"runtimeRef": {"name": "torch"}},
            "status": {"conditions": [{"type": "Failed", "status": "True"}]}
        }));
        strip(&mut j);
        let job = j.0.expect("decoded");
        let v = serde_json::to_value(&job).expect("json");
        assert_eq!(
            v["metadata"],
            json!({
                "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"holdfast.dev/managed": "true"},
                "annotations": {"holdfast.dev/opened": "true", "holdfast.dev/attempt": "3"}
            })
        );
        let view = holdfast_core::readmission::TrainJobView::read(&v);
        assert!(view.managed && view.opened && view.ended && view.terminating);
        assert_eq!(view.attempt, Some(3));
        assert_eq!(
            (view.uid.as_str(), view.resource_version.as_str()),
            ("u1", "7")
        );
    }

    #[tokio::test]
    async fn the_watch_waits_until_every_feed_is_read_or_dropped() {
        // Never contacted: the watch is not run here, only its start condition.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let mut watch = Watch::new(client, Some("ns"));
        let read = watch.subscribe();
        let dropped = watch.subscribe();
        let mut start = std::pin::pin!(watch.all_reading());
        assert!(
            futures::poll!(start.as_mut()).is_pending(),
            "no feed read yet"
        );
        let _events = read.reflect(Writer::new(()));
        assert!(
            futures::poll!(start.as_mut()).is_pending(),
            "one feed still waits to be read"
        );
        drop(dropped);
        assert!(futures::poll!(start.as_mut()).is_ready());
    }

    #[tokio::test]
    async fn a_feed_fills_its_store_and_triggers_on_applied_jobs() {
        let (tx, rx) = unbounded();
        let writer = Writer::<Watched>::new(());
        let store = writer.as_reader();
        let job = |name: &str| watched(json!({"metadata": {"name": name, "namespace": "ns"}}));
        for update in [
            watcher::Event::Init,
            watcher::Event::InitApply(job("a")),
            watcher::Event::InitDone,
            watcher::Event::Apply(job("b")),
            watcher::Event::Delete(job("a")),
        ] {
            tx.unbounded_send(Ok(update)).expect("open");
        }
        drop(tx);
        let feed = Feed {
            events: rx,
            reading: oneshot::channel().0,
        };
        let triggered: Vec<String> = feed
            .reflect(writer)
            .filter_map(|u| futures::future::ready(applied(u)))
            .map(|j| j.map(|j| kube::ResourceExt::name_any(&j)).expect("a job"))
            .collect()
            .await;
        assert_eq!(triggered, ["a", "b"]);
        let names: Vec<String> = store
            .state()
            .iter()
            .map(|j| kube::ResourceExt::name_any(&**j))
            .collect();
        assert_eq!(names, ["b"]);
    }

    #[test]
    fn a_trigger_carries_only_the_jobs_name_and_namespace() {
        let job = watched(json!({
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "annotations": {"holdfast.dev/admitted-runtime-resource-version": "41"}
            },
            "spec": {"runtimeRef": {"name": "torch"}}
        }));
        let listed = watcher::Event::InitApply(job.clone());
        let Some(Ok(trigger)) = applied(Ok(listed)) else {
            panic!("a listed job triggers");
        };
        // What a Controller queues: the same object as the job's, without copies of its
        // resourceVersion and uid.
        let queued = ObjectRef::from_obj(&trigger);
        assert_eq!(queued, ObjectRef::from_obj(&job));
        assert_eq!(queued, trainjob_ref("ns", "a"));
        assert_eq!(
            (queued.extra.resource_version, queued.extra.uid),
            (None, None)
        );
        assert_eq!(
            trigger.0.expect("decoded").metadata,
            ObjectMeta {
                name: Some("a".to_owned()),
                namespace: Some("ns".to_owned()),
                ..ObjectMeta::default()
            }
        );
    }

    #[test]
    fn a_job_that_does_not_decode_keeps_its_metadata() {
        let mut j = watched(json!({
            "metadata": {"name": "odd", "namespace": "ns", "managedFields": [{"manager": "x"}]},
            "spec": {"runtimeRef": "not an object"}
        }));
        strip(&mut j);
        let invalid = j.0.expect_err("does not decode");
        assert_eq!(invalid.metadata.name.as_deref(), Some("odd"));
        assert!(invalid.metadata.managed_fields.is_none());
    }
    #[test]
    fn names_that_could_escape_the_path_are_refused() {
        assert!(check_name("team-a", "mnist.v2").is_ok());
        for (ns, name) in [
            ("team-a", "a/b"),
            ("team-a", ".."),
            ("team-a", ""),
            ("team-a", "Mnist"),
            ("team/a", "mnist"),
            ("", "mnist"),
            ("-a", "mnist"),
        ] {
            assert!(check_name(ns, name).is_err(), "{ns}/{name}");
        }
        assert!(check_name("a", &"x".repeat(254)).is_err());
    }
}
