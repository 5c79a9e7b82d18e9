#![allow(clippy::unwrap_used)]

use super::*;
use crate::policy::testkit::*;
use serde_json::json;

fn review_json() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "requestKind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "name": "mnist",
            "namespace": "team-a",
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "uid": "1", "groups": ["system:authenticated"]},
            "object": tj(&[], &[], Some(true)),
            "oldObject": tj(&[("holdfast.dev/hold-instance", "3")], &[], Some(true)),
            "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
        }
    })
}

fn decode(v: &Value) -> Result<(String, AdmissionInput), DecodeError> {
    decode_review(&serde_json::to_vec(v).unwrap())
}

fn problem(v: &Value) -> DecodeError {
    decode(v).unwrap_err()
}

#[test]
fn decodes_an_admission_review() {
    let (uid, input) = decode(&review_json()).unwrap();
    assert_eq!(uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(input.operation, Operation::Update);
    assert_eq!(input.resource, Resource::TrainJob);
    assert_eq!(input.subresource, None);
    assert_eq!(input.name, "mnist");
    assert_eq!(input.namespace.as_deref(), Some("team-a"));
    assert_eq!(input.user.username, "alice");
    assert_eq!(input.user.groups, vec!["system:authenticated".to_owned()]);
    assert_eq!(input.object, Some(prune_object(&tj(&[], &[], Some(true)))));
    assert!(input.old_object.is_some());
    assert!(input.dry_run);
}

#[test]
fn decodes_the_minimal_delete_of_a_configmap() {
    let v = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "mnist-runtime-snapshot", "namespace": "", "operation": "DELETE",
            "userInfo": {"username": GC}, "object": null, "oldObject": cm("mnist-runtime-snapshot", &[]),
            "subResource": ""
        }
    });
    let (_, input) = decode(&v).unwrap();
    assert_eq!(input.resource, Resource::ConfigMap);
    assert_eq!(input.operation, Operation::Delete);
    assert_eq!(input.object, None);
    assert_eq!(input.namespace, None);
    assert_eq!(input.subresource, None);
    assert!(!input.dry_run);
    assert!(input.user.groups.is_empty());
}

#[test]
fn decodes_subresources_and_other_resources() {
    let mut v = review_json();
    v["request"]["subResource"] = json!("status");
    v["request"]["resource"] =
        json!({"group": "kueue.x-k8s.io", "version": "v1beta1", "resource": "workloads"});
    let (_, input) = decode(&v).unwrap();
    assert_eq!(input.subresource.as_deref(), Some("status"));
    assert_eq!(input.resource, Resource::Workload);
    v["request"]["resource"] = json!({"group": "apps", "version": "v1", "resource": "deployments"});
    assert_eq!(
        decode(&v).unwrap().1.resource,
        Resource::Other {
            group: "apps".into(),
            resource: "deployments".into()
        }
    );
}

#[test]
fn malformed_reviews_are_clear_errors() {
    assert!(matches!(
        decode_review(b"{").unwrap_err().problem,
        Problem::NotJson(_)
    ));
    assert!(matches!(
        decode_review(b"").unwrap_err().problem,
        Problem::NotJson(_)
    ));
    assert_eq!(
        decode_review(b"[1]").unwrap_err().problem,
        Problem::NotAnObject("an array")
    );

    let mut v = review_json();
    v["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let e = problem(&v);
    assert_eq!(
        e.to_string(),
        "malformed AdmissionReview: apiVersion is \"admission.k8s.io/v1beta1\", expected \"admission.k8s.io/v1\""
    );
    assert_eq!(e.uid, None);

    let mut v = review_json();
    v.as_object_mut().unwrap().remove("apiVersion");
    assert_eq!(
        problem(&v).problem,
        Problem::WrongApiVersion("missing".into())
    );

    let mut v = review_json();
    v["kind"] = json!("Pod");
    assert_eq!(problem(&v).problem, Problem::WrongKind("\"Pod\"".into()));

    let mut v = review_json();
    v.as_object_mut().unwrap().remove("request");
    assert_eq!(problem(&v).problem, Problem::MissingRequest);

    let mut v = review_json();
    v["request"] = json!(null);
    assert_eq!(problem(&v).problem, Problem::MissingRequest);

    for uid in [json!(null), json!(""), json!(5)] {
        let mut v = review_json();
        v["request"]["uid"] = uid;
        assert_eq!(problem(&v).problem, Problem::MissingUid);
    }

    let mut v = review_json();
    v["request"]["operation"] = json!("PATCH");
    let e = problem(&v);
    assert_eq!(e.problem, Problem::BadOperation("\"PATCH\"".into()));
    assert_eq!(
        e.uid.as_deref(),
        Some("705ab4f5-6393-11e8-b7cc-42010a800002")
    );

    let mut v = review_json();
    v["request"]["operation"] = json!("x".repeat(1000));
    assert!(problem(&v).to_string().len() < 200, "quotes are cut short");

    let bad_fields: [(&str, Value, &str); 8] = [
        ("resource", json!(null), "request.resource"),
        (
            "resource",
            json!({"group": ""}),
            "request.resource.resource",
        ),
        ("resource", json!("configmaps"), "request.resource"),
        ("userInfo", json!(null), "request.userInfo"),
        (
            "userInfo",
            json!({"username": 1}),
            "request.userInfo.username",
        ),
        (
            "userInfo",
            json!({"username": "a", "groups": [1]}),
            "request.userInfo.groups",
        ),
        ("dryRun", json!("yes"), "request.dryRun"),
        ("name", json!(["x"]), "request.name"),
    ];
    for (key, value, want) in bad_fields {
        let mut v = review_json();
        v["request"][key] = value;
        match problem(&v).problem {
            Problem::BadField { field, .. } => assert_eq!(field, want),
            other => panic!("{key}: {other:?}"),
        }
    }
}

#[test]
fn a_malformed_review_keeps_its_uid_when_it_could_be_read() {
    let mut v = review_json();
    v["request"]["operation"] = json!(1);
    assert_eq!(
        problem(&v).uid.as_deref(),
        Some("705ab4f5-6393-11e8-b7cc-42010a800002")
    );
    assert_eq!(decode_review(b"nope").unwrap_err().uid, None);
}

#[test]
fn decoded_review_runs_through_the_policy() {
    let (uid, input) = decode(&review_json()).unwrap();
    assert_eq!(uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    let m = crate::policy::mutate(&input, &who(), crate::mode::Mode::Plain, None);
    assert_eq!(m.patch.len(), 1, "the dropped hold-instance is restored");
    assert_eq!(m.restored, ["holdfast.dev/hold-instance"]);
}

// ---------------------------------------------------------------------------------------------
// The fast reader (`wire`) against the general one

/// The fast reader answers only what the general reader would answer.
fn same_as_general(text: &str) -> Result<(), TestCaseError> {
    if let Some(fast) = wire::decode(text) {
        prop_assert_eq!(Some(fast), decode_generally(text).ok(), "{}", text);
    }
    Ok(())
}

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        Just(json!(2.5)),
        prop::sample::select(vec![
            "",
            "UPDATE",
            "CREATE",
            "u",
            "configmaps",
            "a\"b",
            "\u{e9}"
        ])
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["uid", "group", "resource", "username", "x"]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// Where in a good review a value is put.
const PLACES: [&[&str]; 16] = [
    &["apiVersion"],
    &["kind"],
    &["request"],
    &["request", "uid"],
    &["request", "kind"],
    &["request", "resource"],
    &["request", "resource", "group"],
    &["request", "resource", "resource"],
    &["request", "subResource"],
    &["request", "name"],
    &["request", "namespace"],
    &["request", "operation"],
    &["request", "userInfo"],
    &["request", "userInfo", "groups"],
    &["request", "object"],
    &["request", "dryRun"],
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_fast_reader_agrees_with_the_general_one(
        place in prop::sample::select(PLACES.to_vec()),
        value in arb_json(),
        duplicate in any::<bool>(),
    ) {
        let mut review = review_json();
        let mut at = &mut review;
        for key in &place[..place.len() - 1] {
            at = &mut at[*key];
        }
        let last = place[place.len() - 1];
        at[last] = value.clone();
        let text = review.to_string();
        same_as_general(&text)?;
        if duplicate {
            // The same member twice: the last one counts, in both readers.
            let pair = format!("\"{last}\":{}", serde_json::to_string(&value).unwrap());
            let doubled = text.replacen(&pair, &format!("{pair},{pair}"), 1);
            same_as_general(&doubled)?;
            let swapped = text.replacen(&pair, &format!("\"{last}\":0,{pair}"), 1);
            same_as_general(&swapped)?;
        }
    }
}

#[test]
fn the_fast_reader_reads_a_good_review_and_gives_up_on_anything_odd() {
    let text = review_json().to_string();
    assert_eq!(wire::decode(&text), decode_generally(&text).ok());
    assert!(wire::decode(&text).is_some());
    // serde's derived structs would read these arrays as structs; the general reader refuses.
    let arrays = [
        r#"["admission.k8s.io/v1", "AdmissionReview", {"uid": "u"}]"#.to_owned(),
        text.replacen(r#""userInfo":{"#, r#""userInfo":["alice"],"x":{"#, 1),
    ];
    for odd in arrays {
        assert_eq!(wire::decode(&odd), None, "{odd}");
        assert!(decode_generally(&odd).is_err(), "{odd}");
    }
    // Escaped strings are unescaped alike.
    let escaped = text.replacen(r#""name":"mnist""#, r#""name":"mn\u0069st\n""#, 1);
    let fast = wire::decode(&escaped).unwrap();
    assert_eq!(fast.1.name, "mnist\n");
    assert_eq!(Some(fast), decode_generally(&escaped).ok());
}

/// The pruned request keeps what the cluster-backed checks read: a Kueue unsuspend decoded
/// from the wire still names the TrainJob's uid (pruning it away once let every such
/// unsuspend through unchecked).
#[test]
fn a_decoded_unsuspend_keeps_the_trainjob_uid_for_the_workload_check() {
    let mut v = review_json();
    v["request"]["userInfo"]["username"] = json!(KUEUE);
    v["request"]["object"] = tj(&[], &[], Some(false));
    v["request"]["object"]["metadata"]["uid"] = json!("u-7");
    v["request"]["oldObject"] = tj(&[], &[], Some(true));
    v["request"]["oldObject"]["metadata"]["uid"] = json!("u-7");
    let (_, input) = decode(&v).unwrap();
    let check = crate::policy::unsuspend_check(
        &input,
        &crate::policy::testkit::who(),
        crate::mode::Mode::Kueue,
    )
    .expect("an unsuspend is checked");
    assert_eq!(check.uid, "u-7");
}
