//! The seed's rules (holds-are-workload-deactivation), one test each, named after the rule:
//! tables of `decide` cases, then the same rules run through the executor loop against a
//! simulated apiserver, then a property over interleaved calls.

use jiff::Timestamp;
use serde_json::json;

use super::sim::Sim;
use super::*;
use crate::{
    mode::Mode,
    names::{
        ANN_ATTEMPT, ANN_HOLD_FOUND, ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT,
        ANN_HOLD_REASON, ANN_OPENED,
    },
};

const MODES: [Mode; 2] = [Mode::Plain, Mode::Kueue];
const HOLD_KEYS: [&str; 5] = [
    ANN_HOLD_INSTANCE,
    ANN_HOLD_REASON,
    ANN_HOLD_PLACED_AT,
    ANN_HOLD_HOLDER,
    ANN_HOLD_FOUND,
];

/// The supervisor's identity: the holder of the holds these tests place.
const DISPATCH: &str = "system:serviceaccount:team-a:dispatch";
/// Another identity RBAC lets make the calls.
const OTHER: &str = "system:serviceaccount:team-a:other";

fn dispatch() -> CallerId {
    CallerId::new(DISPATCH)
}

fn now() -> Timestamp {
    crate::rfc3339::parse("2026-11-29T11:00:00Z").expect("test time")
}

fn hold(instance: u64) -> Call {
    hold_by(instance, dispatch())
}

fn hold_by(instance: u64, by: CallerId) -> Call {
    Call::Hold {
        instance,
        reason: None,
        placed_at: now(),
        by,
    }
}

fn hold_because(instance: u64, reason: &str) -> Call {
    Call::Hold {
        instance,
        reason: Some(reason.to_owned()),
        placed_at: now(),
        by: dispatch(),
    }
}

fn release(instance: u64) -> Call {
    release_by(instance, dispatch())
}

fn release_by(instance: u64, by: CallerId) -> Call {
    Call::Release { instance, by }
}

/// Hold `instance`, placed by [`DISPATCH`].
fn in_force(instance: u64) -> HoldState {
    held_by(instance, Some(DISPATCH))
}

/// Hold `instance`, placed by `holder` (`None`: before holders were recorded).
fn held_by(instance: u64, holder: Option<&str>) -> HoldState {
    HoldState::InForce(HoldRecord {
        instance,
        reason: None,
        placed_at: None,
        holder: holder.map(str::to_owned),
    })
}

/// An opened, running TrainJob with A = 2 and no hold.
fn view(mode: Mode) -> HeldView {
    HeldView {
        mode,
        resource_version: "100".to_owned(),
        hold: HoldState::Absent,
        opened: true,
        attempt: 2,
        stopped: false,
        ended: false,
        pods_remain: false,
        found: None,
        stop_cause: None,
    }
}

fn held_view(mode: Mode, instance: u64) -> HeldView {
    HeldView {
        hold: in_force(instance),
        stopped: true,
        ..view(mode)
    }
}

#[track_caller]
fn expect_write(d: Decision) -> Write {
    match d {
        Decision::Write(w) => w,
        other => panic!("expected a write, got {other:?}"),
    }
}

#[track_caller]
fn expect_stale(d: Decision) {
    match d {
        Decision::Fail(e) => assert_eq!(e.cause(), Some(RejectCause::StaleHold), "{e:?}"),
        other => panic!("expected StaleHold, got {other:?}"),
    }
}

fn held_target(mode: Mode) -> HeldObject {
    match mode {
        Mode::Plain => HeldObject::TrainJob,
        Mode::Kueue => HeldObject::Workload,
    }
}

fn keys(w: &Write) -> Vec<&str> {
    w.set_annotations
        .keys()
        .chain(w.remove_annotations.iter())
        .map(String::as_str)
        .collect()
}

// ---- Hold ------------------------------------------------------------------------------

#[test]
fn hold_lands_with_all_annotations_in_one_update() {
    for mode in MODES {
        let w = expect_write(decide(&hold_because(3, "node lost"), &view(mode), None));
        assert_eq!(w.target, held_target(mode), "{mode}");
        assert_eq!(w.precondition, "100", "preconditioned on the read");
        assert_eq!(w.stop, Some(true));
        assert_eq!(
            w.set_annotations,
            [
                (ANN_HOLD_INSTANCE.to_owned(), "3".to_owned()),
                (
                    ANN_HOLD_PLACED_AT.to_owned(),
                    "2026-11-29T11:00:00Z".to_owned()
                ),
                (ANN_HOLD_REASON.to_owned(), "node lost".to_owned()),
                (ANN_HOLD_HOLDER.to_owned(), DISPATCH.to_owned()),
            ]
            .into()
        );
        assert_eq!(
            w.remove_annotations,
            [ANN_HOLD_FOUND.to_owned()].into(),
            "a running object: nothing found stopped, no leftover record"
        );
        assert_eq!(w.outcome, Outcome::Held);

        // Through the executor: one update, and the held object carries all of it.
        let mut sim = Sim::new(mode);
        sim.run(&Call::Open).expect("open");
        let rv_before = sim
            .held()
            .and_then(|h| object::resource_version(h).map(str::to_owned));
        assert_eq!(sim.run(&hold_because(3, "node lost")), Ok(Outcome::Held));
        let held = sim.held().expect("held object");
        assert_ne!(object::resource_version(held).map(str::to_owned), rv_before);
        assert_eq!(object::annotation(held, ANN_HOLD_INSTANCE), Some("3"));
        assert_eq!(object::annotation(held, ANN_HOLD_REASON), Some("node lost"));
        assert_eq!(
            object::annotation(held, ANN_HOLD_PLACED_AT),
            Some("2026-11-29T11:00:00Z")
        );
        assert!(sim.stopped(), "{mode}: the hold is the stop");
    }
}

#[test]
fn hold_never_touches_opened_or_attempt() {
    for mode in MODES {
        for v in [
            view(mode),
            HeldView {
                opened: false,
                stopped: true,
                ..view(mode)
            },
            HeldView {
                ended: true,
                ..view(mode)
            },
            held_view(mode, 1),
        ] {
            let w = expect_write(decide(&hold(2), &v, None));
            for k in keys(&w) {
                assert!(HOLD_KEYS.contains(&k), "{mode}: hold wrote {k}");
            }
        }
    }
}

#[test]
fn hold_without_reason_removes_a_leftover_reason() {
    let w = expect_write(decide(&hold(4), &held_view(Mode::Plain, 3), None));
    assert!(w.remove_annotations.contains(ANN_HOLD_REASON));
    assert!(!w.set_annotations.contains_key(ANN_HOLD_REASON));
    assert_eq!(
        w.set_annotations.get(ANN_HOLD_INSTANCE).map(String::as_str),
        Some("4")
    );
}

#[test]
fn kueue_hold_deactivates_the_workload_and_never_touches_the_trainjob() {
    let mut sim = Sim::new(Mode::Kueue);
    sim.run(&Call::Open).expect("open");
    let trainjob = sim.trainjob.clone();
    assert_eq!(sim.run(&hold(1)), Ok(Outcome::Held));
    assert_eq!(sim.trainjob, trainjob, "the TrainJob is not touched");
    let wl = sim.workload.as_ref().expect("workload");
    assert_eq!(wl["spec"]["active"], false);
    assert_eq!(object::annotation(wl, ANN_HOLD_INSTANCE), Some("1"));
    assert_eq!(
        wl["metadata"]["finalizers"],
        json!([crate::names::HOLD_FINALIZER]),
        "the hold finalizer goes on with the hold, in the same update"
    );
}

#[test]
fn only_kueue_holds_carry_the_hold_finalizer() {
    for mode in MODES {
        let w = expect_write(decide(&hold(1), &view(mode), None));
        let r = expect_write(decide(&release(3), &held_view(mode, 3), None));
        match mode {
            Mode::Kueue => {
                assert_eq!(w.hold_finalizer, Some(true));
                assert_eq!(r.hold_finalizer, Some(false));
            }
            Mode::Plain => {
                assert_eq!(w.hold_finalizer, None);
                assert_eq!(r.hold_finalizer, None);
            }
        }
        let open = decide(&Call::Open, &view(mode), None);
        if let Decision::Write(o) = open {
            assert_eq!(o.hold_finalizer, None, "{mode}: Open never touches it");
        }
    }
}

#[test]
fn hold_already_in_force_succeeds() {
    for mode in MODES {
        assert_eq!(
            decide(&hold(3), &held_view(mode, 3), None),
            Decision::Done(Outcome::AlreadyInForce)
        );
        // After a conflict: our earlier try landed, whatever the previous read saw.
        for prev in [Seen::Absent, Seen::Instance(2), Seen::Unreadable] {
            assert_eq!(
                decide(&hold(3), &held_view(mode, 3), Some(prev)),
                Decision::Done(Outcome::AlreadyInForce),
                "{mode} after {prev:?}"
            );
        }
        // An ended job need not be stopped.
        let ended = HeldView {
            stopped: false,
            ended: true,
            ..held_view(mode, 3)
        };
        assert_eq!(
            decide(&hold(3), &ended, None),
            Decision::Done(Outcome::AlreadyInForce)
        );
    }
}

#[test]
fn hold_in_force_but_lifted_is_stopped_again() {
    for mode in MODES {
        let lifted = HeldView {
            stopped: false,
            ..held_view(mode, 3)
        };
        let w = expect_write(decide(&hold(3), &lifted, None));
        assert_eq!(w.stop, Some(true), "{mode}");
        assert!(w.set_annotations.is_empty() && w.remove_annotations.is_empty());
        assert_eq!(w.outcome, Outcome::AlreadyInForce);
    }
}

#[test]
fn newer_instance_in_force_rejects_hold_as_stale() {
    for mode in MODES {
        expect_stale(decide(&hold(3), &held_view(mode, 5), None));
        expect_stale(decide(
            &hold(3),
            &held_view(mode, 5),
            Some(Seen::Instance(5)),
        ));
        expect_stale(decide(&hold(0), &held_view(mode, 1), None));
    }
}

#[test]
fn older_instance_in_force_is_replaced_by_hold() {
    for mode in MODES {
        let w = expect_write(decide(&hold(6), &held_view(mode, 5), None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_INSTANCE).map(String::as_str),
            Some("6")
        );
        assert_eq!(w.stop, Some(true));
    }
}

#[test]
fn after_conflict_a_different_instance_is_stale() {
    // (what the previous read saw, what this read sees), for Hold(5).
    let cases = [
        (Seen::Absent, in_force(2)),
        (
            Seen::Absent,
            HoldState::Unreadable {
                value: "x".into(),
                holder: None,
            },
        ),
        (Seen::Instance(1), HoldState::Absent),
        (Seen::Instance(1), in_force(2)),
        (Seen::Unreadable, in_force(1)),
    ];
    for mode in MODES {
        for (prev, now_seen) in &cases {
            let v = HeldView {
                hold: now_seen.clone(),
                ..view(mode)
            };
            expect_stale(decide(&hold(5), &v, Some(*prev)));
        }
    }
}

#[test]
fn after_conflict_the_same_instance_is_written_again() {
    for mode in MODES {
        for (prev, now_seen) in [
            (Seen::Absent, HoldState::Absent),
            (Seen::Instance(1), in_force(1)),
            (
                Seen::Unreadable,
                HoldState::Unreadable {
                    value: "x".into(),
                    holder: None,
                },
            ),
        ] {
            let v = HeldView {
                hold: now_seen,
                ..view(mode)
            };
            let w = expect_write(decide(&hold(5), &v, Some(prev)));
            assert_eq!(w.outcome, Outcome::Held, "{mode} {prev:?}");
        }
    }
}

#[test]
fn conflict_from_another_writer_is_retried() {
    for mode in MODES {
        for call in [hold(2), Call::Open] {
            let mut sim = Sim::new(mode);
            let mut tries = 0;
            let target = call.target(mode);
            let result = sim.run_with(&call, |s, n| {
                tries += 1;
                if n < 3 {
                    s.touch(target); // a controller's status update between read and write
                }
            });
            assert!(result.is_ok(), "{mode} {call:?}: {result:?}");
            assert_eq!(tries, 4, "three conflicts, then the write lands");
        }
        let mut sim = Sim::new(mode);
        sim.run(&hold(2)).expect("hold");
        let result = sim.run_with(&release(2), |s, n| {
            if n == 0 {
                s.touch(held_target(mode));
            }
        });
        assert_eq!(
            result,
            Ok(Outcome::Released {
                resumed: mode == Mode::Kueue
            })
        );
        assert_eq!(sim.instance(), None);
    }
}

#[test]
fn hold_overtaken_between_read_and_write_is_stale() {
    for mode in MODES {
        // Hold 2 lands between hold 1's read and its write: hold 1's write fails its
        // precondition, and the re-read sees a newer instance.
        let mut sim = Sim::new(mode);
        let result = sim.run_with(&hold(1), |s, n| {
            if n == 0 {
                assert_eq!(s.run(&hold(2)), Ok(Outcome::Held));
            }
        });
        assert_eq!(
            result.map_err(|e| e.cause()),
            Err(Some(RejectCause::StaleHold))
        );
        assert_eq!(sim.instance(), Some(2));

        // An older hold landing in between also makes the newer call stale: after a
        // conflict, any change of instance means a call overtook this one.
        let mut sim = Sim::new(mode);
        let result = sim.run_with(&hold(5), |s, n| {
            if n == 0 {
                assert_eq!(s.run(&hold(2)), Ok(Outcome::Held));
            }
        });
        assert_eq!(
            result.map_err(|e| e.cause()),
            Err(Some(RejectCause::StaleHold))
        );
        assert_eq!(sim.instance(), Some(2));
    }
}

#[test]
fn eight_conflicts_fail_with_conflict() {
    let mut attempts = Attempts::new();
    for _ in 1..MAX_TRIES {
        assert_eq!(attempts.conflicted(), Ok(()));
    }
    assert_eq!(attempts.conflicted(), Err(HoldError::Conflict { tries: 8 }));
    assert_eq!(attempts.conflicts(), 8);

    for mode in MODES {
        let mut sim = Sim::new(mode);
        let before = sim.clone();
        let mut writes = 0;
        let result = sim.run_with(&hold(1), |s, _| {
            writes += 1;
            s.touch(held_target(mode));
        });
        assert_eq!(result, Err(HoldError::Conflict { tries: MAX_TRIES }));
        assert_eq!(writes, MAX_TRIES);
        assert_eq!(sim.instance(), None, "nothing was written");
        assert_eq!(sim.stopped(), before.stopped());
    }
}

#[test]
fn unreadable_hold_instance_is_replaced_by_hold_and_refuses_release() {
    for mode in MODES {
        let v = HeldView {
            hold: HoldState::Unreadable {
                value: "three".into(),
                holder: None,
            },
            stopped: true,
            ..view(mode)
        };
        let w = expect_write(decide(&hold(1), &v, None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_INSTANCE).map(String::as_str),
            Some("1")
        );
        expect_stale(decide(&release(3), &v, None));
        // Open treats it as a hold in force: the opened mark only.
        let v = HeldView { opened: false, ..v };
        let w = expect_write(decide(&Call::Open, &v, None));
        assert_eq!(w.stop, None);
    }
}

// ---- Release ---------------------------------------------------------------------------

#[test]
fn release_refuses_other_instance() {
    for mode in MODES {
        expect_stale(decide(&release(3), &held_view(mode, 4), None));
        expect_stale(decide(&release(4), &held_view(mode, 3), None));
        // Also after a conflict: only m in force is retried.
        expect_stale(decide(
            &release(3),
            &held_view(mode, 4),
            Some(Seen::Instance(3)),
        ));

        let mut sim = Sim::new(mode);
        sim.run(&hold(4)).expect("hold");
        let before = sim.clone();
        assert_eq!(
            sim.run(&release(3)).map_err(|e| e.cause()),
            Err(Some(RejectCause::StaleHold))
        );
        assert_eq!(sim.held(), before.held(), "nothing written");
    }
}

#[test]
fn release_with_no_hold_in_force_is_stale() {
    for mode in MODES {
        expect_stale(decide(&release(1), &view(mode), None));
    }
}

#[test]
fn release_unsuspends_and_raises_attempt_in_one_update() {
    let w = expect_write(decide(&release(3), &held_view(Mode::Plain, 3), None));
    assert_eq!(w.target, HeldObject::TrainJob);
    assert_eq!(w.precondition, "100");
    assert_eq!(w.stop, Some(false));
    assert_eq!(
        w.set_annotations,
        [(ANN_ATTEMPT.to_owned(), "3".to_owned())].into()
    );
    assert_eq!(
        w.remove_annotations,
        HOLD_KEYS.iter().map(|k| (*k).to_owned()).collect()
    );
    assert_eq!(w.outcome, Outcome::Released { resumed: true });

    let mut sim = Sim::new(Mode::Plain);
    sim.run(&Call::Open).expect("open");
    sim.run(&hold(3)).expect("hold");
    assert_eq!(
        sim.run(&release(3)),
        Ok(Outcome::Released { resumed: true })
    );
    assert!(!sim.stopped());
    assert_eq!(
        sim.attempt(),
        2,
        "Open let execution 1 through, Release execution 2"
    );
    for k in HOLD_KEYS {
        assert_eq!(object::annotation(&sim.trainjob, k), None, "{k}");
    }
}

#[test]
fn release_with_pods_remaining_writes_nothing() {
    let v = HeldView {
        pods_remain: true,
        ..held_view(Mode::Plain, 3)
    };
    assert_eq!(
        decide(&release(3), &v, None),
        Decision::Fail(HoldError::PodsRemain)
    );

    let mut sim = Sim::new(Mode::Plain);
    sim.run(&Call::Open).expect("open");
    sim.run(&hold(3)).expect("hold");
    sim.pods_remain = true;
    let before = sim.trainjob.clone();
    assert_eq!(sim.run(&release(3)), Err(HoldError::PodsRemain));
    assert_eq!(
        sim.trainjob, before,
        "not a byte changed, resourceVersion included"
    );
    sim.pods_remain = false;
    assert_eq!(
        sim.run(&release(3)),
        Ok(Outcome::Released { resumed: true })
    );
}

/// The executor's half of the rule above: which decisions, carried into the hold's mode as
/// the executor carries them, have the pods listed first.
#[test]
fn only_a_write_that_lets_the_trainjob_run_without_the_gate_lists_the_pods_first() {
    use Mode::{Kueue, Plain};
    let write = |target, stop| {
        let mut w = Write::new(target, "1", Outcome::Released { resumed: true });
        w.stop = stop;
        w
    };
    let carried =
        |w, configured, acting| Decision::Write(switch::carried_write(w, configured, acting));
    // (the write as decided in the hold's mode, configured mode, the hold's mode, lists pods)
    let table = [
        (write(HeldObject::TrainJob, Some(false)), Plain, Plain, true),
        // A kueue-mode hold released after a switch to plain mode: no gate runs to wait.
        (write(HeldObject::Workload, Some(false)), Plain, Kueue, true),
        // A plain-mode hold released after a switch to kueue mode: the unsuspend is left to
        // Kueue and the gate, which waits for the pods.
        (
            write(HeldObject::TrainJob, Some(false)),
            Kueue,
            Plain,
            false,
        ),
        // A Workload activated in kueue mode: the readmission gate waits for the pods.
        (
            write(HeldObject::Workload, Some(false)),
            Kueue,
            Kueue,
            false,
        ),
        // Stopping, or leaving it stopped (a Release of a job never opened), never lists.
        (write(HeldObject::TrainJob, Some(true)), Plain, Plain, false),
        (write(HeldObject::TrainJob, None), Plain, Plain, false),
    ];
    for (w, configured, acting, lists) in table {
        let decision = carried(w, configured, acting);
        assert_eq!(
            looks_for_pods(&decision, configured, acting),
            lists,
            "{decision:?} configured {configured:?}, hold {acting:?}"
        );
    }
    for decision in [
        Decision::Done(Outcome::Released { resumed: false }),
        Decision::Fail(HoldError::PodsRemain),
    ] {
        assert!(!looks_for_pods(&decision, Plain, Plain), "{decision:?}");
    }
}

#[test]
fn held_before_opened_stays_suspended_after_release() {
    let v = HeldView {
        opened: false,
        pods_remain: true,
        ..held_view(Mode::Plain, 1)
    };
    let w = expect_write(decide(&release(1), &v, None));
    assert_eq!(w.stop, None, "never unsuspends what the gate still holds");
    assert!(w.set_annotations.is_empty(), "A is not raised");
    assert_eq!(w.outcome, Outcome::Released { resumed: false });

    let mut sim = Sim::new(Mode::Plain);
    sim.run(&hold(1)).expect("hold");
    assert_eq!(
        sim.run(&release(1)),
        Ok(Outcome::Released { resumed: false })
    );
    assert!(sim.stopped(), "back at its start gate");
    assert_eq!(sim.instance(), None);
    assert_eq!(sim.attempt(), 0);
    assert_eq!(sim.run(&Call::Open), Ok(Outcome::Opened { started: true }));
    assert!(!sim.stopped());
    assert_eq!(sim.attempt(), 1);
}

#[test]
fn release_of_an_ended_job_only_removes_annotations() {
    let v = HeldView {
        ended: true,
        pods_remain: true,
        ..held_view(Mode::Plain, 2)
    };
    let w = expect_write(decide(&release(2), &v, None));
    assert_eq!(w.stop, None);
    assert!(w.set_annotations.is_empty());
    assert_eq!(w.remove_annotations.len(), HOLD_KEYS.len());
    assert_eq!(w.outcome, Outcome::Released { resumed: false });
}

#[test]
fn kueue_release_sets_active_and_removes_annotations_in_one_update() {
    let v = HeldView {
        pods_remain: true,
        ..held_view(Mode::Kueue, 3)
    };
    let w = expect_write(decide(&release(3), &v, None));
    assert_eq!(w.target, HeldObject::Workload);
    assert_eq!(w.stop, Some(false));
    assert!(
        w.set_annotations.is_empty(),
        "A is the readmission gate's to raise"
    );
    assert_eq!(w.remove_annotations.len(), HOLD_KEYS.len());
    assert_eq!(w.outcome, Outcome::Released { resumed: true });

    let mut sim = Sim::new(Mode::Kueue);
    sim.run(&Call::Open).expect("open");
    sim.run(&hold(3)).expect("hold");
    sim.pods_remain = true; // the readmission gate's business, not Release's
    let trainjob = sim.trainjob.clone();
    assert_eq!(
        sim.run(&release(3)),
        Ok(Outcome::Released { resumed: true })
    );
    let wl = sim.workload.as_ref().expect("workload");
    assert_eq!(wl["spec"]["active"], true);
    assert_eq!(wl["metadata"]["annotations"], json!({}));
    assert!(
        wl["metadata"].get("finalizers").is_none(),
        "the hold finalizer went with the hold: {wl}"
    );
    assert_eq!(sim.trainjob, trainjob, "the TrainJob (and A) untouched");
}

// ---- Open ------------------------------------------------------------------------------

/// Seam: Release lifted stops that were not the hold's. A hold records what had stopped the
/// object; Release leaves that in place.
#[test]
fn release_restores_what_the_hold_found() {
    for (mode, cause) in [
        (Mode::Plain, FOUND_SUSPENDED),
        (Mode::Kueue, FOUND_INACTIVE),
        (Mode::Kueue, "DeactivatedDueToMaximumExecutionTimeExceeded"),
    ] {
        let stopped_by_someone = HeldView {
            stopped: true,
            stop_cause: Some(cause.to_owned()),
            ..view(mode)
        };
        let w = expect_write(decide(&hold(1), &stopped_by_someone, None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_FOUND).map(String::as_str),
            Some(cause),
            "{mode}: the hold records what it found"
        );
        let held = HeldView {
            found: Some(cause.to_owned()),
            ..held_view(mode, 1)
        };
        let w = expect_write(decide(&release(1), &held, None));
        assert_eq!(w.stop, None, "{mode}/{cause}: the stop found stays");
        assert!(w.remove_annotations.contains(ANN_HOLD_FOUND));
        assert!(
            !w.set_annotations.contains_key(ANN_ATTEMPT),
            "A does not rise"
        );
        assert_eq!(w.outcome, Outcome::Released { resumed: false });
        // A newer hold over ours keeps the first one's record, not "stopped by our hold".
        let w = expect_write(decide(&hold(2), &held, None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_FOUND).map(String::as_str),
            Some(cause)
        );
        let w = expect_write(decide(&hold(2), &held_view(mode, 1), None));
        assert!(
            w.remove_annotations.contains(ANN_HOLD_FOUND),
            "{mode}: our own stop is not a stop found"
        );
    }

    // Through the executor loop: someone suspends an opened job, dispatch holds and
    // releases it: it stays suspended.
    let mut sim = Sim::new(Mode::Plain);
    sim.run(&Call::Open).expect("open");
    sim.trainjob["spec"]["suspend"] = json!(true);
    assert_eq!(sim.run(&hold(1)), Ok(Outcome::Held));
    assert_eq!(
        sim.run(&release(1)),
        Ok(Outcome::Released { resumed: false })
    );
    assert!(sim.stopped(), "someone else's suspend is restored");
    assert_eq!(object::annotation(&sim.trainjob, ANN_HOLD_FOUND), None);
}

/// The start gate's suspend is ours: a hold on a never-opened job records nothing, and
/// Release after Open starts the job.
#[test]
fn a_hold_at_the_start_gate_finds_nothing() {
    let mut sim = Sim::new(Mode::Plain);
    assert_eq!(sim.run(&hold(1)), Ok(Outcome::Held));
    assert_eq!(object::annotation(&sim.trainjob, ANN_HOLD_FOUND), None);
    assert_eq!(sim.run(&Call::Open), Ok(Outcome::Opened { started: false }));
    assert_eq!(
        sim.run(&release(1)),
        Ok(Outcome::Released { resumed: true })
    );
    assert!(!sim.stopped());
}

/// Seam: a Release whose write landed but whose answer was lost was reported `StaleHold`.
/// The next read shows no hold: the release took effect, and the call says so.
#[test]
fn a_release_whose_answer_was_lost_succeeds_when_the_read_shows_it_landed() {
    for mode in MODES {
        let call = release(3);
        let mut attempts = Attempts::new();
        let w = expect_write(attempts.decide(&call, &held_view(mode, 3)));
        attempts.unanswered(w.outcome);
        assert!(attempts.outcome_unknown());
        // It landed: no hold now.
        assert_eq!(
            attempts.decide(&call, &view(mode)),
            Decision::Done(w.outcome),
            "{mode}"
        );
        // It did not land: the same hold is in force; decided again, written again.
        let mut attempts = Attempts::new();
        let w = expect_write(attempts.decide(&call, &held_view(mode, 3)));
        attempts.unanswered(w.outcome);
        expect_write(attempts.decide(&call, &held_view(mode, 3)));
        // Another hold is in force: nobody can tell.
        let mut attempts = Attempts::new();
        let w = expect_write(attempts.decide(&call, &held_view(mode, 3)));
        attempts.unanswered(w.outcome);
        match attempts.decide(&call, &held_view(mode, 4)) {
            Decision::Fail(HoldError::Unknown { message }) => {
                assert!(message.contains("hold 4"), "{message}")
            }
            other => panic!("{mode}: expected Unknown, got {other:?}"),
        }
    }
}

/// A Hold or Open whose write landed and whose answer was lost reports what it did (`Held`,
/// `Opened`), not `AlreadyInForce`/`AlreadyOpen`, which would say nothing of it was written.
#[test]
fn a_hold_or_open_whose_answer_was_lost_reports_its_own_write() {
    for mode in MODES {
        let mut attempts = Attempts::new();
        let w = expect_write(attempts.decide(&hold(3), &view(mode)));
        attempts.unanswered(w.outcome);
        assert_eq!(
            attempts.decide(&hold(3), &held_view(mode, 3)),
            Decision::Done(Outcome::Held),
            "{mode}"
        );
        let unopened = HeldView {
            opened: false,
            stopped: true,
            ..view(mode)
        };
        let mut attempts = Attempts::new();
        let w = expect_write(attempts.decide(&Call::Open, &unopened));
        attempts.unanswered(w.outcome);
        assert_eq!(
            attempts.decide(&Call::Open, &view(mode)),
            Decision::Done(w.outcome)
        );
    }
}

/// A lost answer spends no try, and conflicts after one end `Unknown`, never `Conflict`
/// ("nothing was written" would not be true).
#[test]
fn conflicts_after_a_lost_answer_end_unknown() {
    let mut attempts = Attempts::new();
    attempts.unanswered(Outcome::Held);
    for _ in 1..MAX_TRIES {
        attempts.conflicted().expect("a try left");
    }
    match attempts.conflicted() {
        Err(HoldError::Unknown { .. }) => {}
        other => panic!("expected Unknown, got {other:?}"),
    }
}

#[test]
fn open_unsuspends_and_raises_attempt_in_one_update() {
    let v = HeldView {
        opened: false,
        stopped: true,
        attempt: 0,
        ..view(Mode::Plain)
    };
    let w = expect_write(decide(&Call::Open, &v, None));
    assert_eq!(w.target, HeldObject::TrainJob);
    assert_eq!(w.stop, Some(false));
    assert_eq!(
        w.set_annotations,
        [
            (ANN_ATTEMPT.to_owned(), "1".to_owned()),
            (ANN_OPENED.to_owned(), "true".to_owned())
        ]
        .into()
    );
    assert_eq!(w.outcome, Outcome::Opened { started: true });
}

#[test]
fn stale_open_does_not_unsuspend_a_held_job() {
    let v = HeldView {
        opened: false,
        ..held_view(Mode::Plain, 3)
    };
    let w = expect_write(decide(&Call::Open, &v, None));
    assert_eq!(w.stop, None, "a stale Open cannot lift a hold");
    assert_eq!(keys(&w), vec![ANN_OPENED]);
    assert_eq!(w.outcome, Outcome::Opened { started: false });

    let mut sim = Sim::new(Mode::Plain);
    sim.run(&hold(3)).expect("hold");
    assert_eq!(sim.run(&Call::Open), Ok(Outcome::Opened { started: false }));
    assert!(sim.stopped());
    assert_eq!(sim.instance(), Some(3));
    assert_eq!(sim.attempt(), 0);
    // The holder's Release then starts it, since it has been opened.
    assert_eq!(
        sim.run(&release(3)),
        Ok(Outcome::Released { resumed: true })
    );
    assert!(!sim.stopped());
    assert_eq!(sim.attempt(), 1);
}

/// Never two executions, at the start gate too: a TrainJob created again under the name of
/// one whose pods are still terminating is not started by Open until they are gone.
#[test]
fn open_with_pods_remaining_writes_nothing() {
    let v = HeldView {
        opened: false,
        stopped: true,
        pods_remain: true,
        ..view(Mode::Plain)
    };
    assert_eq!(
        decide(&Call::Open, &v, None),
        Decision::Fail(HoldError::PodsRemain)
    );
    // Kueue mode: the readmission gate looks for them; Open only writes the mark.
    let v = HeldView {
        opened: false,
        pods_remain: true,
        ..view(Mode::Kueue)
    };
    assert!(matches!(decide(&Call::Open, &v, None), Decision::Write(_)));
}

#[test]
fn open_twice_writes_nothing() {
    for mode in MODES {
        assert_eq!(
            decide(&Call::Open, &view(mode), None),
            Decision::Done(Outcome::AlreadyOpen)
        );
        let mut sim = Sim::new(mode);
        assert!(sim.run(&Call::Open).is_ok());
        let before = sim.trainjob.clone();
        assert_eq!(sim.run(&Call::Open), Ok(Outcome::AlreadyOpen));
        assert_eq!(sim.trainjob, before);
    }
}

#[test]
fn open_does_not_restart_a_job_someone_else_suspended() {
    let v = HeldView {
        stopped: true,
        ..view(Mode::Plain)
    };
    assert_eq!(
        decide(&Call::Open, &v, None),
        Decision::Done(Outcome::AlreadyOpen)
    );
}

#[test]
fn open_on_an_ended_job_only_marks_it_opened() {
    let v = HeldView {
        opened: false,
        stopped: true,
        ended: true,
        ..view(Mode::Plain)
    };
    let w = expect_write(decide(&Call::Open, &v, None));
    assert_eq!(w.stop, None);
    assert_eq!(keys(&w), vec![ANN_OPENED]);
}

#[test]
fn kueue_open_writes_only_the_opened_mark_on_the_trainjob() {
    let v = HeldView {
        opened: false,
        ..view(Mode::Kueue)
    };
    let w = expect_write(decide(&Call::Open, &v, None));
    assert_eq!(w.target, HeldObject::TrainJob);
    assert_eq!(w.stop, None, "Kueue owns spec.suspend");
    assert_eq!(keys(&w), vec![ANN_OPENED]);
    assert_eq!(w.outcome, Outcome::Opened { started: false });

    let mut sim = Sim::new(Mode::Kueue);
    let workload = sim.workload.clone();
    assert_eq!(sim.run(&Call::Open), Ok(Outcome::Opened { started: false }));
    assert_eq!(sim.trainjob["spec"]["suspend"], true, "Kueue's to flip");
    assert_eq!(object::annotation(&sim.trainjob, ANN_OPENED), Some("true"));
    assert_eq!(sim.workload, workload, "the Workload untouched");
}

#[test]
fn hold_without_workload_is_rejected() {
    let mut sim = Sim::new(Mode::Kueue);
    sim.workload = None;
    for call in [hold(1), release(1)] {
        assert_eq!(
            sim.run(&call).map_err(|e| e.cause()),
            Err(Some(RejectCause::NoWorkload))
        );
    }
}

#[test]
fn outcomes_serialise_to_the_success_body() {
    assert_eq!(
        Outcome::Held.body(),
        json!({"result": "Ok", "outcome": "Held"})
    );
    assert_eq!(
        Outcome::Released { resumed: true }.body(),
        json!({"result": "Ok", "outcome": "Released", "resumed": true})
    );
    assert_eq!(
        Outcome::Opened { started: false }.body(),
        json!({"result": "Ok", "outcome": "Opened", "started": false})
    );
}

// ---- The holder ------------------------------------------------------------------------

#[track_caller]
fn expect_not_holder(d: Decision) -> String {
    match d {
        Decision::Fail(e) => {
            assert_eq!(e.cause(), Some(RejectCause::NotHolder), "{e:?}");
            assert_eq!(e.http_status(), 403);
            let HoldError::Rejected { message, .. } = e else {
                unreachable!("a rejection")
            };
            message
        }
        other => panic!("expected NotHolder, got {other:?}"),
    }
}

/// What a second identity's calls on dispatch's hold come to: `(what, call, hold in force,
/// expected)`, in both modes. Only calls that would write are refused; the stale rules come
/// first.
#[test]
fn a_second_identity_may_not_release_or_replace_the_holders_hold() {
    enum Expect {
        NotHolder,
        Stale,
        Done(Outcome),
    }
    let other = || CallerId::new(OTHER);
    let cases: Vec<(&str, Call, HoldState, Expect)> = vec![
        (
            "Release of the hold in force",
            release_by(5, other()),
            in_force(5),
            Expect::NotHolder,
        ),
        (
            "Hold of the largest instance (the u64::MAX attack)",
            hold_by(u64::MAX, other()),
            in_force(5),
            Expect::NotHolder,
        ),
        (
            "Hold of a newer instance",
            hold_by(6, other()),
            in_force(5),
            Expect::NotHolder,
        ),
        (
            "Hold over an unreadable hold with a holder",
            hold_by(6, other()),
            HoldState::Unreadable {
                value: "x".into(),
                holder: Some(DISPATCH.into()),
            },
            Expect::NotHolder,
        ),
        (
            "Release of another instance: stale first",
            release_by(4, other()),
            in_force(5),
            Expect::Stale,
        ),
        (
            "Hold of an older instance: stale first",
            hold_by(4, other()),
            in_force(5),
            Expect::Stale,
        ),
        (
            "Hold of the instance in force: changes nothing",
            hold_by(5, other()),
            in_force(5),
            Expect::Done(Outcome::AlreadyInForce),
        ),
    ];
    for mode in MODES {
        for (what, call, hold, expect) in &cases {
            let v = HeldView {
                hold: hold.clone(),
                stopped: true,
                ..view(mode)
            };
            let d = decide(call, &v, None);
            match expect {
                Expect::NotHolder => {
                    let message = expect_not_holder(d);
                    assert!(
                        message.contains(DISPATCH) && message.contains(OTHER),
                        "{mode} {what}: names the holder and the caller: {message}"
                    );
                    assert!(
                        message.contains("trainjobs/override"),
                        "{mode} {what}: says who else may: {message}"
                    );
                }
                Expect::Stale => expect_stale(d),
                Expect::Done(o) => assert_eq!(d, Decision::Done(*o), "{mode} {what}"),
            }
        }
    }
}

#[test]
fn the_holder_itself_releases_and_replaces_its_hold() {
    for mode in MODES {
        let v = held_view(mode, 5);
        let w = expect_write(decide(&release(5), &v, None));
        assert!(
            w.remove_annotations.contains(ANN_HOLD_HOLDER),
            "{mode}: Release removes the holder with the other marks"
        );
        let w = expect_write(decide(&hold(6), &v, None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_HOLDER).map(String::as_str),
            Some(DISPATCH)
        );
    }
}

#[test]
fn an_overrider_releases_or_replaces_another_holders_hold_and_becomes_the_holder() {
    let overrider = || CallerId::new("platform-admin").overriding();
    for mode in MODES {
        let v = held_view(mode, 5);
        let w = expect_write(decide(&hold_by(6, overrider()), &v, None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_HOLDER).map(String::as_str),
            Some("platform-admin"),
            "{mode}: an override Hold records the overrider"
        );
        assert_eq!(w.outcome, Outcome::Held);
        let w = expect_write(decide(&release_by(5, overrider()), &v, None));
        assert!(w.remove_annotations.contains(ANN_HOLD_HOLDER), "{mode}");
        // Override does not lift the stale rules.
        expect_stale(decide(&hold_by(4, overrider()), &v, None));
        expect_stale(decide(&release_by(4, overrider()), &v, None));
    }
}

#[test]
fn a_hold_from_before_holders_were_recorded_is_released_or_replaced_as_before() {
    for mode in MODES {
        let v = HeldView {
            hold: held_by(5, None),
            stopped: true,
            ..view(mode)
        };
        let w = expect_write(decide(&release_by(5, CallerId::new(OTHER)), &v, None));
        assert!(w.remove_annotations.contains(ANN_HOLD_HOLDER), "{mode}");
        let w = expect_write(decide(&hold_by(6, CallerId::new(OTHER)), &v, None));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_HOLDER).map(String::as_str),
            Some(OTHER),
            "{mode}: the next Hold records its caller"
        );
    }
}

#[test]
fn a_hold_of_the_instance_in_force_by_another_identity_keeps_the_holder() {
    for mode in MODES {
        // Someone lifted the stop behind the webhook's back: the stop is written again, and
        // the holder is left as it is.
        let v = HeldView {
            hold: in_force(5),
            stopped: false,
            ..view(mode)
        };
        let w = expect_write(decide(&hold_by(5, CallerId::new(OTHER)), &v, None));
        assert_eq!(w.stop, Some(true));
        assert_eq!(w.outcome, Outcome::AlreadyInForce);
        assert!(
            !keys(&w).contains(&ANN_HOLD_HOLDER),
            "{mode}: the holder is not touched"
        );
    }
}

#[test]
fn an_empty_recorded_holder_is_nobodys() {
    for mode in MODES {
        let v = HeldView {
            hold: held_by(5, Some("")),
            stopped: true,
            ..view(mode)
        };
        expect_not_holder(decide(&release(5), &v, None));
        expect_write(decide(&release_by(5, dispatch().overriding()), &v, None));
    }
}

#[test]
fn a_call_decided_again_with_override_compares_with_the_same_earlier_read() {
    for mode in MODES {
        // A conflict: the first read saw no hold; the second sees another's hold 5.
        let mut attempts = Attempts::new();
        let call = hold_by(6, CallerId::new(OTHER));
        expect_write(attempts.decide(&call, &view(mode)));
        attempts.conflicted().expect("one conflict");
        let v = held_view(mode, 5);
        expect_stale(attempts.decide(&call, &v));
        // Decided again with override, it still compares with the first read.
        expect_stale(attempts.decide_again(&call.clone().overriding(), &v));
        // Without a change of instance, the override decides it.
        let mut attempts = Attempts::new();
        expect_not_holder(attempts.decide(&call, &v));
        let w = expect_write(attempts.decide_again(&call.overriding(), &v));
        assert_eq!(
            w.set_annotations.get(ANN_HOLD_HOLDER).map(String::as_str),
            Some(OTHER)
        );
    }
}

// ---- Property: interleaved calls -------------------------------------------------------

mod interleaved {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    #[derive(Clone, Debug)]
    enum Op {
        /// A call begins (its first read happens at its first step): its kind, instance, and
        /// caller (dispatch, another identity, an overrider).
        Start(u8, u64, u8),
        /// The `n`th unfinished call (mod their number) takes its next step: a read and
        /// decision, or its write.
        Step(usize),
        /// Another writer updates the object.
        Touch(bool),
        Pods(bool),
        End(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..3, 0u64..6, 0u8..3).prop_map(|(k, i, c)| Op::Start(k, i, c)),
            6 => (0usize..8).prop_map(Op::Step),
            1 => any::<bool>().prop_map(Op::Touch),
            1 => any::<bool>().prop_map(Op::Pods),
            1 => any::<bool>().prop_map(Op::End),
        ]
    }

    struct InFlight {
        call: Call,
        attempts: Attempts,
        pending: Option<(HeldObject, Value)>,
        done: bool,
    }

    /// Checks one landed write of `call`, from `before` to `after`.
    fn check(call: &Call, before: &Sim, after: &Sim) -> Result<(), TestCaseError> {
        if let (Some(k), Some(j)) = (before.instance(), after.instance()) {
            prop_assert!(j >= k, "{call:?} replaced hold {k} by older hold {j}");
        }
        if let (Some(k), None) = (before.instance(), after.instance()) {
            prop_assert!(
                matches!(call, Call::Release { instance, .. } if *instance == k),
                "{call:?}: hold {k} lifted by another call"
            );
        }
        // Only its holder, or an overrider, lifts or replaces a hold whose holder is recorded;
        // a hold placed records its caller.
        let by = call.by();
        if before.instance() != after.instance()
            && let Some(holder) = before.holder()
        {
            prop_assert!(
                by.is_some_and(|b| b.username == holder || b.may_override),
                "{call:?} lifted or replaced {holder}'s hold"
            );
        }
        if after.instance().is_some() && after.instance() != before.instance() {
            let holder = after.holder();
            prop_assert_eq!(
                holder.as_deref(),
                by.map(|b| b.username.as_str()),
                "a hold placed records its caller"
            );
        }
        if after.instance().is_some() {
            prop_assert!(
                after.stopped(),
                "{call:?}: a hold in force that does not stop"
            );
        }
        prop_assert!(after.attempt() >= before.attempt(), "A went down");
        prop_assert!(
            after.attempt() <= before.attempt() + 1,
            "A rose by more than one"
        );
        if after.mode == Mode::Kueue {
            prop_assert_eq!(
                &after.trainjob["spec"],
                &before.trainjob["spec"],
                "spec.suspend written in Kueue mode"
            );
        }
        Ok(())
    }

    fn step(sim: &mut Sim, f: &mut InFlight) -> Result<(), TestCaseError> {
        match f.pending.take() {
            None => {
                let Ok(view) = sim.view(&f.call) else {
                    f.done = true;
                    return Ok(());
                };
                match f.attempts.decide(&f.call, &view) {
                    Decision::Done(_) | Decision::Fail(_) => f.done = true,
                    Decision::Write(w) => {
                        let mut obj = sim.get(w.target).unwrap_or(Value::Null);
                        prop_assert!(apply(&w, &mut obj, sim.mode).is_ok());
                        f.pending = Some((w.target, obj));
                    }
                }
            }
            Some((target, obj)) => {
                let before = sim.clone();
                match sim.put(target, obj) {
                    Ok(()) => {
                        check(&f.call, &before, sim)?;
                        f.done = true;
                    }
                    Err(_) => f.done = f.attempts.conflicted().is_err(),
                }
            }
        }
        Ok(())
    }

    fn run(mode: Mode, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut sim = Sim::new(mode);
        let mut calls: Vec<InFlight> = Vec::new();
        for op in ops {
            match op {
                Op::Start(kind, instance, caller) => calls.push(InFlight {
                    call: {
                        let by = match caller {
                            0 => dispatch(),
                            1 => CallerId::new(OTHER),
                            _ => CallerId::new("platform-admin").overriding(),
                        };
                        match kind {
                            0 => hold_by(instance, by),
                            1 => release_by(instance, by),
                            _ => Call::Open,
                        }
                    },
                    attempts: Attempts::new(),
                    pending: None,
                    done: false,
                }),
                Op::Step(n) => {
                    let live: Vec<usize> = (0..calls.len()).filter(|&i| !calls[i].done).collect();
                    if !live.is_empty() {
                        let i = live[n % live.len()];
                        step(&mut sim, &mut calls[i])?;
                    }
                }
                Op::Touch(trainjob) => sim.touch(if trainjob {
                    HeldObject::TrainJob
                } else {
                    held_target(mode)
                }),
                Op::Pods(p) => sim.pods_remain = p,
                Op::End(succeeded) => sim.end(succeeded),
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn older_instance_never_replaces_a_newer_one_plain(ops in prop::collection::vec(op(), 1..80)) {
            run(Mode::Plain, ops)?;
        }

        #[test]
        fn older_instance_never_replaces_a_newer_one_kueue(ops in prop::collection::vec(op(), 1..80)) {
            run(Mode::Kueue, ops)?;
        }

        /// The same runs, read for the holder rule (checked after every landed write): calls
        /// by dispatch, a second identity and an overrider interleave, and no hold whose
        /// holder is recorded is lifted or replaced but by its holder or an overrider.
        #[test]
        fn a_hold_is_lifted_or_replaced_only_by_its_holder_or_an_overrider(
            kueue in any::<bool>(),
            ops in prop::collection::vec(op(), 1..80),
        ) {
            run(if kueue { Mode::Kueue } else { Mode::Plain }, ops)?;
        }
    }
}
