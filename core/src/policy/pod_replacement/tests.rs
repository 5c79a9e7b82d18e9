#![allow(clippy::unwrap_used)]

use super::{FAILED, Replacement, pod_replacement};
use crate::mode::Mode;
use crate::policy::testkit::*;
use crate::policy::{Operation, Resource, mutate, validate};
use serde_json::{Value, json};

/// A JobSet as Trainer applies it: owned by TrainJob `mnist` (controller), one replicated Job
/// per `(name, podReplacementPolicy)`.
fn jobset(jobs: &[(&str, Option<&str>)]) -> Value {
    owned_by(
        jobs,
        json!([{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist",
            "uid": "u-1", "controller": true, "blockOwnerDeletion": true
        }]),
    )
}

fn owned_by(jobs: &[(&str, Option<&str>)], owners: Value) -> Value {
    let replicated: Vec<Value> = jobs
        .iter()
        .map(|(name, policy)| {
            let mut spec = json!({"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "node", "image": "pytorch"}]}}});
            if let Some(p) = policy {
                spec["podReplacementPolicy"] = json!(p);
            }
            json!({"name": name, "replicas": 1, "template": {"spec": spec}})
        })
        .collect();
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "mnist", "namespace": "team-a", "ownerReferences": owners},
        "spec": {"replicatedJobs": replicated},
    })
}

fn decide(op: Operation, old: Option<&Value>, new: &Value) -> Replacement {
    pod_replacement(&input(Resource::JobSet, op, TRAINER, old, Some(new)))
}

fn create(new: &Value) -> Replacement {
    decide(Operation::Create, None, new)
}

fn update(old: &Value, new: &Value) -> Replacement {
    decide(Operation::Update, Some(old), new)
}

/// The policy of each replicated Job after the patch.
fn policies(v: &Value, r: &Replacement) -> Vec<Option<String>> {
    apply(v, &r.patch)["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            j.pointer("/template/spec/podReplacementPolicy")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

fn all_failed(n: usize) -> Vec<Option<String>> {
    vec![Some(FAILED.to_owned()); n]
}

#[test]
fn a_trainjobs_jobset_is_created_with_pod_replacement_policy_failed() {
    let js = jobset(&[("initializer", None), ("node", None)]);
    let r = create(&js);
    assert_eq!(r.patch.len(), 2, "{r:?}");
    assert_eq!(policies(&js, &r), all_failed(2));
    assert!(r.told.is_empty(), "a JobSet without the field is not told");
    let paths: Vec<String> = r.patch.iter().map(|p| p.path().to_string()).collect();
    assert_eq!(
        paths,
        [
            "/spec/replicatedJobs/0/template/spec/podReplacementPolicy",
            "/spec/replicatedJobs/1/template/spec/podReplacementPolicy",
        ]
    );
}

#[test]
fn a_runtime_asking_for_terminating_or_failed_is_overridden_and_told() {
    let js = jobset(&[("node", Some("TerminatingOrFailed")), ("launcher", None)]);
    let r = create(&js);
    assert_eq!(policies(&js, &r), all_failed(2));
    assert_eq!(r.told, ["node"]);
}

#[test]
fn a_jobset_created_with_failed_everywhere_gets_no_patch() {
    let js = jobset(&[("node", Some(FAILED)), ("launcher", Some(FAILED))]);
    assert_eq!(create(&js), Replacement::default());
}

#[test]
fn only_the_replicated_jobs_without_failed_are_patched() {
    let js = jobset(&[("launcher", Some(FAILED)), ("node", None)]);
    let r = create(&js);
    assert_eq!(r.patch.len(), 1, "{r:?}");
    assert_eq!(policies(&js, &r), all_failed(2));
}

#[test]
fn an_update_that_drops_the_policy_gets_it_back() {
    let stored = jobset(&[("initializer", Some(FAILED)), ("node", Some(FAILED))]);
    // Trainer's next apply (or a whole-object replace) without the field it never set.
    let new = jobset(&[("initializer", None), ("node", None)]);
    let r = update(&stored, &new);
    assert_eq!(policies(&new, &r), all_failed(2));
    assert_eq!(r.told, ["initializer", "node"]);
}

#[test]
fn an_update_that_changes_the_policy_gets_failed_back() {
    let stored = jobset(&[("node", Some(FAILED))]);
    let new = jobset(&[("node", Some("TerminatingOrFailed"))]);
    let r = update(&stored, &new);
    assert_eq!(policies(&new, &r), all_failed(1));
    assert_eq!(r.told, ["node"]);
}

#[test]
fn replicated_jobs_are_matched_by_name_not_position() {
    let stored = jobset(&[("launcher", None), ("node", Some(FAILED))]);
    let new = jobset(&[("node", None), ("launcher", None)]);
    let r = update(&stored, &new);
    assert_eq!(
        policies(&new, &r),
        [Some(FAILED.to_owned()), None],
        "only node had Failed"
    );
}

#[test]
fn an_update_that_keeps_the_policy_gets_no_patch() {
    let stored = jobset(&[("node", Some(FAILED))]);
    assert_eq!(update(&stored, &stored.clone()), Replacement::default());
}

#[test]
fn a_jobset_created_before_holdfast_is_left_alone_on_update() {
    let stored = jobset(&[("node", None), ("launcher", Some("TerminatingOrFailed"))]);
    for new in [
        stored.clone(),
        jobset(&[("node", None), ("launcher", None)]),
        with(&stored, |v| v["spec"]["suspend"] = json!(true)),
    ] {
        assert_eq!(update(&stored, &new), Replacement::default(), "{new}");
    }
}

#[test]
fn a_replicated_job_new_at_an_update_is_not_given_the_policy() {
    // JobSet refuses the new replicated Job anyway; holdfast adds nothing to the change.
    let stored = jobset(&[("node", Some(FAILED))]);
    let new = jobset(&[("node", Some(FAILED)), ("extra", None)]);
    assert_eq!(update(&stored, &new), Replacement::default());
}

#[test]
fn a_jobset_not_owned_by_a_trainjob_is_untouched() {
    let jobs = [("node", None)];
    let not_controller = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob", "name": "mnist", "uid": "u-1"}]);
    let other_controller = json!([{"apiVersion": "apps/v1", "kind": "Deployment",
        "name": "d", "uid": "u-2", "controller": true}]);
    let other_group = json!([{"apiVersion": "example.com/v1", "kind": "TrainJob",
        "name": "mnist", "uid": "u-3", "controller": true}]);
    for owners in [
        json!(null),
        json!([]),
        not_controller,
        other_controller,
        other_group,
    ] {
        let js = owned_by(&jobs, owners.clone());
        assert_eq!(create(&js), Replacement::default(), "{owners}");
        let stored = owned_by(&[("node", Some(FAILED))], owners.clone());
        assert_eq!(update(&stored, &js), Replacement::default(), "{owners}");
    }
    let mut js = jobset(&jobs);
    js["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    assert_eq!(create(&js), Replacement::default());
}

#[test]
fn bad_input_gets_no_patch_and_no_panic() {
    let owners = jobset(&[])["metadata"]["ownerReferences"].clone();
    let with_jobs = |replicated: Value| {
        json!({"metadata": {"name": "mnist", "ownerReferences": owners},
            "spec": {"replicatedJobs": replicated}})
    };
    let cases = [
        json!(null),
        json!("a string"),
        json!({}),
        json!({"metadata": {"ownerReferences": owners}}),
        json!({"metadata": {"ownerReferences": owners}, "spec": 1}),
        with_jobs(json!(null)),
        with_jobs(json!({"node": {}})),
        with_jobs(json!([1, "x", null, {}])),
        with_jobs(json!([{"name": "node"}])),
        with_jobs(json!([{"name": "node", "template": null}])),
        with_jobs(json!([{"name": "node", "template": []}])),
        with_jobs(json!([{"name": "node", "template": {}}])),
        with_jobs(json!([{"name": "node", "template": {"spec": "x"}}])),
    ];
    for new in &cases {
        assert_eq!(create(new), Replacement::default(), "{new}");
        for old in &cases {
            assert_eq!(update(old, new), Replacement::default(), "{old} -> {new}");
        }
    }
    // A replicated Job without a name at an update cannot be matched: left alone.
    let stored = jobset(&[("node", Some(FAILED))]);
    let nameless = with_jobs(json!([{"template": {"spec": {}}}]));
    assert_eq!(update(&stored, &nameless), Replacement::default());
    // A good replicated Job beside bad ones is still patched.
    let mixed = with_jobs(json!([1, {"name": "node", "template": {"spec": {}}}]));
    let r = create(&mixed);
    assert_eq!(r.patch.len(), 1);
    assert_eq!(
        apply(&mixed, &r.patch)
            .pointer("/spec/replicatedJobs/1/template/spec/podReplacementPolicy"),
        Some(&json!(FAILED))
    );
}

#[test]
fn mutate_patches_a_trainjobs_jobset_for_everyone_in_both_modes_and_validate_allows_it() {
    let js = jobset(&[("node", Some("TerminatingOrFailed"))]);
    for mode in [Mode::Plain, Mode::Kueue] {
        for user in EVERYONE {
            let i = input(Resource::JobSet, Operation::Create, user, None, Some(&js));
            let m = mutate(&i, &who(), mode, None);
            assert_eq!(m.patch.len(), 1, "{user} {mode}");
            assert_eq!(m.replacement_policy_kept, ["node"]);
            assert_eq!(m.warnings.len(), 1, "{m:?}");
            assert!(
                m.warnings[0].contains("podReplacementPolicy: Failed")
                    && m.warnings[0].contains("team-a/mnist"),
                "{m:?}"
            );
            assert!(validate(&i, &who(), mode).is_allowed());
        }
    }
}

#[test]
fn mutate_restores_the_policy_at_an_update_with_a_warning() {
    let stored = jobset(&[("node", Some(FAILED))]);
    let new = jobset(&[("node", None)]);
    let i = input(
        Resource::JobSet,
        Operation::Update,
        TRAINER,
        Some(&stored),
        Some(&new),
    );
    let m = mutate(&i, &who(), Mode::Plain, None);
    assert_eq!(
        policies(
            &new,
            &Replacement {
                patch: m.patch.clone(),
                told: vec![]
            }
        ),
        all_failed(1)
    );
    assert!(
        m.warnings[0].contains("kept podReplacementPolicy: Failed"),
        "{m:?}"
    );
}

#[test]
fn a_jobset_status_write_or_delete_gets_no_patch() {
    let js = jobset(&[("node", None)]);
    let mut status = input(
        Resource::JobSet,
        Operation::Update,
        TRAINER,
        Some(&js),
        Some(&js),
    );
    status.subresource = Some("status".to_owned());
    assert!(mutate(&status, &who(), Mode::Plain, None).is_empty());
    let delete = input(
        Resource::JobSet,
        Operation::Delete,
        TRAINER,
        Some(&js),
        None,
    );
    assert!(mutate(&delete, &who(), Mode::Plain, None).is_empty());
}

#[test]
fn the_decision_is_the_same_on_the_pruned_objects() {
    let js = jobset(&[("node", None)]);
    let pruned = crate::policy::request::prune_object(&js);
    assert_eq!(create(&pruned), create(&js));
    assert_eq!(create(&pruned).patch.len(), 1);
}
