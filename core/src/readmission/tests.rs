use super::*;
use crate::{
    hold::{HoldRecord, apply},
    mode::Mode,
    names::{ANN_OPENED, HOLD_FINALIZER},
};
use serde_json::json;

const CHECK: &str = "holdfast-readmission";

fn ours() -> BTreeSet<String> {
    [CHECK.to_owned()].into()
}

fn trainjob() -> TrainJobView {
    TrainJobView {
        uid: "tj-uid".into(),
        resource_version: "10".into(),
        managed: true,
        opened: true,
        attempt: Some(1),
        ended: false,
        terminating: false,
    }
}

fn check(state: &str, message: &str) -> CheckState {
    CheckState {
        name: CHECK.into(),
        state: state.into(),
        message: message.into(),
    }
}

/// A Workload with quota reserved whose check is Pending.
fn pending() -> WorkloadView {
    WorkloadView {
        name: "trainjob-job-1".into(),
        uid: "wl-1".into(),
        resource_version: "20".into(),
        created: "2026-11-29T11:00:00Z".into(),
        terminating: false,
        hold_finalizer: false,
        hold: HoldState::Absent,
        transfer_to: None,
        active: true,
        quota_reserved: true,
        admitted: false,
        finished: false,
        checks: vec![check(
            CHECK_PENDING,
            "Reset to Pending after eviction. Previously: Ready",
        )],
    }
}

fn held(instance: u64) -> HoldState {
    HoldState::InForce(HoldRecord {
        instance,
        reason: Some("node lost".into()),
        placed_at: Some("2026-11-29T11:00:00Z".into()),
        holder: Some("system:serviceaccount:team-a:dispatch".into()),
    })
}

#[test]
fn a_claim_is_read_from_the_check_message() {
    let cases = [
        ("attempt=3", Some(3)),
        ("attempt=3: claimed; raising", Some(3)),
        ("attempt=18446744073709551615:", Some(u64::MAX)),
        ("attempt=", None),
        ("attempt=3x", None),
        ("attempt=-3", None),
        ("Attempt=3", None),
        (" attempt=3", None),
        ("Reset to Pending after eviction. Previously: Ready", None),
        ("", None),
    ];
    for (message, want) in cases {
        assert_eq!(claimed_attempt(message), want, "{message:?}");
    }
    for n in [0, 1, 41, u64::MAX] {
        assert_eq!(
            claimed_attempt(&check_message(Some(n), CLAIM_TEXT)),
            Some(n)
        );
    }
    assert_eq!(claimed_attempt(&check_message(None, READY_TEXT)), None);
}

#[test]
fn a_workload_is_read_as_kueue_writes_it() {
    let wl = json!({
        "metadata": {"name": "trainjob-job-3f2a", "uid": "u1", "resourceVersion": "77",
            "creationTimestamp": "2026-11-29T11:00:00Z",
            "finalizers": ["kueue.x-k8s.io/resource-in-use", HOLD_FINALIZER],
            "annotations": {ANN_HOLD_INSTANCE: "4", ANN_HOLD_TRANSFER_TO: "trainjob-job-9"}},
        "spec": {"active": false, "queueName": "main"},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                {"type": "Admitted", "status": "False", "reason": "UnsatisfiedChecks"},
            ],
            "admissionChecks": [
                {"name": "other-check", "state": "Ready", "message": ""},
                {"name": CHECK, "state": "Pending", "message": "attempt=2: claimed",
                 "lastTransitionTime": "2026-11-29T11:00:00Z"},
            ]
        }
    });
    let v = WorkloadView::read(&wl, &ours());
    assert_eq!(v.name, "trainjob-job-3f2a");
    assert_eq!(v.resource_version, "77");
    assert!(v.hold_finalizer);
    assert!(!v.terminating);
    assert_eq!(v.hold.instance(), Some(4));
    assert_eq!(v.transfer_to.as_deref(), Some("trainjob-job-9"));
    assert!(!v.active);
    assert!(v.quota_reserved);
    assert!(!v.admitted);
    assert_eq!(v.checks, vec![check(CHECK_PENDING, "attempt=2: claimed")]);
    assert_eq!(v.checks[0].claim(), Some(2));

    let bare = WorkloadView::read(&json!({}), &ours());
    assert!(bare.active, "Kueue's default");
    assert!(bare.checks.is_empty());
    assert!(!bare.quota_reserved);
}

#[test]
fn a_trainjob_is_read_for_the_gate() {
    let tj = json!({"metadata": {"uid": "t", "resourceVersion": "5",
        "labels": {LABEL_MANAGED: "true"},
        "annotations": {ANN_OPENED: "true", ANN_ATTEMPT: "7"}}});
    let v = TrainJobView::read(&tj);
    assert!(v.managed && v.opened && !v.ended && !v.terminating);
    assert_eq!(v.attempt, Some(7));
    let v = TrainJobView::read(&json!({"metadata": {"labels": {LABEL_MANAGED: "yes"},
        "annotations": {ANN_ATTEMPT: "x"}, "deletionTimestamp": "2026-11-29T11:00:00Z"}}));
    assert!(!v.managed, "only \"true\" is managed");
    assert_eq!(v.attempt, None);
    assert!(v.terminating);
}

#[test]
fn the_gate_decides() {
    let wait = |reason: WaitReason, claim: Option<u64>| GateStep::Wait {
        reason,
        message: Some(check_message(claim, reason.text())),
    };
    let claimed = |n: u64| WorkloadView {
        checks: vec![check(CHECK_PENDING, &check_message(Some(n), CLAIM_TEXT))],
        ..pending()
    };
    let mut held_elsewhere = pending();
    held_elsewhere.uid = "wl-0".into();
    held_elsewhere.terminating = true;
    held_elsewhere.hold_finalizer = true;
    held_elsewhere.hold = held(3);
    type Case = (
        &'static str,
        TrainJobView,
        WorkloadView,
        Vec<WorkloadView>,
        Pods,
        GateStep,
    );
    let cases: Vec<Case> = vec![
        (
            "all clear: claim A+1 first",
            trainjob(),
            pending(),
            vec![],
            Pods::Gone,
            GateStep::Claim { attempt: 2 },
        ),
        (
            "pods not looked at yet",
            trainjob(),
            pending(),
            vec![],
            Pods::Unknown,
            GateStep::LookForPods,
        ),
        (
            "pods of the previous execution remain",
            trainjob(),
            pending(),
            vec![],
            Pods::Remain(2),
            wait(WaitReason::PodsRemain, None),
        ),
        (
            "claimed, A below the claim: raise it",
            trainjob(),
            claimed(2),
            vec![],
            Pods::Gone,
            GateStep::RaiseAttempt { to: 2 },
        ),
        (
            "claimed, A reached the claim: Ready",
            TrainJobView {
                attempt: Some(2),
                ..trainjob()
            },
            claimed(2),
            vec![],
            Pods::Gone,
            GateStep::Ready { attempt: 2 },
        ),
        (
            "claimed, then pods: the claim is kept in the message",
            trainjob(),
            claimed(2),
            vec![],
            Pods::Remain(1),
            wait(WaitReason::PodsRemain, Some(2)),
        ),
        (
            "managed and never opened: the start gate",
            TrainJobView {
                opened: false,
                ..trainjob()
            },
            pending(),
            vec![],
            Pods::Gone,
            wait(WaitReason::StartGate, None),
        ),
        (
            "unmanaged jobs need no opened mark",
            TrainJobView {
                opened: false,
                managed: false,
                ..trainjob()
            },
            pending(),
            vec![],
            Pods::Gone,
            GateStep::Claim { attempt: 2 },
        ),
        (
            "a held Workload being deleted: never Ready before its hold moved",
            trainjob(),
            pending(),
            vec![held_elsewhere.clone()],
            Pods::Gone,
            wait(WaitReason::HoldElsewhere, None),
        ),
        (
            "held: Kueue evicts it, nothing to do",
            trainjob(),
            WorkloadView {
                hold: held(1),
                active: false,
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "a hold whose stop was lifted still holds the gate",
            trainjob(),
            WorkloadView {
                hold: held(1),
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "deactivated by someone: not ours to let through",
            trainjob(),
            WorkloadView {
                active: false,
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "no quota reserved yet",
            trainjob(),
            WorkloadView {
                quota_reserved: false,
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "no check of ours",
            trainjob(),
            WorkloadView {
                checks: vec![],
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "already Ready",
            TrainJobView {
                attempt: Some(2),
                ..trainjob()
            },
            WorkloadView {
                checks: vec![check(CHECK_READY, "attempt=2: done")],
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "Ready with a claim A never reached",
            trainjob(),
            WorkloadView {
                checks: vec![check(CHECK_READY, "attempt=2: done")],
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::RaiseAttempt { to: 2 },
        ),
        (
            "being deleted",
            trainjob(),
            WorkloadView {
                terminating: true,
                ..pending()
            },
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "finished job",
            TrainJobView {
                ended: true,
                ..trainjob()
            },
            pending(),
            vec![],
            Pods::Gone,
            GateStep::Idle,
        ),
        (
            "unreadable A",
            TrainJobView {
                attempt: None,
                ..trainjob()
            },
            pending(),
            vec![],
            Pods::Gone,
            wait(WaitReason::UnreadableAttempt, None),
        ),
    ];
    for (name, tj, wl, others, pods, want) in cases {
        assert_eq!(decide_gate(&tj, &wl, &others, pods), want, "{name}");
    }
}

#[test]
fn a_wait_message_is_written_once() {
    let wl = WorkloadView {
        checks: vec![check(CHECK_PENDING, WaitReason::PodsRemain.text())],
        ..pending()
    };
    assert_eq!(
        decide_gate(&trainjob(), &wl, &[], Pods::Remain(3)),
        GateStep::Wait {
            reason: WaitReason::PodsRemain,
            message: None
        }
    );
}

#[test]
fn the_gate_waits_while_a_multikueue_worker_cannot_be_read() {
    let step = decide_gate(&trainjob(), &pending(), &[], Pods::Unreachable);
    assert_eq!(
        step,
        GateStep::Wait {
            reason: WaitReason::WorkerUnreachable,
            message: Some(WaitReason::WorkerUnreachable.text().to_owned())
        },
        "an unreadable worker may hold the previous execution's pods: never Ready"
    );
    assert_ne!(
        WaitReason::WorkerUnreachable.text(),
        WaitReason::PodsRemain.text()
    );
}

#[test]
fn the_gate_waits_while_a_worker_of_the_workloads_multikueue_config_is_not_configured() {
    assert_eq!(
        decide_gate(&trainjob(), &pending(), &[], Pods::Unseen),
        GateStep::Wait {
            reason: WaitReason::WorkerNotConfigured,
            message: Some(WaitReason::WorkerNotConfigured.text().to_owned())
        },
        "pods may remain in a worker holdfast cannot see: never Ready"
    );
}

/// A simulated Workload status, TrainJob A and Kueue, driven through admissions, evictions
/// and crashes of the gate between any two of its writes.
#[derive(Debug)]
struct Cycle {
    wl: Value,
    a: u64,
    /// Executions let through: Pending→Ready transitions of the check.
    executions: u64,
}

impl Cycle {
    fn new() -> Self {
        Cycle {
            wl: json!({"metadata": {"name": "w", "uid": "w"},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                    "admissionChecks": [{"name": CHECK, "state": "Pending", "message": ""}]}}),
            a: 0,
            executions: 0,
        }
    }

    fn tj(&self) -> TrainJobView {
        TrainJobView {
            attempt: Some(self.a),
            ..trainjob()
        }
    }

    /// One gate write, as the controller makes it; false when idle.
    fn step(&mut self) -> bool {
        let view = WorkloadView::read(&self.wl, &ours());
        match decide_gate(&self.tj(), &view, &[], Pods::Gone) {
            GateStep::Claim { attempt } => {
                set_checks(
                    &mut self.wl,
                    &ours(),
                    CHECK_PENDING,
                    &check_message(Some(attempt), CLAIM_TEXT),
                    "t",
                );
            }
            GateStep::RaiseAttempt { to } => {
                let mut tj =
                    json!({"metadata": {"annotations": {ANN_ATTEMPT: self.a.to_string()}}});
                apply(&raise_attempt("1", to), &mut tj, Mode::Kueue).expect("apply");
                self.a = object::attempt(&tj).expect("A");
            }
            GateStep::Ready { attempt } => {
                set_checks(
                    &mut self.wl,
                    &ours(),
                    CHECK_READY,
                    &check_message(Some(attempt), READY_TEXT),
                    "t",
                );
                self.executions += 1;
            }
            GateStep::Idle => return false,
            other => panic!("unexpected {other:?}"),
        }
        true
    }

    /// Kueue evicts: every non-Pending entry is reset to Pending with its own message.
    fn evict(&mut self) {
        if let Some(items) = self
            .wl
            .pointer_mut("/status/admissionChecks")
            .and_then(Value::as_array_mut)
        {
            for c in items {
                if c["state"] != "Pending" {
                    c["message"] = json!(format!(
                        "Reset to Pending after eviction. Previously: {}",
                        c["state"].as_str().unwrap_or_default()
                    ));
                    c["state"] = json!("Pending");
                }
            }
        }
    }
}

#[test]
fn a_rises_exactly_once_per_admission_whatever_crashes_and_evictions_interleave() {
    // Each scenario: per admission cycle, how many gate writes happen before a crash (the
    // reconcile stops) and whether Kueue evicts before the gate runs again.
    for crash_after in 0..=3u32 {
        for evict_during in [false, true] {
            let mut c = Cycle::new();
            for cycle in 1..=4u64 {
                let before = c.executions;
                let mut writes = 0;
                while writes < crash_after && c.step() {
                    writes += 1;
                }
                if evict_during {
                    // An eviction while the gate is down: before Ready it resets nothing
                    // (the claim stands); after Ready it ends that execution.
                    c.evict();
                }
                // The controller comes back and finishes the admission.
                while c.step() {}
                let let_through = c.executions - before;
                let want = if evict_during && crash_after == 3 {
                    2
                } else {
                    1
                };
                assert_eq!(
                    let_through, want,
                    "cycle {cycle}: crash after {crash_after}, evict {evict_during}"
                );
                assert_eq!(c.a, c.executions, "A counts the executions let through");
                // The execution ends in an eviction (a hold, a preemption).
                c.evict();
            }
        }
    }
}

#[test]
fn set_checks_changes_only_ours_and_stamps_transitions() {
    let mut wl = json!({"status": {"admissionChecks": [
        {"name": "other", "state": "Pending", "message": "x", "lastTransitionTime": "t0"},
        {"name": CHECK, "state": "Pending", "message": "y", "lastTransitionTime": "t0"},
    ]}});
    assert!(set_checks(
        &mut wl,
        &ours(),
        CHECK_PENDING,
        "attempt=1: c",
        "t1"
    ));
    assert_eq!(
        wl["status"]["admissionChecks"][1]["lastTransitionTime"],
        "t0"
    );
    assert!(set_checks(
        &mut wl,
        &ours(),
        CHECK_READY,
        "attempt=1: r",
        "t2"
    ));
    assert_eq!(
        wl["status"]["admissionChecks"],
        json!([
            {"name": "other", "state": "Pending", "message": "x", "lastTransitionTime": "t0"},
            {"name": CHECK, "state": "Ready", "message": "attempt=1: r", "lastTransitionTime": "t2"},
        ])
    );
    assert!(!set_checks(
        &mut wl,
        &ours(),
        CHECK_READY,
        "attempt=1: r",
        "t3"
    ));
    assert!(!set_checks(&mut json!({}), &ours(), CHECK_READY, "", "t"));
}

fn source(instance: u64) -> WorkloadView {
    WorkloadView {
        name: "old".into(),
        uid: "old".into(),
        resource_version: "30".into(),
        terminating: true,
        hold_finalizer: true,
        hold: held(instance),
        active: false,
        quota_reserved: true,
        checks: vec![],
        ..pending()
    }
}

fn replacement() -> WorkloadView {
    WorkloadView {
        name: "new".into(),
        uid: "new".into(),
        resource_version: "40".into(),
        created: "2026-11-29T11:05:00Z".into(),
        quota_reserved: false,
        ..pending()
    }
}

fn expect_write(step: TransferStep) -> (String, Write) {
    match step {
        TransferStep::Write { workload, write } => (workload, write),
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn a_hold_is_moved_mark_first_then_the_replacement_then_the_finalizer() {
    let tj = trainjob();
    // 1. Mark the source.
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[source(3), replacement()]));
    assert_eq!(on, "old");
    assert_eq!(w.precondition, "30");
    assert_eq!(
        w.set_annotations
            .get(ANN_HOLD_TRANSFER_TO)
            .map(String::as_str),
        Some("new")
    );
    assert_eq!(w.stop, None);
    // 2. Hold the replacement with the same annotations, stop and finalizer.
    let marked = WorkloadView {
        transfer_to: Some("new".into()),
        ..source(3)
    };
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[marked.clone(), replacement()]));
    assert_eq!(on, "new");
    assert_eq!(w.precondition, "40");
    assert_eq!(w.stop, Some(true));
    assert_eq!(w.hold_finalizer, Some(true));
    assert_eq!(
        w.set_annotations,
        [
            (ANN_HOLD_INSTANCE.to_owned(), "3".to_owned()),
            (
                ANN_HOLD_PLACED_AT.to_owned(),
                "2026-11-29T11:00:00Z".to_owned()
            ),
            (ANN_HOLD_REASON.to_owned(), "node lost".to_owned()),
            (
                ANN_HOLD_HOLDER.to_owned(),
                "system:serviceaccount:team-a:dispatch".to_owned()
            ),
        ]
        .into(),
        "the holder moves with the hold: only it may release it on the replacement"
    );
    // 3. Let the source go.
    let moved = WorkloadView {
        hold: held(3),
        active: false,
        hold_finalizer: true,
        ..replacement()
    };
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[marked.clone(), moved.clone()]));
    assert_eq!(on, "old");
    assert_eq!(w.hold_finalizer, Some(false));
    assert!(w.remove_annotations.contains(ANN_HOLD_TRANSFER_TO));
    // A newer hold already on the replacement is kept.
    let newer = WorkloadView {
        hold: held(5),
        ..moved.clone()
    };
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[marked.clone(), newer]));
    assert_eq!((on.as_str(), w.hold_finalizer), ("old", Some(false)));
    // An older one is overwritten by the source's newer hold.
    let older = WorkloadView {
        hold: held(2),
        ..moved.clone()
    };
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[marked.clone(), older]));
    assert_eq!(on, "new");
    assert_eq!(
        w.set_annotations.get(ANN_HOLD_INSTANCE).map(String::as_str),
        Some("3")
    );
    // The same hold, but someone reactivated the replacement: stop it again.
    let lifted = WorkloadView {
        active: true,
        ..moved
    };
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[marked.clone(), lifted]));
    assert_eq!((on.as_str(), w.stop), ("new", Some(true)));
    // A mark naming another replacement is written again for this one.
    let stale_mark = WorkloadView {
        transfer_to: Some("gone".into()),
        ..source(3)
    };
    let (on, w) = expect_write(decide_transfer(Some(&tj), &[stale_mark, replacement()]));
    assert_eq!(on, "old");
    assert_eq!(
        w.set_annotations
            .get(ANN_HOLD_TRANSFER_TO)
            .map(String::as_str),
        Some("new")
    );
}

#[test]
fn without_a_replacement_the_deleted_workload_stays_held() {
    assert_eq!(
        decide_transfer(Some(&trainjob()), &[source(3)]),
        TransferStep::AwaitReplacement {
            source: "old".into()
        }
    );
    assert_eq!(
        decide_transfer(Some(&trainjob()), &[replacement()]),
        TransferStep::Idle
    );
}

#[test]
fn a_gone_deleted_or_finished_trainjob_lets_its_held_workloads_go() {
    for tj in [
        None,
        Some(TrainJobView {
            terminating: true,
            ..trainjob()
        }),
        Some(TrainJobView {
            ended: true,
            ..trainjob()
        }),
    ] {
        let (on, w) = expect_write(decide_transfer(tj.as_ref(), &[source(3), replacement()]));
        assert_eq!(on, "old", "{tj:?}");
        assert_eq!(w.hold_finalizer, Some(false));
    }
    // A source without a hold (damaged) is let go too.
    let unheld = WorkloadView {
        hold: HoldState::Absent,
        ..source(3)
    };
    let (on, _) = expect_write(decide_transfer(Some(&trainjob()), &[unheld]));
    assert_eq!(on, "old");
}

#[test]
fn transfer_writes_apply_to_the_real_objects() {
    let mut target = json!({"metadata": {"name": "new", "resourceVersion": "40",
        "finalizers": ["kueue.x-k8s.io/resource-in-use"]}, "spec": {"active": true}});
    let marked = WorkloadView {
        transfer_to: Some("new".into()),
        ..source(3)
    };
    let (_, w) = expect_write(decide_transfer(Some(&trainjob()), &[marked, replacement()]));
    apply(&w, &mut target, Mode::Kueue).expect("apply");
    assert_eq!(target["spec"]["active"], false);
    assert_eq!(
        target["metadata"]["finalizers"],
        json!(["kueue.x-k8s.io/resource-in-use", HOLD_FINALIZER])
    );
    assert_eq!(target["metadata"]["annotations"][ANN_HOLD_INSTANCE], "3");
}

#[test]
fn the_admission_check_is_kept_active() {
    let mut ac = json!({"metadata": {"name": CHECK, "generation": 2},
        "spec": {"controllerName": READMISSION_CONTROLLER}});
    assert!(is_our_check(&ac));
    assert!(activate_check(&mut ac, "t1"));
    assert_eq!(ac["status"]["conditions"][0]["type"], "Active");
    assert_eq!(ac["status"]["conditions"][0]["status"], "True");
    assert_eq!(ac["status"]["conditions"][0]["observedGeneration"], 2);
    assert!(!activate_check(&mut ac, "t2"), "already active");
    ac["metadata"]["generation"] = json!(3);
    assert!(
        activate_check(&mut ac, "t3"),
        "a new generation is observed"
    );
    assert_eq!(
        ac["status"]["conditions"][0]["lastTransitionTime"], "t1",
        "still true: no transition"
    );
    let mut inactive = json!({"status": {"conditions": [
        {"type": "Active", "status": "False", "reason": "Nope", "lastTransitionTime": "t0"}]}});
    assert!(activate_check(&mut inactive, "t4"));
    assert_eq!(
        inactive["status"]["conditions"][0]["lastTransitionTime"],
        "t4"
    );
    assert!(!is_our_check(
        &json!({"spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}})
    ));
}
