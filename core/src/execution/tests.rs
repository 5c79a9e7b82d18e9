use serde_json::{Value, json};

use super::*;

const JOB: &str = "mnist";

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true})
}

fn jobset(uid: &str, name: &str, trainjob: Option<&str>) -> Value {
    let owners: Vec<Value> = trainjob
        .map(|t| owner("trainer.kubeflow.org/v1alpha1", "TrainJob", t, "tj-uid"))
        .into_iter()
        .collect();
    json!({"metadata": {"name": name, "uid": uid, "ownerReferences": owners}})
}

fn job(uid: &str, jobset_uid: Option<&str>, label: Option<&str>) -> Value {
    let owners: Vec<Value> = jobset_uid
        .map(|u| owner("jobset.x-k8s.io/v1alpha2", "JobSet", JOB, u))
        .into_iter()
        .collect();
    let labels = label
        .map(|l| json!({JOBSET_NAME_LABEL: l}))
        .unwrap_or(json!({}));
    json!({"metadata": {"name": format!("{JOB}-node-0"), "uid": uid, "labels": labels, "ownerReferences": owners}})
}

fn pod(name: &str, job_uid: Option<&str>, labels: Value, phase: &str) -> Value {
    let owners: Vec<Value> = job_uid
        .map(|u| owner("batch/v1", "Job", "j", u))
        .into_iter()
        .collect();
    json!({"metadata": {"name": name, "labels": labels, "ownerReferences": owners},
        "spec": {"nodeName": "n1"}, "status": {"phase": phase}})
}

fn names(found: &[RemainingPod]) -> Vec<&str> {
    found.iter().map(|p| p.name.as_str()).collect()
}

/// The JobSet, Job and pod of TrainJob `mnist`'s execution as Trainer and JobSet make them,
/// and `pods` beside them.
fn answer(pods: &[Value]) -> Vec<String> {
    let jobs = [job("job-1", Some("js-1"), Some(JOB))];
    let jobsets = [jobset("js-1", JOB, Some(JOB))];
    let reads = Reads {
        pods,
        jobs: Some(&jobs),
        jobsets: Some(&jobsets),
    };
    remaining(JOB, reads)
        .expect("every read given")
        .into_iter()
        .map(|p| p.name)
        .collect()
}

#[test]
fn a_pod_owned_through_the_jobset_counts_whatever_its_labels() {
    let labelled = pod(
        "a",
        Some("job-1"),
        json!({JOBSET_NAME_LABEL: JOB}),
        "Running",
    );
    let relabelled = pod("b", Some("job-1"), json!({}), "Running");
    assert_eq!(answer(&[labelled, relabelled]), ["a", "b"]);
}

#[test]
fn a_decoy_carrying_only_the_jobset_label_does_not_count() {
    let decoy = pod("blocker", None, json!({JOBSET_NAME_LABEL: JOB}), "Running");
    assert!(answer(&[decoy]).is_empty());
}

#[test]
fn a_pod_of_another_job_carrying_the_label_does_not_count() {
    let theirs = job("job-2", None, None);
    let pods = [pod(
        "p",
        Some("job-2"),
        json!({JOBSET_NAME_LABEL: JOB}),
        "Running",
    )];
    let jobs = [theirs];
    let reads = Reads {
        pods: &pods,
        jobs: Some(&jobs),
        jobsets: Some(&[]),
    };
    assert!(remaining(JOB, reads).expect("answer").is_empty());
}

#[test]
fn a_pod_orphaned_from_its_job_counts_by_both_labels() {
    let orphan = pod(
        "o",
        None,
        json!({JOBSET_NAME_LABEL: JOB, JOB_CONTROLLER_UID_LABEL: "job-0"}),
        "Running",
    );
    assert_eq!(answer(&[orphan]), ["o"]);
}

#[test]
fn a_pod_whose_job_is_gone_counts_by_the_label() {
    let left = pod(
        "l",
        Some("job-deleted"),
        json!({JOBSET_NAME_LABEL: JOB}),
        "Running",
    );
    let unlabelled = pod("u", Some("job-deleted"), json!({}), "Running");
    assert_eq!(answer(&[left, unlabelled]), ["l"]);
}

#[test]
fn the_jobset_of_an_earlier_trainjob_of_the_same_name_counts() {
    // A TrainJob deleted and created again under the same name: the old JobSet's owner has
    // the old uid, and its pods are processes all the same.
    let pods = [pod("old", Some("job-old"), json!({}), "Running")];
    let jobs = [job("job-old", Some("js-old"), Some(JOB))];
    let mut old = jobset("js-old", JOB, Some(JOB));
    old["metadata"]["ownerReferences"][0]["uid"] = json!("an-earlier-uid");
    let jobsets = [old];
    let reads = Reads {
        pods: &pods,
        jobs: Some(&jobs),
        jobsets: Some(&jobsets),
    };
    assert_eq!(names(&remaining(JOB, reads).expect("answer")), ["old"]);
}

#[test]
fn a_jobset_of_another_trainjob_does_not_count() {
    let pods = [pod(
        "p",
        Some("job-x"),
        json!({JOBSET_NAME_LABEL: JOB}),
        "Running",
    )];
    let jobs = [job("job-x", Some("js-x"), Some(JOB))];
    let jobsets = [jobset("js-x", JOB, Some("another"))];
    let reads = Reads {
        pods: &pods,
        jobs: Some(&jobs),
        jobsets: Some(&jobsets),
    };
    assert!(remaining(JOB, reads).expect("answer").is_empty());
}

#[test]
fn finished_pods_do_not_count_and_deleting_ones_do() {
    let done = pod("done", Some("job-1"), json!({}), "Succeeded");
    let failed = pod("failed", Some("job-1"), json!({}), "Failed");
    let mut going = pod("going", Some("job-1"), json!({}), "Succeeded");
    going["metadata"]["deletionTimestamp"] = json!("2026-12-03T11:00:00Z");
    let pending = pod("pending", Some("job-1"), json!({}), "Pending");
    assert_eq!(
        answer(&[done, failed, going, pending]),
        ["going", "pending"]
    );
}

#[test]
fn only_the_reads_needed_are_asked_for() {
    // No pod owned by a Job and none labelled: the pods alone answer.
    let unrelated = json!({"metadata": {"name": "web"}, "status": {"phase": "Running"}});
    let reads = Reads {
        pods: std::slice::from_ref(&unrelated),
        ..Reads::default()
    };
    assert_eq!(remaining(JOB, reads), Ok(vec![]));
    // A pod owned by a Job: the Jobs; a Job owned by a JobSet: the JobSets.
    let owned = [pod("a", Some("job-1"), json!({}), "Running")];
    let reads = Reads {
        pods: &owned,
        ..Reads::default()
    };
    assert_eq!(remaining(JOB, reads), Err(Need::Jobs));
    let jobs = [job("job-1", Some("js-1"), Some(JOB))];
    let reads = Reads {
        pods: &owned,
        jobs: Some(&jobs),
        jobsets: None,
    };
    assert_eq!(remaining(JOB, reads), Err(Need::JobSets));
}

#[test]
fn a_remaining_pod_names_its_node_and_why() {
    let mut going = pod("a", Some("job-1"), json!({}), "Running");
    going["metadata"]["deletionTimestamp"] = json!("2026-12-03T11:00:00Z");
    let mut unscheduled = pod("b", Some("job-1"), json!({}), "Pending");
    unscheduled["spec"] = json!({});
    let jobs = [job("job-1", Some("js-1"), Some(JOB))];
    let jobsets = [jobset("js-1", JOB, Some(JOB))];
    let pods = [going, unscheduled];
    let found = remaining(
        JOB,
        Reads {
            pods: &pods,
            jobs: Some(&jobs),
            jobsets: Some(&jobsets),
        },
    )
    .expect("answer");
    assert_eq!(
        found,
        vec![
            RemainingPod {
                name: "a".into(),
                node: Some("n1".into()),
                node_state: None,
                why: Why::Terminating
            },
            RemainingPod {
                name: "b".into(),
                node: None,
                node_state: None,
                why: Why::NotFinished
            },
        ]
    );
}

#[test]
fn pods_remain_until_gone_or_finished() {
    let cases = [
        (
            json!({"status": {"phase": "Running"}}),
            Some(Why::NotFinished),
        ),
        (
            json!({"status": {"phase": "Pending"}}),
            Some(Why::NotFinished),
        ),
        (json!({}), Some(Why::NotFinished)),
        (
            json!({"status": {"phase": "Unknown"}}),
            Some(Why::NotFinished),
        ),
        (json!({"status": {"phase": "Succeeded"}}), None),
        (json!({"status": {"phase": "Failed"}}), None),
        (
            json!({"metadata": {"deletionTimestamp": "2026-11-29T11:00:00Z"}, "status": {"phase": "Succeeded"}}),
            Some(Why::Terminating),
        ),
        (
            json!({"metadata": {"deletionTimestamp": null}, "status": {"phase": "Failed"}}),
            None,
        ),
    ];
    for (pod, want) in cases {
        assert_eq!(pod_remains(&pod), want, "{pod}");
    }
}

#[test]
fn pod_lists_name_the_first_five_and_count_the_rest() {
    let names: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
    assert_eq!(listed(&names[..2]), "p0, p1");
    assert_eq!(listed(&names), "p0, p1, p2, p3, p4 and 2 more");
    assert_eq!(listed::<String>(&[]), "");
}

#[test]
fn gathering_asks_for_each_list_once_in_turn() {
    let mut gathered = Gathered::default();
    assert_eq!(gathered.answer(JOB), Err(Need::Pods));
    gathered.give(
        Need::Pods,
        vec![pod("a", Some("job-1"), json!({}), "Running")],
    );
    assert_eq!(gathered.answer(JOB), Err(Need::Jobs));
    gathered.give(Need::Jobs, vec![job("job-1", Some("js-1"), Some(JOB))]);
    assert_eq!(gathered.answer(JOB), Err(Need::JobSets));
    gathered.give(Need::JobSets, vec![jobset("js-1", JOB, Some(JOB))]);
    assert_eq!(names(&gathered.answer(JOB).expect("answer")), ["a"]);
}

#[test]
fn a_node_is_ready_only_while_its_ready_condition_is_true() {
    let node = |status: &str| {
        json!({"status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": status}]}})
    };
    assert_eq!(NodeState::of(Some(&node("True"))), NodeState::Ready);
    assert_eq!(NodeState::of(Some(&node("Unknown"))), NodeState::NotReady);
    assert_eq!(NodeState::of(Some(&node("False"))), NodeState::NotReady);
    assert_eq!(NodeState::of(Some(&json!({}))), NodeState::NotReady);
    assert_eq!(NodeState::of(None), NodeState::Gone);
}

#[test]
fn remaining_pods_serialise_as_status_shows_them() {
    let pod = RemainingPod {
        name: "mnist-node-0-0".into(),
        node: Some("n1".into()),
        node_state: Some(NodeState::NotReady),
        why: Why::Terminating,
    };
    assert_eq!(
        serde_json::to_value(&pod).expect("json"),
        json!({"name": "mnist-node-0-0", "node": "n1", "nodeState": "notReady", "why": "terminating"})
    );
}

#[test]
fn only_a_trainjobs_pods_are_of_an_execution() {
    let p = pod("a", Some("job-1"), json!({}), "Running");
    let j = job("job-1", Some("js-1"), Some(JOB));
    let trainers = jobset("js-1", JOB, Some(JOB));
    assert!(of_an_execution(&p, Some(&j), Some(&trainers)));
    // A JobSet nobody's TrainJob owns: not a TrainJob's.
    let users = jobset("js-1", JOB, None);
    assert!(!of_an_execution(&p, Some(&j), Some(&users)));
    // A pod no Job owns is no execution's, whatever its labels.
    let bare = pod("b", None, json!({JOBSET_NAME_LABEL: JOB}), "Running");
    assert!(!of_an_execution(&bare, None, None));
    // Owners not (yet) seen: the labels decide, as for leftovers.
    let labelled = pod(
        "c",
        Some("job-9"),
        json!({JOBSET_NAME_LABEL: JOB}),
        "Running",
    );
    assert!(of_an_execution(&labelled, None, None));
    assert!(!of_an_execution(&p, None, None));
    assert!(of_an_execution(&p, Some(&j), None));
    assert_eq!(controller_uid(&p, BATCH_GROUP, "Job"), Some("job-1"));
    assert_eq!(controller_uid(&j, JOBSET_GROUP, "JobSet"), Some("js-1"));
    assert_eq!(controller_uid(&j, BATCH_GROUP, "Job"), None);
}

#[test]
fn a_pod_carrying_the_execution_finalizer_counts_by_its_label_whatever_its_owners() {
    // An editor re-owns a running pod of the execution (or strips the Job controller's
    // label, so that its Job lets it go): it carries the finalizer, so its label decides.
    let mut reowned = pod("a", None, json!({JOBSET_NAME_LABEL: JOB}), "Running");
    reowned["metadata"]["finalizers"] = json!([finalizer::EXECUTION_FINALIZER]);
    reowned["metadata"]["ownerReferences"] = json!([owner("v1", "ConfigMap", "whatever", "cm-1")]);
    assert_eq!(answer(std::slice::from_ref(&reowned)), ["a"]);
    let mut theirs = reowned.clone();
    theirs["metadata"]["labels"] = json!({JOBSET_NAME_LABEL: "another"});
    assert!(answer(&[theirs]).is_empty());
}
