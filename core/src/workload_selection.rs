//! Which Workload a hold call acts on, among a TrainJob's Workloads (Kueue mode, and a hold
//! left from it in plain mode). Only the Workloads the TrainJob owns as controller count
//! ([`owned_by`]); the hold API reads and writes the one [`select_workload`] (or, where no
//! readmission controller runs to move a hold, [`select_workload_without_mover`]) chooses,
//! and the webhook refuses to unsuspend a TrainJob while any of them carries a hold
//! ([`hold_on_workloads`]). How a hold is moved off a Workload Kueue replaces is the
//! readmission gate's ([`crate::readmission`]).

use serde_json::Value;

use crate::{
    hold::{HoldState, object},
    names::{TRAINER_GROUP, TRAINJOB_KIND},
    readmission::{has_hold_finalizer, terminating},
};

/// The Workload a hold call reads and writes, among a TrainJob's Workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selected<'a> {
    /// None to act on: the call is `Rejected { cause: NoWorkload }` (Open waits).
    None,
    /// This one.
    Workload(&'a Value),
    /// A held Workload being deleted still carries its hold while a replacement exists: the
    /// readmission controller is moving the hold. Read again shortly.
    TransferPending,
}

/// Whether `workload` is TrainJob `trainjob_uid`'s: its controller ownerReference is that
/// TrainJob (`trainer.kubeflow.org`, kind `TrainJob`, the uid). A label alone (Kueue's
/// `kueue.x-k8s.io/job-uid`, which anyone who may create a Workload can copy) never makes a
/// Workload the TrainJob's.
pub fn owned_by(workload: &Value, trainjob_uid: &str) -> bool {
    !trainjob_uid.is_empty()
        && workload
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.get("controller").and_then(Value::as_bool) == Some(true)
                        && r.get("uid").and_then(Value::as_str) == Some(trainjob_uid)
                        && r.get("kind").and_then(Value::as_str) == Some(TRAINJOB_KIND)
                        && r.get("apiVersion")
                            .and_then(Value::as_str)
                            .is_some_and(|v| v.split('/').next() == Some(TRAINER_GROUP))
                })
            })
}

/// Chooses the Workload a hold call acts on, among `items` (listed by Kueue's job-uid label,
/// an index only):
///
/// - only Workloads the TrainJob `trainjob_uid` owns as controller ([`owned_by`]) count: a
///   decoy carrying the label is ignored;
/// - a Workload being deleted without the hold finalizer is ignored: it is going away, and
///   no finalizer can be added to it;
/// - a held Workload being deleted (with the finalizer) next to a live one: the hold is
///   being moved, so wait ([`Selected::TransferPending`]);
/// - else the newest live Workload (by creation time, then name);
/// - else the newest held Workload being deleted: with no replacement it is the held object.
pub fn select_workload<'a>(items: &'a [Value], trainjob_uid: &str) -> Selected<'a> {
    let owned = || items.iter().filter(|w| owned_by(w, trainjob_uid));
    let live = owned().filter(|w| !terminating(w)).max_by_key(newest);
    let source = owned()
        .filter(|w| terminating(w) && has_hold_finalizer(w))
        .max_by_key(newest);
    match (live, source) {
        (Some(_), Some(_)) => Selected::TransferPending,
        (Some(w), None) | (None, Some(w)) => Selected::Workload(w),
        (None, None) => Selected::None,
    }
}

/// The order of [`select_workload`]'s "newest": creation time, then name.
fn newest(w: &&Value) -> (String, String) {
    let text = |p: &str| {
        w.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (text("/metadata/creationTimestamp"), text("/metadata/name"))
}

/// [`select_workload`] where no readmission controller runs to move a hold (plain mode, a
/// hold left from kueue mode). No gate moves a hold here, so the Workload that carries one is
/// the held object, live or being deleted, whatever else the TrainJob owns: a newer Workload
/// someone created beside it (a decoy owned by the same TrainJob) must not hide the hold from
/// the hold API. Without a hold, the newest live one; a held Workload being deleted next to a
/// live replacement is the held object itself — waiting for a move nobody makes would leave
/// the hold unreleasable — so Release lifts it there (its finalizer with it).
pub fn select_workload_without_mover<'a>(items: &'a [Value], trainjob_uid: &str) -> Selected<'a> {
    let held = items
        .iter()
        .filter(|w| owned_by(w, trainjob_uid) && object::hold_state(w) != HoldState::Absent)
        .max_by_key(newest);
    if let Some(w) = held {
        return Selected::Workload(w);
    }
    match select_workload(items, trainjob_uid) {
        Selected::TransferPending => items
            .iter()
            .filter(|w| owned_by(w, trainjob_uid) && terminating(w) && has_hold_finalizer(w))
            .max_by_key(newest)
            .map_or(Selected::None, Selected::Workload),
        other => other,
    }
}

/// The hold in force on any Workload among `items` that TrainJob `trainjob_uid` owns
/// ([`owned_by`]), described for a message ("1", or the unreadable value), if any. The
/// webhook refuses to let the TrainJob be unsuspended while there is one.
pub fn hold_on_workloads(items: &[Value], trainjob_uid: &str) -> Option<String> {
    items
        .iter()
        .filter(|w| owned_by(w, trainjob_uid))
        .find_map(|w| match object::hold_state(w) {
            HoldState::Absent => None,
            HoldState::InForce(r) => Some(r.instance.to_string()),
            HoldState::Unreadable { value, .. } => Some(format!("{value:?} (unreadable)")),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::HOLD_FINALIZER;
    use serde_json::json;

    fn workload_json(name: &str, created: &str, deleting: bool, finalizer: bool) -> Value {
        let mut w = json!({"metadata": {"name": name, "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "mnist", "uid": "tj-uid", "controller": true}]}});
        if deleting {
            w["metadata"]["deletionTimestamp"] = json!("2026-11-29T12:00:00Z");
        }
        if finalizer {
            w["metadata"]["finalizers"] = json!([HOLD_FINALIZER]);
        }
        w
    }

    #[test]
    fn hold_calls_act_on_the_live_workload_or_wait_for_a_transfer() {
        let old = "2026-11-29T11:00:00Z";
        let new = "2026-11-29T11:05:00Z";
        let name = |s: Selected<'_>| match s {
            Selected::Workload(w) => w["metadata"]["name"].as_str().unwrap_or("?").to_owned(),
            Selected::None => "none".to_owned(),
            Selected::TransferPending => "wait".to_owned(),
        };
        let cases = [
            ("no Workload", vec![], "none"),
            ("one live", vec![workload_json("a", old, false, false)], "a"),
            (
                "the newest live",
                vec![
                    workload_json("b", new, false, false),
                    workload_json("a", old, false, false),
                ],
                "b",
            ),
            (
                "a deleted unheld one is ignored",
                vec![workload_json("a", old, true, false)],
                "none",
            ),
            (
                "deleted unheld next to its replacement",
                vec![
                    workload_json("a", old, true, false),
                    workload_json("b", new, false, false),
                ],
                "b",
            ),
            (
                "a deleted held one with no replacement is the held object",
                vec![workload_json("a", old, true, true)],
                "a",
            ),
            (
                "a deleted held one next to its replacement: the hold is moving",
                vec![
                    workload_json("a", old, true, true),
                    workload_json("b", new, false, false),
                ],
                "wait",
            ),
        ];
        for (label, items, want) in cases {
            assert_eq!(name(select_workload(&items, "tj-uid")), want, "{label}");
            // With no mover (plain mode, a hold left from kueue mode) the held one being deleted
            // is the held object; everything else is chosen alike.
            let without = name(select_workload_without_mover(&items, "tj-uid"));
            assert_eq!(without, if want == "wait" { "a" } else { want }, "{label}");
        }
    }

    /// Attack (review of the mode switch): in plain mode, with a hold left on Workload `held` from
    /// kueue mode, a user creates a newer Workload owned by the same TrainJob. With no gate to
    /// move holds, the held Workload stays the held object: the decoy must not make the hold API
    /// see "not held" (and Open start the job past the hold).
    #[test]
    fn without_a_mover_a_newer_owned_workload_never_hides_the_one_carrying_a_hold() {
        let mut held = workload_json("held", "2026-11-29T11:00:00Z", false, true);
        held["metadata"]["annotations"] = json!({"holdfast.dev/hold-instance": "4"});
        let decoy = workload_json("decoy", "2026-11-29T12:00:00Z", false, false);
        let items = vec![held.clone(), decoy];
        match select_workload_without_mover(&items, "tj-uid") {
            Selected::Workload(w) => assert_eq!(w["metadata"]["name"], "held"),
            other => panic!("{other:?}"),
        }
        // Being deleted changes nothing: its finalizer keeps it, and it is still the held object.
        held["metadata"]["deletionTimestamp"] = json!("2026-11-29T12:30:00Z");
        let items = vec![
            held,
            workload_json("decoy", "2026-11-29T12:00:00Z", false, false),
        ];
        match select_workload_without_mover(&items, "tj-uid") {
            Selected::Workload(w) => assert_eq!(w["metadata"]["name"], "held"),
            other => panic!("{other:?}"),
        }
    }

    /// Seam: a decoy Workload carrying the TrainJob's job-uid label captured the hold. Only the
    /// TrainJob's controller ownerReference makes a Workload its own.
    #[test]
    fn a_decoy_workload_never_captures_a_hold() {
        let real = workload_json("real", "2026-11-29T11:00:00Z", false, false);
        let newer = "2026-11-29T12:00:00Z";
        let unowned = json!({"metadata": {"name": "decoy", "creationTimestamp": newer,
            "labels": {"kueue.x-k8s.io/job-uid": "tj-uid"}}});
        let not_controller = with_owner(newer, "tj-uid", false, "TrainJob");
        let other_uid = with_owner(newer, "someone-else", true, "TrainJob");
        let other_kind = with_owner(newer, "tj-uid", true, "JobSet");
        for decoy in [unowned, not_controller, other_uid, other_kind] {
            let items = vec![real.clone(), decoy.clone()];
            match select_workload(&items, "tj-uid") {
                Selected::Workload(w) => assert_eq!(w["metadata"]["name"], "real", "{decoy}"),
                other => panic!("{decoy}: {other:?}"),
            }
            assert!(!owned_by(&decoy, "tj-uid"));
            assert_eq!(select_workload(&[decoy], "tj-uid"), Selected::None);
        }
        assert!(!owned_by(&real, ""), "an empty uid owns nothing");
    }

    fn with_owner(created: &str, uid: &str, controller: bool, kind: &str) -> Value {
        json!({"metadata": {"name": "decoy", "creationTimestamp": created,
            "labels": {"kueue.x-k8s.io/job-uid": "tj-uid"},
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
                "name": "mnist", "uid": uid, "controller": controller}]}})
    }

    /// The webhook refuses to let a TrainJob be unsuspended while one of its own Workloads
    /// carries a hold; a hold on a decoy (not owned as controller) does not count.
    #[test]
    fn a_hold_on_any_own_workload_is_found_and_one_on_a_decoy_is_not() {
        let t = "2026-11-29T11:00:00Z";
        let mut held = workload_json("a", t, false, false);
        held["metadata"]["annotations"] = json!({"holdfast.dev/hold-instance": "4"});
        let unheld = workload_json("b", t, false, false);
        assert_eq!(
            hold_on_workloads(std::slice::from_ref(&unheld), "tj-uid"),
            None
        );
        assert_eq!(
            hold_on_workloads(&[unheld.clone(), held.clone()], "tj-uid"),
            Some("4".to_owned())
        );
        let mut decoy = with_owner(t, "someone-else", true, "TrainJob");
        decoy["metadata"]["annotations"] = json!({"holdfast.dev/hold-instance": "9"});
        assert_eq!(hold_on_workloads(&[unheld, decoy], "tj-uid"), None);
        let mut damaged = held;
        damaged["metadata"]["annotations"] = json!({"holdfast.dev/hold-instance": "x"});
        assert!(
            hold_on_workloads(&[damaged], "tj-uid").is_some_and(|h| h.contains("unreadable")),
            "an unreadable hold still keeps the job stopped"
        );
    }
}
