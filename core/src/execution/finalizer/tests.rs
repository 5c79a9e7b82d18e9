use serde_json::{Value, json};

use super::*;

const CREATED: &str = "2026-12-03T10:00:00Z";

fn pod(node: Option<&str>, finalizer: bool, deleting: bool, containers: Value) -> Value {
    let mut p = json!({"metadata": {"name": "p", "creationTimestamp": CREATED, "finalizers": []},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Running", "containerStatuses": containers}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    if finalizer {
        p["metadata"]["finalizers"] = json!(["example.com/other", EXECUTION_FINALIZER]);
    }
    if deleting {
        p["metadata"]["deletionTimestamp"] = json!("2026-12-03T10:05:00Z");
    }
    p
}

fn running() -> Value {
    json!([{"name": "a", "state": {"running": {}}}, {"name": "b", "state": {"running": {}}}])
}

fn ended() -> Value {
    json!([{"name": "a", "state": {"terminated": {"exitCode": 0}}},
        {"name": "b", "state": {"terminated": {"exitCode": 137}}}])
}

fn at(t: &str) -> Timestamp {
    t.parse().expect("time")
}

#[test]
fn a_bound_running_pod_of_an_execution_gets_the_finalizer() {
    let none = Fences::new();
    assert_eq!(
        step(&pod(Some("n1"), false, false, running()), true, &none),
        Step::Add
    );
    // Not an execution's, never bound, already being deleted, or finished: nothing to add.
    assert_eq!(
        step(&pod(Some("n1"), false, false, running()), false, &none),
        Step::Keep
    );
    assert_eq!(
        step(&pod(None, false, false, json!([])), true, &none),
        Step::Keep
    );
    assert_eq!(
        step(&pod(Some("n1"), false, true, running()), true, &none),
        Step::Keep
    );
    let mut done = pod(Some("n1"), false, false, ended());
    done["status"]["phase"] = json!("Succeeded");
    assert_eq!(step(&done, true, &none), Step::Keep);
}

#[test]
fn a_force_deleted_pod_whose_kubelet_never_confirmed_keeps_the_finalizer() {
    let deleted = pod(Some("n1"), true, true, running());
    assert_eq!(step(&deleted, true, &Fences::new()), Step::Keep);
    // Pod GC marks a pod of a deleted node Failed without any container ending.
    let mut gc = deleted.clone();
    gc["status"]["phase"] = json!("Failed");
    assert_eq!(step(&gc, true, &Fences::new()), Step::Keep);
    // No status at all: the kubelet may have started the containers before it froze.
    let silent = pod(Some("n1"), true, true, json!([]));
    assert_eq!(step(&silent, true, &Fences::new()), Step::Keep);
}

#[test]
fn the_kubelets_report_that_every_container_ended_releases_the_finalizer() {
    let ended = pod(Some("n1"), true, true, ended());
    assert_eq!(
        step(&ended, true, &Fences::new()),
        Step::Remove(Gone::KubeletConfirmed)
    );
    // One container still running, or one with no status: not yet.
    let half = pod(
        Some("n1"),
        true,
        true,
        json!([{"name": "a", "state": {"terminated": {}}}, {"name": "b", "state": {"running": {}}}]),
    );
    assert_eq!(step(&half, true, &Fences::new()), Step::Keep);
    let one = pod(
        Some("n1"),
        true,
        true,
        json!([{"name": "a", "state": {"terminated": {}}}]),
    );
    assert_eq!(step(&one, true, &Fences::new()), Step::Keep);
}

#[test]
fn a_running_init_or_ephemeral_container_keeps_the_finalizer() {
    let mut p = pod(Some("n1"), true, true, ended());
    p["status"]["initContainerStatuses"] = json!([{"name": "i", "state": {"running": {}}}]);
    assert_eq!(step(&p, true, &Fences::new()), Step::Keep);
    p["status"]["initContainerStatuses"] = json!([{"name": "i", "state": {"waiting": {}}}]);
    assert_eq!(
        step(&p, true, &Fences::new()),
        Step::Remove(Gone::KubeletConfirmed),
        "an init container that never started ran nothing"
    );
    p["status"]["ephemeralContainerStatuses"] =
        json!([{"name": "e", "state": {"waiting": {}}, "lastState": {"running": {}}}]);
    assert_eq!(step(&p, true, &Fences::new()), Step::Keep);
}

#[test]
fn a_fence_of_its_node_after_the_pod_was_created_releases_the_finalizer() {
    let deleted = pod(Some("n1"), true, true, running());
    let after: Fences = [("n1".to_owned(), at("2026-12-03T10:10:00Z"))].into();
    assert_eq!(step(&deleted, true, &after), Step::Remove(Gone::Fenced));
    // A fence older than the pod attests nothing of it; another node's fence neither.
    let before: Fences = [("n1".to_owned(), at("2026-12-03T09:00:00Z"))].into();
    assert_eq!(step(&deleted, true, &before), Step::Keep);
    let elsewhere: Fences = [("n2".to_owned(), at("2026-12-03T10:10:00Z"))].into();
    assert_eq!(step(&deleted, true, &elsewhere), Step::Keep);
}

#[test]
fn a_fence_does_not_release_a_pod_that_is_not_being_deleted() {
    let live = pod(Some("n1"), true, false, running());
    let fenced: Fences = [("n1".to_owned(), at("2026-12-03T10:10:00Z"))].into();
    assert_eq!(step(&live, true, &fenced), Step::Keep);
}

#[test]
fn fences_are_read_from_the_configmaps_data_and_an_unreadable_one_is_none() {
    let data = [
        ("n1".to_owned(), "2026-12-03T10:10:00Z".to_owned()),
        ("n2".to_owned(), "yesterday".to_owned()),
    ]
    .into();
    let now = at("2026-12-03T11:00:00Z");
    let (fences, unreadable) = read_fences(Some(&data), now);
    assert_eq!(fences.get("n1"), Some(&at("2026-12-03T10:10:00Z")));
    assert!(!fences.contains_key("n2"));
    assert_eq!(unreadable, ["n2"]);
    assert_eq!(read_fences(None, now).0, Fences::new());
}

#[test]
fn a_fence_or_a_pod_time_not_in_rfc3339_form_is_not_read() {
    // Forms jiff's own parser takes (RFC 9557's zone annotation, ISO 8601's basic offset):
    // read through the one strict reader, they are no fence and no creation time.
    let loose = "2026-12-03T10:10:00Z[UTC]";
    let data = [
        ("n1".to_owned(), loose.to_owned()),
        ("n2".to_owned(), "2026-12-03T11:10:00+0100".to_owned()),
    ]
    .into();
    let (fences, unreadable) = read_fences(Some(&data), at("2026-12-03T11:00:00Z"));
    assert_eq!(fences, Fences::new());
    assert_eq!(unreadable, ["n1", "n2"]);

    let mut deleted = pod(Some("n1"), true, true, running());
    deleted["metadata"]["creationTimestamp"] = json!(loose);
    let fenced: Fences = [("n1".to_owned(), at("2026-12-03T10:10:00Z"))].into();
    assert!(!super::fenced(&deleted, &fenced));
}

fn phase_by(pod: &mut Value, phase: &str, manager: &str) {
    pod["status"]["phase"] = json!(phase);
    pod["metadata"]["managedFields"] = json!([
        {"manager": "kube-scheduler", "operation": "Update", "subresource": "status",
         "fieldsV1": {"f:status": {"f:conditions": {}}}},
        {"manager": manager, "operation": "Update", "subresource": "status",
         "fieldsV1": {"f:status": {"f:phase": {}, "f:containerStatuses": {}}}}]);
}

#[test]
fn a_pod_the_kubelet_made_terminal_is_confirmed_even_if_it_never_got_past_its_init_containers() {
    // Deleted while its init container was still waiting for an image: the kubelet's last
    // status leaves the regular containers waiting (PodInitializing) and makes it Failed.
    let waiting = json!([{"name": "a", "state": {"waiting": {"reason": "PodInitializing"}}},
        {"name": "b", "state": {"waiting": {"reason": "PodInitializing"}}}]);
    let mut p = pod(Some("n1"), true, true, waiting);
    p["status"]["initContainerStatuses"] =
        json!([{"name": "i", "state": {"waiting": {"reason": "ErrImagePull"}}}]);
    assert_eq!(
        step(&p, true, &Fences::new()),
        Step::Keep,
        "not terminal yet"
    );
    phase_by(&mut p, "Failed", KUBELET_MANAGER);
    assert_eq!(
        step(&p, true, &Fences::new()),
        Step::Remove(Gone::KubeletConfirmed)
    );
}

#[test]
fn pod_gcs_failed_phase_is_no_confirmation() {
    let mut p = pod(Some("n1"), true, true, running());
    phase_by(&mut p, "Failed", "kube-controller-manager");
    assert_eq!(step(&p, true, &Fences::new()), Step::Keep);
    // Nor is the kubelet's terminal phase while a container is reported running.
    phase_by(&mut p, "Failed", KUBELET_MANAGER);
    assert_eq!(step(&p, true, &Fences::new()), Step::Keep);
}

#[test]
fn terminated_containers_that_may_restart_are_no_confirmation_without_a_terminal_phase() {
    let mut p = pod(Some("n1"), true, true, ended());
    p["spec"]["restartPolicy"] = json!("OnFailure");
    assert_eq!(step(&p, true, &Fences::new()), Step::Keep);
    phase_by(&mut p, "Failed", KUBELET_MANAGER);
    assert_eq!(
        step(&p, true, &Fences::new()),
        Step::Remove(Gone::KubeletConfirmed)
    );
}

#[test]
fn a_deleted_pod_never_bound_to_a_node_loses_the_finalizer() {
    let p = pod(None, true, true, json!([]));
    assert_eq!(
        step(&p, false, &Fences::new()),
        Step::Remove(Gone::NeverBound)
    );
}

#[test]
fn a_fence_does_not_cover_a_container_started_after_it() {
    let restarted = json!([{"name": "a", "state": {"running": {"startedAt": "2026-12-03T10:20:00Z"}}},
        {"name": "b", "state": {"terminated": {"startedAt": "2026-12-03T10:01:00Z"}}}]);
    let mut p = pod(Some("n1"), true, true, restarted);
    let fence: Fences = [("n1".to_owned(), at("2026-12-03T10:10:00Z"))].into();
    assert_eq!(step(&p, true, &fence), Step::Keep);
    p["status"]["containerStatuses"][0]["state"] =
        json!({"running": {"startedAt": "2026-12-03T10:05:00Z"}});
    assert_eq!(step(&p, true, &fence), Step::Remove(Gone::Fenced));
}

#[test]
fn a_fence_dated_in_the_future_is_no_fence() {
    let now = at("2026-12-03T11:00:00Z");
    let data = [
        ("n1".to_owned(), "2026-12-03T11:00:30Z".to_owned()),
        ("n2".to_owned(), "2099-01-01T00:00:00Z".to_owned()),
    ]
    .into();
    let (fences, unreadable) = read_fences(Some(&data), now);
    assert!(fences.contains_key("n1"), "within the clock skew allowed");
    assert!(!fences.contains_key("n2"));
    assert_eq!(unreadable, ["n2"]);
}
