#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use holdfast_core::mode::Mode;
use holdfast_core::policy::{
    AdmissionInput, Identities, Operation, Resource, UserInfo, mutate, validate,
};
use serde_json::{Map, Value, json};

const CONTROLLER: &str = "system:serviceaccount:holdfast-system:holdfast-controller";
const TRAINER: &str = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";
const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
const USERS: [&str; 5] = [CONTROLLER, TRAINER, GC, KUEUE, "alice"];
/// The users the TrainJob/Workload pairs run as (Trainer and the GC are alike there).
const JOB_USERS: [&str; 4] = [CONTROLLER, GC, KUEUE, "alice"];

fn who() -> Identities {
    Identities::new([CONTROLLER], [TRAINER], [GC], [KUEUE])
}

fn registration() -> Registration {
    Registration::new(
        "holdfast",
        Target::Url("https://127.0.0.1:9443/".into()),
        b"-----BEGIN CERTIFICATE-----\n".to_vec(),
    )
}

// ---------------------------------------------------------------------------------------------
// The objects

#[test]
fn every_webhook_fails_closed_has_no_side_effects_and_a_small_timeout() {
    let r = registration();
    let v = r.validating();
    let m = r.mutating();
    assert_eq!(v.metadata.name.as_deref(), Some("holdfast"));
    assert_eq!(m.metadata.name.as_deref(), Some("holdfast"));
    let selector = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "NotIn".into(),
            values: Some(vec!["kube-system".into(), "holdfast-system".into()]),
        }]),
        match_labels: None,
    };
    let vs = v.webhooks.unwrap();
    assert_eq!(
        vs.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(),
        [SNAPSHOTS_WEBHOOK, JOBS_VALIDATING_WEBHOOK]
    );
    for w in &vs {
        assert_eq!(w.admission_review_versions, ["v1"]);
        assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(w.side_effects, "None");
        assert_eq!(w.timeout_seconds, Some(5));
        assert_eq!(w.match_policy.as_deref(), Some("Equivalent"));
        assert_eq!(w.namespace_selector.as_ref(), Some(&selector));
        assert_eq!(
            w.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/validate")
        );
        assert_eq!(
            w.client_config.ca_bundle.as_ref().unwrap().0,
            b"-----BEGIN CERTIFICATE-----\n"
        );
        assert_eq!(w.match_conditions.as_ref().unwrap().len(), 1);
    }
    let ms = m.webhooks.unwrap();
    assert_eq!(ms.len(), 1);
    let w = &ms[0];
    assert_eq!(w.name, JOBS_MUTATING_WEBHOOK);
    assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(w.side_effects, "None");
    assert_eq!(w.timeout_seconds, Some(5));
    assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
    assert_eq!(w.namespace_selector.as_ref(), Some(&selector));
    assert_eq!(
        w.client_config.url.as_deref(),
        Some("https://127.0.0.1:9443/mutate")
    );
}

fn rules_of(rules: &[RuleWithOperations]) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    rules
        .iter()
        .map(|r| {
            assert_eq!(r.scope.as_deref(), Some("Namespaced"));
            (
                r.api_groups.clone().unwrap().join(","),
                r.resources.clone().unwrap().join(","),
                r.api_versions.clone().unwrap(),
                r.operations.clone().unwrap(),
            )
        })
        .collect()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

#[test]
fn rules_cover_the_documented_resources_and_operations() {
    let r = registration();
    let v = r.validating().webhooks.unwrap();
    assert_eq!(
        rules_of(v[0].rules.as_ref().unwrap()),
        [(
            "".into(),
            "configmaps".into(),
            s(&["v1"]),
            s(&["CREATE", "UPDATE", "DELETE"])
        )]
    );
    assert_eq!(
        rules_of(v[1].rules.as_ref().unwrap()),
        [
            (
                "trainer.kubeflow.org".into(),
                "trainjobs".into(),
                s(&["*"]),
                s(&["CREATE", "UPDATE"])
            ),
            (
                "kueue.x-k8s.io".into(),
                "workloads".into(),
                s(&["*"]),
                s(&["CREATE", "UPDATE"])
            ),
        ]
    );
    let m = r.mutating().webhooks.unwrap();
    assert_eq!(
        rules_of(m[0].rules.as_ref().unwrap()),
        [
            (
                "trainer.kubeflow.org".into(),
                "trainjobs".into(),
                s(&["*"]),
                s(&["CREATE", "UPDATE"])
            ),
            (
                "kueue.x-k8s.io".into(),
                "workloads".into(),
                s(&["*"]),
                s(&["UPDATE"])
            ),
        ]
    );
    let conditions = |w: &Option<Vec<MatchCondition>>| {
        w.as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.name.clone(), c.expression.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        conditions(&v[0].match_conditions),
        [("runtime-snapshot".into(), SNAPSHOT_CONDITION.into())]
    );
    assert_eq!(
        conditions(&v[1].match_conditions),
        [("holdfast-state".into(), JOBS_VALIDATING_CONDITION.into())]
    );
    assert_eq!(
        conditions(&m[0].match_conditions),
        [(
            "create-or-holdfast-state".into(),
            JOBS_MUTATING_CONDITION.into()
        )]
    );
}

#[test]
fn a_service_target_and_a_namespace_allow_list() {
    let r = Registration::new(
        "holdfast",
        Target::Service {
            namespace: "holdfast-system".into(),
            name: "holdfast-webhook".into(),
            port: None,
        },
        Vec::new(),
    )
    .with_namespaces(Namespaces::Only(vec!["team-a".into()]));
    let v = r.validating().webhooks.unwrap();
    let svc = v[0].client_config.service.as_ref().unwrap();
    assert_eq!(svc.namespace, "holdfast-system");
    assert_eq!(svc.name, "holdfast-webhook");
    assert_eq!(svc.path.as_deref(), Some("/validate"));
    assert_eq!(svc.port, Some(443));
    assert!(v[0].client_config.url.is_none());
    let m = r.mutating().webhooks.unwrap();
    assert_eq!(
        m[0].client_config.service.as_ref().unwrap().path.as_deref(),
        Some("/mutate")
    );
    let sel = v[0].namespace_selector.as_ref().unwrap();
    let req = &sel.match_expressions.as_ref().unwrap()[0];
    assert_eq!(req.operator, "In");
    assert_eq!(req.values.as_deref(), Some(&["team-a".to_owned()][..]));
}

/// The chart mirrors the module docs: every expression is quoted there verbatim.
#[test]
fn module_docs_quote_every_match_condition() {
    let source = include_str!("../registration.rs");
    let doc_lines: Vec<&str> = source
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .collect();
    for expr in [
        SNAPSHOT_CONDITION,
        JOBS_VALIDATING_CONDITION,
        JOBS_VALIDATING_CONDITION_KUEUE,
        JOBS_MUTATING_CONDITION,
    ] {
        assert!(doc_lines.contains(&expr), "not in the module docs: {expr}");
    }
}

// ---------------------------------------------------------------------------------------------
// The match conditions, mirrored in Rust, against the policy

fn meta_map<'a>(o: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    o.get("metadata")?.get(key)?.as_object()
}

/// [`SNAPSHOT_CONDITION`], read literally.
fn snapshot_condition(i: &AdmissionInput) -> bool {
    let side = |o: Option<&Value>| {
        o.is_some_and(|o| {
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.ends_with("-runtime-snapshot"))
                || meta_map(o, "labels")
                    .is_some_and(|l| l.contains_key("holdfast.dev/runtime-snapshot"))
        })
    };
    i.name.ends_with("-runtime-snapshot") || side(i.object.as_ref()) || side(i.old_object.as_ref())
}

/// [`JOBS_VALIDATING_CONDITION`] (plain) and [`JOBS_VALIDATING_CONDITION_KUEUE`], read
/// literally.
fn jobs_validating_condition(i: &AdmissionInput, mode: Mode) -> bool {
    let kueue_key =
        |k: &str| k == "kueue.x-k8s.io/queue-name" || k == "kueue.x-k8s.io/prebuilt-workload-name";
    let side = |o: Option<&Value>| {
        o.is_some_and(|o| {
            meta_map(o, "annotations").is_some_and(|a| {
                a.keys().any(|k| {
                    k.starts_with("holdfast.dev/") || k == "kueue.x-k8s.io/prebuilt-workload-name"
                })
            }) || meta_map(o, "labels").is_some_and(|l| {
                l.keys()
                    .any(|k| k.starts_with("holdfast.dev/") || kueue_key(k))
            }) || o
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| {
                    f.iter()
                        .any(|f| f.as_str().is_some_and(|f| f.starts_with("holdfast.dev/")))
                })
        })
    };
    let owners = |o: &Value| o.pointer("/metadata/ownerReferences").cloned();
    let trainjob_owned = |o: &Value| {
        owners(o)
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|r| r["kind"] == "TrainJob"))
    };
    let new_owner = i.object.as_ref().is_some_and(|n| {
        (trainjob_owned(n) || i.old_object.as_ref().is_some_and(trainjob_owned))
            && i.old_object.as_ref().is_none_or(|o| owners(o) != owners(n))
    });
    let uid_label = |o: &Value| {
        o.pointer("/metadata/labels/kueue.x-k8s.io~1job-uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let uid_relabelled = match (&i.object, &i.old_object) {
        (Some(n), Some(o)) => trainjob_owned(o) && uid_label(n) != uid_label(o),
        _ => false,
    };
    let suspend = |o: &Value| o.pointer("/spec/suspend") == Some(&json!(true));
    let flips = match (&i.object, &i.old_object) {
        (Some(n), Some(o)) if n.get("spec").is_some() && o.get("spec").is_some() => {
            suspend(n) != suspend(o)
        }
        _ => false,
    };
    side(i.object.as_ref())
        || side(i.old_object.as_ref())
        || (mode == Mode::Kueue && (new_owner || uid_relabelled || flips))
}

/// [`JOBS_MUTATING_CONDITION`], read literally.
fn jobs_mutating_condition(i: &AdmissionInput) -> bool {
    i.operation == Operation::Create
        || i.old_object.as_ref().is_some_and(|o| {
            meta_map(o, "annotations")
                .is_some_and(|a| a.keys().any(|k| k.starts_with("holdfast.dev/")))
        })
}

/// Whether a validating webhook of ours is sent `i` (rules and conditions).
fn reaches_validating(i: &AdmissionInput, mode: Mode) -> bool {
    if i.subresource.is_some() {
        return false;
    }
    match (&i.resource, i.operation) {
        (Resource::ConfigMap, Operation::Create | Operation::Update | Operation::Delete) => {
            snapshot_condition(i)
        }
        (Resource::TrainJob | Resource::Workload, Operation::Create | Operation::Update) => {
            jobs_validating_condition(i, mode)
        }
        _ => false,
    }
}

/// Whether the mutating webhook is sent `i`.
fn reaches_mutating(i: &AdmissionInput) -> bool {
    if i.subresource.is_some() {
        return false;
    }
    match (&i.resource, i.operation) {
        (Resource::TrainJob, Operation::Create | Operation::Update)
        | (Resource::Workload, Operation::Update) => jobs_mutating_condition(i),
        _ => false,
    }
}

fn object(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)], spec: Value) -> Value {
    let map = |kv: &[(&str, &str)]| -> Value {
        Value::Object(
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect(),
        )
    };
    let mut metadata = json!({"name": name, "namespace": "team-a"});
    if !annotations.is_empty() {
        metadata["annotations"] = map(annotations);
    }
    if !labels.is_empty() {
        metadata["labels"] = map(labels);
    }
    json!({"metadata": metadata, "spec": spec, "data": {"runtime": "kind: A\n"}})
}

/// A catalogue of objects: names, our annotations and labels, Kueue's queue label, and
/// `spec.suspend`/`spec.active` in every state that matters to the resource.
fn catalogue(resource: &Resource) -> Vec<Value> {
    type Pairs<'a> = &'a [&'a [(&'a str, &'a str)]];
    let (names, annotations, labels, specs): (&[&str], Pairs<'_>, Pairs<'_>, Vec<Value>) =
        match resource {
            Resource::ConfigMap => (
                &["settings", "mnist-runtime-snapshot", "mnist-runtime"],
                &[&[], &[("holdfast.dev/runtime-uid", "u")]],
                &[
                    &[],
                    &[("holdfast.dev/runtime-snapshot", "true")],
                    &[("holdfast.dev/runtime-snapshot", "false")],
                    &[("app", "x")],
                ],
                vec![json!({})],
            ),
            _ => (
                &["mnist"],
                &[
                    &[],
                    &[
                        ("holdfast.dev/hold-instance", "3"),
                        ("holdfast.dev/hold-reason", "x"),
                    ],
                    &[("holdfast.dev/opened", "true")],
                    &[("holdfast.dev/attempt", "2")],
                    &[("holdfast.dev/admitted-runtime-resource-version", "5")],
                    &[("holdfast.dev/runtime-uid", "u")],
                    &[("example.com/hold-instance", "1")],
                ],
                &[
                    &[],
                    &[("holdfast.dev/managed", "true")],
                    &[("holdfast.dev/managed", "false")],
                    &[("kueue.x-k8s.io/queue-name", "q")],
                    &[("kueue.x-k8s.io/queue-name", "")],
                    &[("app", "x")],
                ],
                vec![
                    json!({}),
                    json!({"suspend": true}),
                    json!({"suspend": false}),
                    json!({"active": false}),
                ],
            ),
        };
    let mut out = Vec::new();
    for name in names {
        for a in annotations {
            for l in labels {
                for spec in &specs {
                    out.push(object(name, a, l, spec.clone()));
                }
            }
        }
    }
    if *resource != Resource::ConfigMap {
        // Finalizers and owners, on a plain object and on a held one.
        let bases = [
            object("mnist", &[], &[], json!({"suspend": true})),
            object(
                "mnist",
                &[("holdfast.dev/hold-instance", "3")],
                &[],
                json!({"active": false}),
            ),
        ];
        for base in bases {
            for (key, value) in [
                ("finalizers", json!(["holdfast.dev/hold"])),
                ("finalizers", json!(["kueue.x-k8s.io/resource-in-use"])),
                (
                    "ownerReferences",
                    json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                        "name": "mnist", "uid": "u-1", "controller": true}]),
                ),
                (
                    "ownerReferences",
                    json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                        "name": "other", "uid": "u-2", "controller": true}]),
                ),
            ] {
                let mut o = base.clone();
                o["metadata"][key] = value;
                out.push(o);
            }
            let mut o = base.clone();
            o["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] = json!("w");
            out.push(o);
            let mut o = base;
            o["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"] = json!("w");
            out.push(o);
        }
    }
    out
}

fn input(
    resource: &Resource,
    op: Operation,
    user: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> AdmissionInput {
    let name = new
        .or(old)
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    AdmissionInput {
        operation: op,
        resource: resource.clone(),
        subresource: None,
        name,
        namespace: Some("team-a".into()),
        user: UserInfo::new(user),
        object: new.cloned(),
        old_object: old.cloned(),
        dry_run: false,
    }
}

/// Runs `i` as the apiserver would: the mutating webhook if it is sent the request, then the
/// validating one on the mutated object. Fails if the policy would refuse or patch a request
/// the configuration does not send.
fn check(i: &AdmissionInput, mode: Mode, failures: &mut Vec<String>) {
    let who = who();
    let mut post = i.clone();
    let patch = mutate(i, &who, mode, Some("77"));
    if !patch.is_empty() {
        if !reaches_mutating(i) {
            failures.push(format!("patch {patch:?} but not sent to /mutate: {i:?}"));
            return;
        }
        let mut o = i.object.clone().unwrap();
        json_patch::patch(&mut o, &patch).unwrap();
        post.object = Some(o);
    }
    let verdict = validate(&post, &who, mode);
    if !verdict.is_allowed() && !reaches_validating(&post, mode) {
        failures.push(format!(
            "[{mode}] refused ({verdict:?}) but not sent to /validate: {post:?}"
        ));
    }
}

#[test]
fn match_conditions_never_hide_a_request_the_policy_refuses_or_patches() {
    let mut failures = Vec::new();
    let mut checked = 0usize;
    for resource in [Resource::ConfigMap, Resource::TrainJob, Resource::Workload] {
        let objects = catalogue(&resource);
        for mode in [Mode::Plain, Mode::Kueue] {
            let users: &[&str] = match resource {
                Resource::ConfigMap => &USERS,
                _ => &JOB_USERS,
            };
            for &user in users {
                for o in &objects {
                    check(
                        &input(&resource, Operation::Create, user, None, Some(o)),
                        mode,
                        &mut failures,
                    );
                    check(
                        &input(&resource, Operation::Delete, user, Some(o), None),
                        mode,
                        &mut failures,
                    );
                    checked += 2;
                    if resource != Resource::ConfigMap {
                        // Their only subresource; ConfigMaps have none.
                        let mut status = input(&resource, Operation::Update, user, Some(o), None);
                        status.object = Some(object("mnist", &[], &[], json!({"suspend": false})));
                        status.subresource = Some("status".into());
                        check(&status, mode, &mut failures);
                        checked += 1;
                    }
                }
                for o in &objects {
                    for n in &objects {
                        check(
                            &input(&resource, Operation::Update, user, Some(o), Some(n)),
                            mode,
                            &mut failures,
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 400_000, "only {checked} requests checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} requests slip past the match conditions, e.g.:\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn unrelated_objects_never_reach_the_webhook() {
    let cm = object("settings", &[], &[("app", "x")], json!({}));
    for op in [Operation::Create, Operation::Update, Operation::Delete] {
        let (old, new) = match op {
            Operation::Create => (None, Some(&cm)),
            Operation::Delete => (Some(&cm), None),
            _ => (Some(&cm), Some(&cm)),
        };
        for mode in [Mode::Plain, Mode::Kueue] {
            assert!(!reaches_validating(
                &input(&Resource::ConfigMap, op, "alice", old, new),
                mode
            ));
        }
    }
    let tj = object(
        "mnist",
        &[("team", "a")],
        &[("app", "x")],
        json!({"suspend": true}),
    );
    let upd = input(
        &Resource::TrainJob,
        Operation::Update,
        "alice",
        Some(&tj),
        Some(&tj),
    );
    for mode in [Mode::Plain, Mode::Kueue] {
        assert!(!reaches_validating(&upd, mode) && !reaches_mutating(&upd));
    }
    // Plain mode: a suspend flip of an unrelated TrainJob never needs the webhook.
    let flip = input(
        &Resource::TrainJob,
        Operation::Update,
        "alice",
        Some(&tj),
        Some(&object(
            "mnist",
            &[("team", "a")],
            &[("app", "x")],
            json!({"suspend": false}),
        )),
    );
    assert!(!reaches_validating(&flip, Mode::Plain));
    assert!(
        reaches_validating(&flip, Mode::Kueue),
        "Kueue's, whatever the labels"
    );
}
