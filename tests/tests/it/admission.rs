//! The admission webhook end to end: served in-process over TLS (a certificate from the
//! control plane's CA), registered by URL with the chart's webhook configurations
//! (`holdfast_tests::registration`) scoped to the test's namespace, and exercised by real clients acting as real identities
//! against the real apiserver and garbage collector.
//!
//! Every test is named after the rule it proves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast_core::mode::Mode;
use holdfast_core::policy::identities::{GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER};
use holdfast_tests::in_process_webhook::InProcessWebhook;
use holdfast_tests::registration::{Engine, Namespaces, Registration, Target, refused_by_policy};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::core::ApiResource;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SNAPSHOT_LABEL: &str = "holdfast.dev/runtime-snapshot";
const HOLD: &str = "holdfast.dev/hold-instance";
const HOLD_REASON: &str = "holdfast.dev/hold-reason";
const ADMITTED: &str = "holdfast.dev/admitted-runtime-resource-version";
const MANAGED: &str = "holdfast.dev/managed";
const QUEUE: &str = "kueue.x-k8s.io/queue-name";

fn trainjobs() -> ApiResource {
    holdfast_cluster::resources::trainjob()
}

fn workloads() -> ApiResource {
    holdfast_cluster::resources::workload()
}

/// One test's namespace, with holdfast's webhook serving and registered for it alone.
struct Harness {
    cp: &'static ControlPlane,
    ns: String,
    registration: Registration,
    hook: Option<InProcessWebhook>,
    admin: kube::Client,
    alice: kube::Client,
    controller: kube::Client,
    kueue: kube::Client,
    /// A TrainJob that owns the snapshot ConfigMaps the tests create: a real snapshot always
    /// has its TrainJob as controller (an orphaned one protects nothing, and may be deleted).
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
}

impl Harness {
    async fn start(prefix: &str, mode: Mode) -> Harness {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await.expect("namespace");
        if mode == Mode::Kueue {
            // The chart's kueue-mode roles: the controller updates Workloads.
            let admin = cp.client(Identity::Admin).await.expect("admin");
            holdfast_tests::rbac::install_holdfast_rbac(&admin, "kueue")
                .await
                .expect("kueue-mode RBAC");
        }
        let hook = InProcessWebhook::start(cp, mode, false)
            .await
            .expect("webhook starts");

        let admin = cp.client(Identity::Admin).await.expect("admin");
        let config = format!("holdfast-{ns}");
        // HOLDFAST_TEST_VALIDATION_ENGINE picks the engine: the whole suite runs under each.
        let registration = Registration::new(
            config.clone(),
            Target::Url(hook.url()),
            cp.ca_pem().as_bytes().to_vec(),
        )
        .with_mode(mode)
        .with_engine(Engine::from_env())
        .with_namespaces(Namespaces::Only(vec![ns.clone()]));
        registration
            .install(&admin)
            .await
            .expect("register the webhooks and policies");

        let owner: DynamicObject = Api::namespaced_with(admin.clone(), &ns, &trainjobs())
            .create(
                &PostParams::default(),
                &dynamic(trainjob_json("snapshot-owner", json!({}), json!({}), None)),
            )
            .await
            .expect("the snapshots' owner");
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "trainer.kubeflow.org/v1alpha1".into(),
            kind: "TrainJob".into(),
            name: "snapshot-owner".into(),
            uid: owner.metadata.uid.clone().expect("uid"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let h = Harness {
            cp,
            ns,
            registration,
            hook: Some(hook),
            alice: cp.client(Identity::User).await.expect("alice"),
            controller: cp.client(Identity::Controller).await.expect("controller"),
            kueue: cp.client(Identity::Kueue).await.expect("kueue"),
            admin,
            owner,
        };
        h.wait_until_registered().await;
        h
    }

    /// The apiserver picks configurations up asynchronously: probe with dry runs (no side
    /// effect) until both webhooks answer.
    async fn wait_until_registered(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        loop {
            let probe = self
                .cms(&self.alice)
                .create(&dry, &configmap("probe-runtime-snapshot", json!({})))
                .await;
            let validating = matches!(&probe, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("runtime snapshot"));
            let job = trainjob_json("probe", json!({}), json!({ADMITTED: "forged"}), None);
            let created = self
                .tjs(&self.alice)
                .create(&dry, &dynamic(job))
                .await
                .expect("dry-run TrainJob");
            let mutating = created
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ADMITTED))
                .is_none();
            // The jobs rule too: under validation.engine=policy each policy reaches the
            // apiserver's cache on its own, and a loaded apiserver can judge by the snapshots
            // policy while the jobs policy is still missing (seen once in CI).
            let forged = trainjob_json(
                "probe-jobs",
                json!({}),
                json!({holdfast_core::names::ANN_ATTEMPT: "9"}),
                None,
            );
            let jobs_probe = self.tjs(&self.alice).create(&dry, &dynamic(forged)).await;
            let jobs = matches!(&jobs_probe, Err(kube::Error::Api(s)) if s.code == 403);
            if validating && mutating && jobs {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the webhook configurations did not take effect within 30s (snapshot probe: {probe:?}; mutated: {mutating}; jobs probe: {jobs_probe:?})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn cms(&self, client: &kube::Client) -> Api<ConfigMap> {
        Api::namespaced(client.clone(), &self.ns)
    }

    fn tjs(&self, client: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &self.ns, &trainjobs())
    }

    fn wls(&self, client: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &self.ns, &workloads())
    }

    /// Stop serving; the registrations stay (the protected entries, `Fail`, now refuse what they
    /// match; the best-effort ones, `Ignore`, let it through).
    async fn stop_webhook(&mut self) {
        if let Some(hook) = self.hook.take() {
            hook.stop().await.expect("webhook stops");
        }
    }

    async fn finish(mut self) {
        self.registration.uninstall(&self.admin).await;
        self.stop_webhook().await;
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object json")
}

impl Harness {
    /// A snapshot ConfigMap as the controller writes one: owned by a TrainJob.
    fn snapshot(&self, name: &str, labels: Value) -> ConfigMap {
        let mut cm = configmap(name, labels);
        cm.metadata.owner_references = Some(vec![self.owner.clone()]);
        cm
    }
}

fn configmap(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"runtime": "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"},
    }))
    .expect("configmap json")
}

fn trainjob_json(name: &str, labels: Value, annotations: Value, suspend: Option<bool>) -> Value {
    let mut tj = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}},
    });
    if let Some(s) = suspend {
        tj["spec"]["suspend"] = json!(s);
    }
    tj
}

fn annotation(o: &DynamicObject, key: &str) -> Option<String> {
    o.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}

/// `r` is the webhook's refusal (403 from `holdfast`'s validating webhook) and its message
/// says each of `words`.
/// An update as `api`'s identity (GET, then PUT with its resourceVersion) with `merge`
/// (RFC 7386) applied: how holdfast's controller writes, and all its roles let it do.
async fn update_as(
    api: &Api<DynamicObject>,
    name: &str,
    merge: Value,
) -> Result<DynamicObject, kube::Error> {
    let stored = api.get(name).await?;
    let mut doc = serde_json::to_value(&stored).expect("json");
    json_patch::merge(&mut doc, &merge);
    let obj: DynamicObject = serde_json::from_value(doc).expect("object");
    api.replace(name, &PostParams::default(), &obj).await
}

/// Refused by RBAC before any webhook is asked: holdfast's roles do not have the verb.
#[track_caller]
fn assert_forbidden_by_rbac<T: std::fmt::Debug>(r: Result<T, kube::Error>, verb: &str) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "not a 403: {s:?}");
            assert!(
                s.message.contains(&format!("cannot {verb} resource")),
                "not an RBAC refusal: {}",
                s.message
            );
        }
        other => panic!("expected RBAC's refusal, got {other:?}"),
    }
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(r: Result<T, kube::Error>, words: &[&str]) -> String {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "not a 403: {s:?}");
            // The webhook's refusal, or (validation.engine policy or both) the policy's.
            assert!(
                s.message
                    .contains("validate.holdfast.dev\" denied the request")
                    || refused_by_policy(&s.message),
                "not holdfast's refusal: {}",
                s.message
            );
            for w in words {
                assert!(s.message.contains(w), "message lacks {w:?}: {}", s.message);
            }
            s.message
        }
        other => panic!("expected holdfast's refusal, got {other:?}"),
    }
}

/// Every way to write an object: replace, JSON patch, merge patch, strategic merge patch,
/// server-side apply. `edit` turns the stored object into the wanted one; `json_patch` is
/// the same edit as RFC 6902 operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Replace,
    JsonPatch,
    MergePatch,
    StrategicMergePatch,
    Apply,
}

const WRITES: [Write; 5] = [
    Write::Replace,
    Write::JsonPatch,
    Write::MergePatch,
    Write::StrategicMergePatch,
    Write::Apply,
];

/// Writes `wanted` (a full object, from a GET of the stored one) as `how`. `merge` is the
/// merge patch that makes the same change, `ops` the JSON patch.
async fn write<K>(
    api: &Api<K>,
    name: &str,
    how: Write,
    wanted: &K,
    merge: &Value,
    ops: &Value,
) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let pp = PatchParams::default();
    match how {
        Write::Replace => api.replace(name, &PostParams::default(), wanted).await,
        Write::JsonPatch => {
            let patch: json_patch::Patch = serde_json::from_value(ops.clone()).expect("ops");
            api.patch(name, &pp, &Patch::Json::<()>(patch)).await
        }
        Write::MergePatch => api.patch(name, &pp, &Patch::Merge(merge)).await,
        Write::StrategicMergePatch => api.patch(name, &pp, &Patch::Strategic(merge)).await,
        Write::Apply => {
            let mut body = serde_json::to_value(wanted).expect("json");
            if let Some(m) = body["metadata"].as_object_mut() {
                for k in [
                    "resourceVersion",
                    "managedFields",
                    "uid",
                    "creationTimestamp",
                    "generation",
                ] {
                    m.remove(k);
                }
            }
            api.patch(
                name,
                &PatchParams::apply("alice-apply").force(),
                &Patch::Apply(body),
            )
            .await
        }
    }
}

// =============================================================================================
// Snapshot ConfigMaps

/// A plain user can neither create, nor edit in any way, nor delete a snapshot; the
/// controller creates and deletes it.
async fn snapshot_is_protected(h: &Harness, name: &str, labels: Value) {
    let alice = h.cms(&h.alice);
    let cm = h.snapshot(name, labels.clone());
    assert_refused(
        alice.create(&PostParams::default(), &cm).await,
        &[
            "is a runtime snapshot",
            "may not create it",
            Identity::Controller.username(),
            Identity::Trainer.username(),
            "user alice",
        ],
    );
    let stored = h
        .cms(&h.controller)
        .create(&PostParams::default(), &cm)
        .await
        .expect("the controller creates the snapshot");

    let mut edited = stored.clone();
    edited
        .data
        .get_or_insert_default()
        .insert("runtime".into(), "kind: Evil\n".into());
    let merge = json!({"data": {"runtime": "kind: Evil\n"}});
    let ops = json!([{"op": "replace", "path": "/data/runtime", "value": "kind: Evil\n"}]);
    for how in WRITES {
        let r = write(&alice, name, how, &edited, &merge, &ops).await;
        let message = assert_refused(r, &["is a runtime snapshot", "may not update it"]);
        assert!(message.contains("user alice"), "{how:?}: {message}");
    }
    // Dropping the label or renaming does not escape: neither side may carry the marks.
    let mut unlabelled = stored.clone();
    unlabelled.metadata.labels = None;
    assert_refused(
        alice
            .replace(name, &PostParams::default(), &unlabelled)
            .await,
        &["is a runtime snapshot"],
    );

    assert_refused(
        alice.delete(name, &DeleteParams::default()).await,
        &[
            "is a runtime snapshot",
            "may not delete it",
            GARBAGE_COLLECTOR,
            NAMESPACE_CONTROLLER,
        ],
    );
    let now = h.cms(&h.admin).get(name).await.expect("still there");
    assert_eq!(now.data, stored.data, "the snapshot was changed");
    // The controller may delete it (the chart gives it the verb since issue #12, for
    // orphaned snapshots): the policy lets it, as it lets the garbage collector.
    h.cms(&h.controller)
        .delete(name, &DeleteParams::default())
        .await
        .expect("the controller deletes a snapshot");
}

#[tokio::test]
async fn plain_user_cannot_create_edit_or_delete_a_snapshot_configmap_named_as_one() {
    let h = Harness::start("wh-snap-name", Mode::Plain).await;
    snapshot_is_protected(&h, "mnist-runtime-snapshot", json!({})).await;
    h.finish().await;
}

#[tokio::test]
async fn plain_user_cannot_create_edit_or_delete_a_snapshot_configmap_labelled_as_one() {
    let h = Harness::start("wh-snap-label", Mode::Plain).await;
    snapshot_is_protected(&h, "mnist-copy", json!({SNAPSHOT_LABEL: "true"})).await;
    // Nor turn an ordinary ConfigMap of hers into one.
    let alice = h.cms(&h.alice);
    alice
        .create(&PostParams::default(), &configmap("settings", json!({})))
        .await
        .expect("an ordinary ConfigMap");
    assert_refused(
        alice
            .patch(
                "settings",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {SNAPSHOT_LABEL: "true"}}})),
            )
            .await,
        &["carries the label holdfast.dev/runtime-snapshot=true"],
    );
    h.finish().await;
}

#[tokio::test]
async fn deletecollection_of_configmaps_by_a_plain_user_spares_snapshots() {
    let h = Harness::start("wh-deletecollection", Mode::Plain).await;
    let alice = h.cms(&h.alice);
    for name in ["a-settings", "b-settings"] {
        alice
            .create(&PostParams::default(), &configmap(name, json!({})))
            .await
            .expect("ordinary ConfigMap");
    }
    h.cms(&h.controller)
        .create(
            &PostParams::default(),
            &h.snapshot("mnist-runtime-snapshot", json!({})),
        )
        .await
        .expect("snapshot");
    // deletecollection reaches admission as one DELETE per item.
    let r = alice
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    assert_refused(r, &["is a runtime snapshot", "may not delete it"]);
    let left: Vec<String> = h
        .cms(&h.admin)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(
        left.contains(&"mnist-runtime-snapshot".to_owned()),
        "{left:?}"
    );
    assert!(
        !left.contains(&"a-settings".to_owned()),
        "the ordinary ConfigMap listed before the snapshot was deleted: {left:?}"
    );
    h.finish().await;
}

#[tokio::test]
async fn dry_run_gets_the_same_verdict_and_no_side_effect() {
    let h = Harness::start("wh-dry-run", Mode::Plain).await;
    let name = "mnist-runtime-snapshot";
    let dry_delete = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let dry_post = PostParams {
        dry_run: true,
        ..Default::default()
    };
    // A refused create is refused as a dry run, with the same message.
    let real = assert_refused(
        h.cms(&h.alice)
            .create(&PostParams::default(), &configmap(name, json!({})))
            .await,
        &["may not create it"],
    );
    let dry = assert_refused(
        h.cms(&h.alice)
            .create(&dry_post, &configmap(name, json!({})))
            .await,
        &["may not create it"],
    );
    assert_eq!(real, dry);
    // An allowed dry run stores nothing.
    h.cms(&h.controller)
        .create(&dry_post, &configmap(name, json!({})))
        .await
        .expect("the controller's dry run is allowed");
    assert!(h.cms(&h.admin).get_opt(name).await.expect("get").is_none());

    h.cms(&h.controller)
        .create(&PostParams::default(), &h.snapshot(name, json!({})))
        .await
        .expect("snapshot");
    let dry = assert_refused(
        h.cms(&h.alice).delete(name, &dry_delete).await,
        &["may not delete it"],
    );
    let real = assert_refused(
        h.cms(&h.alice).delete(name, &DeleteParams::default()).await,
        &["may not delete it"],
    );
    assert_eq!(real, dry);
    let dry_patch = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    assert_refused(
        h.cms(&h.alice)
            .patch(
                name,
                &dry_patch,
                &Patch::Merge(json!({"data": {"runtime": "x"}})),
            )
            .await,
        &["may not update it"],
    );
    h.cms(&h.controller)
        .delete(name, &dry_delete)
        .await
        .expect("the controller's dry-run delete is allowed");
    assert!(
        h.cms(&h.admin).get_opt(name).await.expect("get").is_some(),
        "and deletes nothing"
    );

    // The mutating side answers a dry run as the real request: the managed TrainJob comes
    // back suspended, and nothing is stored.
    let job = trainjob_json("gated", json!({MANAGED: "true"}), json!({}), None);
    let created = h
        .tjs(&h.alice)
        .create(&dry_post, &dynamic(job))
        .await
        .expect("dry run");
    assert_eq!(created.data["spec"]["suspend"], true);
    assert!(
        h.tjs(&h.admin)
            .get_opt("gated")
            .await
            .expect("get")
            .is_none()
    );
    h.finish().await;
}

#[tokio::test]
async fn garbage_collector_still_deletes_and_orphans_snapshots_with_their_trainjob() {
    let h = Harness::start("wh-gc", Mode::Plain).await;
    for (job, propagation) in [
        ("background", PropagationPolicy::Background),
        ("foreground", PropagationPolicy::Foreground),
        ("orphan", PropagationPolicy::Orphan),
    ] {
        let tj = h
            .tjs(&h.admin)
            .create(
                &PostParams::default(),
                &dynamic(trainjob_json(job, json!({}), json!({}), None)),
            )
            .await
            .expect("TrainJob");
        let mut snap = configmap(
            &format!("{job}-runtime-snapshot"),
            json!({SNAPSHOT_LABEL: "true"}),
        );
        snap.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "trainer.kubeflow.org/v1alpha1".into(),
                kind: "TrainJob".into(),
                name: job.into(),
                uid: tj.metadata.uid.clone().expect("uid"),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        ]);
        h.cms(&h.controller)
            .create(&PostParams::default(), &snap)
            .await
            .expect("snapshot");
        h.tjs(&h.admin)
            .delete(
                job,
                &DeleteParams {
                    propagation_policy: Some(propagation),
                    ..Default::default()
                },
            )
            .await
            .expect("delete TrainJob");
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let cms = h.cms(&h.admin);
        let bg = cms
            .get_opt("background-runtime-snapshot")
            .await
            .expect("get");
        let fg = cms
            .get_opt("foreground-runtime-snapshot")
            .await
            .expect("get");
        let orphan = cms.get_opt("orphan-runtime-snapshot").await.expect("get");
        let orphaned = orphan.as_ref().is_some_and(|c| {
            c.metadata
                .owner_references
                .as_ref()
                .is_none_or(Vec::is_empty)
        });
        let jobs_gone = h
            .tjs(&h.admin)
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .all(|j| j.metadata.name.as_deref() == Some("snapshot-owner"));
        if bg.is_none() && fg.is_none() && orphaned && jobs_gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the garbage collector did not finish within 90s (background {:?}, foreground {:?}, orphan owners {:?}, TrainJobs gone {jobs_gone}):\n{}",
            bg.is_some(),
            fg.is_some(),
            orphan.map(|c| c.metadata.owner_references),
            h.cp.log_tail("kube-controller-manager", 20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The orphaned snapshot protects no TrainJob's runtime any more: whoever RBAC lets may
    // delete it (holdfast's controller removes it itself, see `snapshots.rs`), but not edit
    // it.
    assert_refused(
        h.cms(&h.alice)
            .patch(
                "orphan-runtime-snapshot",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"runtime": "kind: Evil\n"}})),
            )
            .await,
        &["may not update it"],
    );
    h.cms(&h.alice)
        .delete("orphan-runtime-snapshot", &DeleteParams::default())
        .await
        .expect("an orphaned snapshot may be deleted");
    h.finish().await;
}

// =============================================================================================
// Controller annotations on TrainJobs

/// Places hold 3 on a new TrainJob, as the controller does (plain mode: with spec.suspend).
async fn held_trainjob(h: &Harness, name: &str) -> DynamicObject {
    h.tjs(&h.admin)
        .create(
            &PostParams::default(),
            &dynamic(trainjob_json(
                name,
                json!({"team": "a"}),
                json!({"example.com/owner": "bob"}),
                Some(false),
            )),
        )
        .await
        .expect("TrainJob");
    update_as(
        &h.tjs(&h.controller),
        name,
        json!({
            "metadata": {"annotations": {HOLD: "3", HOLD_REASON: "node lost"}},
            "spec": {"suspend": true},
        }),
    )
    .await
    .expect("the controller places the hold")
}

#[tokio::test]
async fn plain_user_cannot_add_change_or_remove_a_hold_annotation_by_any_kind_of_write() {
    let h = Harness::start("wh-hold-ann", Mode::Plain).await;
    let alice = h.tjs(&h.alice);

    // Add, to a TrainJob that has none.
    let free = h
        .tjs(&h.admin)
        .create(
            &PostParams::default(),
            &dynamic(trainjob_json("free", json!({}), json!({"x": "y"}), None)),
        )
        .await
        .expect("TrainJob");
    let mut added = free.clone();
    added
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(HOLD.into(), "1".into());
    let merge = json!({"metadata": {"annotations": {HOLD: "1"}}});
    let ops = json!([{"op": "add", "path": "/metadata/annotations/holdfast.dev~1hold-instance", "value": "1"}]);
    for how in WRITES {
        let r = write(&alice, "free", how, &added, &merge, &ops).await;
        if how == Write::StrategicMergePatch {
            // The apiserver refuses strategic merge patches of custom resources itself.
            assert!(
                matches!(&r, Err(kube::Error::Api(s)) if s.code == 415),
                "{how:?}: {r:?}"
            );
            continue;
        }
        assert_refused(
            r,
            &[
                "metadata.annotations[holdfast.dev/hold-instance]",
                "may not add it",
                Identity::Controller.username(),
            ],
        );
    }
    assert_eq!(annotation(&alice.get("free").await.unwrap(), HOLD), None);
    // The other controller annotations too.
    for key in ["holdfast.dev/opened", "holdfast.dev/attempt", ADMITTED] {
        assert_refused(
            alice
                .patch(
                    "free",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {key: "1"}}})),
                )
                .await,
            &[key, "may not add it"],
        );
    }

    // Change, on a held TrainJob.
    let held = held_trainjob(&h, "held").await;
    let mut changed = held.clone();
    changed
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(HOLD.into(), "4".into());
    let merge = json!({"metadata": {"annotations": {HOLD: "4"}}});
    let ops = json!([{"op": "replace", "path": "/metadata/annotations/holdfast.dev~1hold-instance", "value": "4"}]);
    for how in WRITES {
        let r = write(&alice, "held", how, &changed, &merge, &ops).await;
        if how == Write::StrategicMergePatch {
            assert!(
                matches!(&r, Err(kube::Error::Api(s)) if s.code == 415),
                "{how:?}: {r:?}"
            );
            continue;
        }
        assert_refused(r, &["may not change it from \"3\" to \"4\""]);
    }

    // Remove: the apiserver shows the webhook a removing patch and a replace that omits the
    // annotation alike, so the mutating side puts it back (with a warning); either way it
    // stays.
    let merge = json!({"metadata": {"annotations": {HOLD: null}}});
    let ops =
        json!([{"op": "remove", "path": "/metadata/annotations/holdfast.dev~1hold-instance"}]);
    for how in WRITES {
        let current = alice.get("held").await.unwrap();
        let mut wanted = current.clone();
        wanted
            .metadata
            .annotations
            .get_or_insert_default()
            .remove(HOLD);
        let r = write(&alice, "held", how, &wanted, &merge, &ops).await;
        if let Err(e) = &r {
            assert!(
                matches!(e, kube::Error::Api(s) if s.code == 403 || (how == Write::StrategicMergePatch && s.code == 415)),
                "{how:?}: {e}"
            );
        }
        let now = alice.get("held").await.unwrap();
        assert_eq!(
            annotation(&now, HOLD).as_deref(),
            Some("3"),
            "{how:?} removed the hold"
        );
        assert_eq!(
            annotation(&now, HOLD_REASON).as_deref(),
            Some("node lost"),
            "{how:?}"
        );
    }
    h.finish().await;
}

#[tokio::test]
async fn full_replace_of_a_held_trainjob_without_our_annotations_keeps_them() {
    let h = Harness::start("wh-restore", Mode::Plain).await;
    let held = held_trainjob(&h, "mnist").await;
    // `kubectl replace -f manifest.yaml`: the user's manifest knows nothing of holdfast.
    let mut manifest = held.clone();
    manifest.metadata.annotations =
        Some([("example.com/owner".to_owned(), "carol".to_owned())].into());
    manifest.metadata.labels = Some([("team".to_owned(), "b".to_owned())].into());
    let replaced = h
        .tjs(&h.alice)
        .replace("mnist", &PostParams::default(), &manifest)
        .await
        .expect("the replace is admitted");
    assert_eq!(
        annotation(&replaced, "example.com/owner").as_deref(),
        Some("carol")
    );
    assert_eq!(replaced.metadata.labels.as_ref().unwrap()["team"], "b");
    assert_eq!(annotation(&replaced, HOLD).as_deref(), Some("3"));
    assert_eq!(
        annotation(&replaced, HOLD_REASON).as_deref(),
        Some("node lost")
    );
    // And still held: the replace did not unsuspend it either.
    assert_eq!(replaced.data["spec"]["suspend"], true);
    h.finish().await;
}

/// Why the configurations list no subresources: a custom resource's `status` subresource
/// keeps everything outside `.status` from the stored object, so a status write (by anyone,
/// here the cluster admin) cannot drop a hold or unsuspend.
#[tokio::test]
async fn status_subresource_writes_cannot_change_hold_annotations_or_suspend() {
    let h = Harness::start("wh-status", Mode::Plain).await;
    held_trainjob(&h, "mnist").await;
    for api in [h.tjs(&h.admin), h.tjs(&h.alice)] {
        let r = api
            .patch_status(
                "mnist",
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {HOLD: null, HOLD_REASON: null}},
                    "spec": {"suspend": false},
                    "status": {"conditions": []},
                })),
            )
            .await;
        // alice has no RBAC on trainjobs/status; the admin's write goes through.
        if let Err(e) = &r {
            assert!(matches!(e, kube::Error::Api(s) if s.code == 403), "{e}");
        }
    }
    let now = h.tjs(&h.admin).get("mnist").await.expect("get");
    assert_eq!(annotation(&now, HOLD).as_deref(), Some("3"));
    assert_eq!(annotation(&now, HOLD_REASON).as_deref(), Some("node lost"));
    assert_eq!(now.data["spec"]["suspend"], true);
    h.finish().await;
}

#[tokio::test]
async fn plain_mode_held_trainjob_is_unsuspended_only_by_the_controller() {
    let h = Harness::start("wh-plain-unsuspend", Mode::Plain).await;
    held_trainjob(&h, "mnist").await;
    let unsuspend = Patch::Merge(json!({"spec": {"suspend": false}}));
    for client in [&h.alice, &h.kueue, &h.admin] {
        assert_refused(
            h.tjs(client)
                .patch("mnist", &PatchParams::default(), &unsuspend)
                .await,
            &[
                "spec.suspend",
                "it is held (hold 3",
                Identity::Controller.username(),
            ],
        );
    }
    // The controller's release: unsuspend and drop the hold in one update.
    let released = update_as(&h.tjs(&h.controller), "mnist", json!({"metadata": {"annotations": {HOLD: null, HOLD_REASON: null}}, "spec": {"suspend": false}}))
        .await
        .expect("the controller releases");
    assert_eq!(released.data["spec"]["suspend"], false);
    h.finish().await;
}

#[tokio::test]
async fn managed_trainjob_created_in_plain_mode_comes_out_suspended_at_its_start_gate() {
    let h = Harness::start("wh-gate", Mode::Plain).await;
    let job = trainjob_json("mnist", json!({MANAGED: "true"}), json!({}), None);
    let created = h
        .tjs(&h.alice)
        .create(&PostParams::default(), &dynamic(job))
        .await
        .expect("created");
    assert_eq!(created.data["spec"]["suspend"], true);
    // Only Open opens it.
    assert_refused(
        h.tjs(&h.alice)
            .patch(
                "mnist",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": false}})),
            )
            .await,
        &["start gate is closed", "Open"],
    );
    let opened = update_as(&h.tjs(&h.controller), "mnist", json!({"metadata": {"annotations": {"holdfast.dev/opened": "true"}}, "spec": {"suspend": false}}))
        .await
        .expect("the controller opens the gate");
    assert_eq!(opened.data["spec"]["suspend"], false);
    // An unmanaged TrainJob is left as written.
    let free = h
        .tjs(&h.alice)
        .create(
            &PostParams::default(),
            &dynamic(trainjob_json("free", json!({}), json!({}), Some(false))),
        )
        .await
        .expect("created");
    assert_eq!(free.data["spec"]["suspend"], false);
    h.finish().await;
}

#[tokio::test]
async fn admitted_runtime_resource_version_is_recorded_at_create() {
    let h = Harness::start("wh-admitted", Mode::Plain).await;
    // A ClusterTrainingRuntime (cluster-scoped) and a TrainingRuntime (namespaced): both
    // kinds are resolved by discovery.
    let cluster_rt = format!("torch-{}", h.ns);
    let runtime_body = |kind: &str, name: &str| {
        dynamic(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
            "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                "template": {"spec": {"replicatedJobs": [{"name": "node",
                    "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}}}}}]}}}
        }))
    };
    let ctr = Api::<DynamicObject>::all_with(
        h.admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .create(
        &PostParams::default(),
        &runtime_body("ClusterTrainingRuntime", &cluster_rt),
    )
    .await
    .expect("ClusterTrainingRuntime");
    let tr = Api::<DynamicObject>::namespaced_with(
        h.admin.clone(),
        &h.ns,
        &holdfast_cluster::resources::training_runtime(),
    )
    .create(
        &PostParams::default(),
        &runtime_body("TrainingRuntime", "local"),
    )
    .await
    .expect("TrainingRuntime");

    let mut job = trainjob_json("cluster", json!({}), json!({ADMITTED: "forged"}), None);
    job["spec"]["runtimeRef"] = json!({"name": cluster_rt});
    let created = h
        .tjs(&h.alice)
        .create(&PostParams::default(), &dynamic(job))
        .await
        .expect("created");
    assert_eq!(
        annotation(&created, ADMITTED),
        ctr.metadata.resource_version,
        "the user's forged value is replaced"
    );

    let mut job = trainjob_json("local", json!({}), json!({}), None);
    job["spec"]["runtimeRef"] =
        json!({"name": "local", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"});
    let created = h
        .tjs(&h.alice)
        .create(&PostParams::default(), &dynamic(job))
        .await
        .expect("created");
    assert_eq!(annotation(&created, ADMITTED), tr.metadata.resource_version);

    // A missing runtime: admitted, no annotation, and a forged one removed.
    let job = trainjob_json("missing", json!({}), json!({ADMITTED: "forged"}), None);
    let created = h
        .tjs(&h.alice)
        .create(&PostParams::default(), &dynamic(job))
        .await
        .expect("created");
    assert_eq!(annotation(&created, ADMITTED), None);
    // A kind the cluster does not serve: the same.
    let mut job = trainjob_json("unknown-kind", json!({}), json!({}), None);
    job["spec"]["runtimeRef"] =
        json!({"name": "x", "kind": "SlurmRuntime", "apiGroup": "example.com"});
    let created = h
        .tjs(&h.alice)
        .create(&PostParams::default(), &dynamic(job))
        .await
        .expect("created");
    assert_eq!(annotation(&created, ADMITTED), None);
    // Afterwards nobody but the controller changes it.
    assert_refused(
        h.tjs(&h.alice)
            .patch(
                "local",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {ADMITTED: "1"}}})),
            )
            .await,
        &[ADMITTED, "may not change it"],
    );
    Api::<DynamicObject>::all_with(
        h.admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .delete(&cluster_rt, &DeleteParams::default())
    .await
    .expect("clean up");
    h.finish().await;
}

// =============================================================================================
// Kueue mode

#[tokio::test]
async fn kueue_mode_only_kueue_flips_spec_suspend_of_a_queued_trainjob() {
    let h = Harness::start("wh-kueue-suspend", Mode::Kueue).await;
    h.tjs(&h.admin)
        .create(
            &PostParams::default(),
            &dynamic(trainjob_json(
                "queued",
                json!({QUEUE: "main"}),
                json!({}),
                Some(true),
            )),
        )
        .await
        .expect("queued TrainJob");
    let flip = |s: bool| Patch::Merge(json!({"spec": {"suspend": s}}));
    assert_refused(
        h.tjs(&h.alice)
            .patch("queued", &PatchParams::default(), &flip(false))
            .await,
        &[
            "spec.suspend",
            "is Kueue's in kueue mode",
            Identity::Kueue.username(),
            "user alice",
        ],
    );
    // Not even the controller: holdfast never writes it in kueue mode.
    assert_refused(
        update_as(
            &h.tjs(&h.controller),
            "queued",
            json!({"spec": {"suspend": false}}),
        )
        .await,
        &["is Kueue's in kueue mode"],
    );
    let admitted = h
        .tjs(&h.kueue)
        .patch("queued", &PatchParams::default(), &flip(false))
        .await
        .expect("Kueue unsuspends");
    assert_eq!(admitted.data["spec"]["suspend"], false);
    h.tjs(&h.kueue)
        .patch("queued", &PatchParams::default(), &flip(true))
        .await
        .expect("Kueue suspends");
    // Other edits of a queued TrainJob are the user's.
    h.tjs(&h.alice)
        .patch(
            "queued",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("an ordinary edit");
    // Nor is a TrainJob without a queue name hers to unsuspend (issue #12: dropping the
    // queue name was a way out of a hold): in kueue mode spec.suspend is Kueue's, whatever
    // the labels.
    h.tjs(&h.alice)
        .create(
            &PostParams::default(),
            &dynamic(trainjob_json("unqueued", json!({}), json!({}), Some(true))),
        )
        .await
        .expect("unqueued TrainJob");
    assert_refused(
        h.tjs(&h.alice)
            .patch("unqueued", &PatchParams::default(), &flip(false))
            .await,
        &["whatever labels", "user alice"],
    );
    h.finish().await;
}

fn workload_json(name: &str, annotations: Value, active: bool) -> Value {
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "active": active,
            "queueName": "main",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}],
        },
    })
}

#[tokio::test]
async fn kueue_mode_held_workload_is_reactivated_only_by_the_controller() {
    let h = Harness::start("wh-kueue-workload", Mode::Kueue).await;
    // A plain user cannot create a held Workload (forge a hold)...
    assert_refused(
        h.wls(&h.alice)
            .create(
                &PostParams::default(),
                &dynamic(workload_json("forged", json!({HOLD: "1"}), false)),
            )
            .await,
        &[
            "metadata.annotations[holdfast.dev/hold-instance]",
            "may not add it",
        ],
    );
    // ...the controller holds one (Kueue creates Workloads; the controller only updates them).
    h.wls(&h.admin)
        .create(
            &PostParams::default(),
            &dynamic(workload_json("held", json!({}), true)),
        )
        .await
        .expect("Workload");
    update_as(
        &h.wls(&h.controller),
        "held",
        json!({"metadata": {"annotations": {HOLD: "3", HOLD_REASON: "node lost"}}, "spec": {"active": false}}),
    )
    .await
    .expect("held Workload");
    let reactivate = Patch::Merge(json!({"spec": {"active": true}}));
    for client in [&h.alice, &h.kueue, &h.admin] {
        assert_refused(
            h.wls(client)
                .patch("held", &PatchParams::default(), &reactivate)
                .await,
            &[
                "spec.active",
                "carries hold 3",
                Identity::Controller.username(),
            ],
        );
    }
    // A replace that drops the hold annotations keeps them (and so stays refused if it
    // reactivates).
    let stored = h.wls(&h.alice).get("held").await.unwrap();
    let mut manifest = stored.clone();
    manifest.metadata.annotations = None;
    manifest.data["spec"]["priority"] = json!(5);
    let replaced = h
        .wls(&h.alice)
        .replace("held", &PostParams::default(), &manifest)
        .await
        .expect("an edit that keeps it inactive");
    assert_eq!(annotation(&replaced, HOLD).as_deref(), Some("3"));
    // The controller's release: reactivate and drop the hold in one update.
    let released = update_as(&h.wls(&h.controller), "held", json!({"metadata": {"annotations": {HOLD: null, HOLD_REASON: null}}, "spec": {"active": true}}))
        .await
        .expect("the controller releases");
    assert_eq!(released.data["spec"]["active"], true);
    h.finish().await;
}

// =============================================================================================
// Availability

#[tokio::test]
async fn webhook_down_refuses_protected_writes_and_lets_unrelated_ones_through() {
    let mut h = Harness::start("wh-down", Mode::Plain).await;
    h.cms(&h.controller)
        .create(
            &PostParams::default(),
            &h.snapshot("mnist-runtime-snapshot", json!({})),
        )
        .await
        .expect("snapshot");
    held_trainjob(&h, "held").await;
    h.tjs(&h.admin)
        .create(
            &PostParams::default(),
            &dynamic(trainjob_json("free", json!({"app": "x"}), json!({}), None)),
        )
        .await
        .expect("unrelated TrainJob");
    h.stop_webhook().await;

    // failurePolicy: Fail: what the webhook protects cannot be written, by anyone. (With the
    // policy engine the policies, which cannot go down, refuse it themselves.)
    let refused_down = |s: &kube::core::Status| {
        s.message.contains("failed calling webhook")
            || (Engine::from_env().policies() && refused_by_policy(&s.message))
    };
    let down = |r: Result<ConfigMap, kube::Error>| match r {
        Err(kube::Error::Api(s)) => assert!(refused_down(&s), "{s:?}"),
        other => panic!("a protected write went through with the webhook down: {other:?}"),
    };
    let merge = Patch::Merge(json!({"data": {"runtime": "kind: Evil\n"}}));
    down(
        h.cms(&h.alice)
            .patch("mnist-runtime-snapshot", &PatchParams::default(), &merge)
            .await,
    );
    // (The controller cannot even try: its roles do not include updating ConfigMaps.)
    assert_forbidden_by_rbac(
        h.cms(&h.controller)
            .patch("mnist-runtime-snapshot", &PatchParams::default(), &merge)
            .await,
        "patch",
    );
    let r = h
        .cms(&h.alice)
        .delete("mnist-runtime-snapshot", &DeleteParams::default())
        .await;
    assert!(
        matches!(&r, Err(kube::Error::Api(s)) if refused_down(s)),
        "{r:?}"
    );
    let r = h
        .tjs(&h.alice)
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await;
    assert!(
        matches!(&r, Err(kube::Error::Api(s)) if refused_down(s)),
        "{r:?}"
    );

    // matchConditions keep everything else away from the webhook: unrelated ConfigMaps (also
    // with generateName, where metadata.name is absent at admission) and unrelated TrainJobs.
    let alice = h.cms(&h.alice);
    alice
        .create(
            &PostParams::default(),
            &configmap("settings", json!({"app": "x"})),
        )
        .await
        .expect("an unrelated ConfigMap is created with the webhook down");
    let mut generated = configmap("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    alice
        .create(&PostParams::default(), &generated)
        .await
        .expect("a generateName ConfigMap is created with the webhook down");
    alice
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "v"}})),
        )
        .await
        .expect("updated");
    alice
        .delete("settings", &DeleteParams::default())
        .await
        .expect("deleted");
    // deletecollection admits each item with an empty request.name: the conditions must not
    // fail on it either.
    alice
        .create(
            &PostParams::default(),
            &configmap("other", json!({"app": "x"})),
        )
        .await
        .expect("created");
    alice
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .expect("a deletecollection of unrelated ConfigMaps goes through with the webhook down");
    h.tjs(&h.alice)
        .patch(
            "free",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("an unrelated TrainJob is edited with the webhook down");
    h.finish().await;
}
