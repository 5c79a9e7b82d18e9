//! The hold state machine: `(call, read) → write | done | error`, and the retry budget.

use super::{Call, CallKind, CallerId, HeldView, HoldError, Outcome, Seen, Write, printable};
use crate::{
    mode::Mode,
    names::{
        ANN_ATTEMPT, ANN_HOLD_FOUND, ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT,
        ANN_HOLD_REASON, ANN_OPENED,
    },
};

/// How many writes a call makes at most: after the eighth 409 it fails with
/// [`HoldError::Conflict`].
pub const MAX_TRIES: u32 = 8;

/// The seed's plain-mode Release: "only when no pod of it remains. If the pods are still
/// there it writes nothing and returns ErrPodsRemain." Whether `decision`, made before the
/// pods were listed and carried into the hold's mode (`switch::carried_write`), must have
/// them listed first: a write that lets the TrainJob run (a Release or an Open unsuspending
/// it, or a Workload activated while holdfast runs in plain mode, `configured`), where no
/// readmission gate checks the pods. If any remain, the call is [`decide`]d again with
/// [`HeldView::pods_remain`] set, and refuses with [`HoldError::PodsRemain`]. In kueue mode
/// nothing is listed here: a Workload activated goes through the gate, which waits for the
/// pods, and a plain-mode hold released leaves `spec.suspend` to Kueue and the gate
/// (`carried_write` drops the unsuspend), so `acting` plain never makes a difference there.
pub fn looks_for_pods(decision: &Decision, configured: Mode, acting: Mode) -> bool {
    matches!(decision, Decision::Write(w) if w.stop == Some(false))
        && (configured == Mode::Plain || acting == Mode::Plain)
}

/// What to do after one read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Make this update, preconditioned on the read's resourceVersion. On success the call
    /// returns `write.outcome`; on a 409 it records the conflict and reads again.
    Write(Write),
    /// Nothing to write: the call has succeeded.
    Done(Outcome),
    /// Nothing to write: the call has failed.
    Fail(HoldError),
}

/// Decides `call` on `read`.
///
/// `after_conflict` is `Some(what the previous read saw)` when this read follows a 409 on
/// this call's own write (or a write whose answer was lost), and `None` on the first read.
/// Only Hold looks at it.
///
/// The rules are the seed's (holds-are-workload-deactivation):
///
/// - **Hold(m)**: `m` in force → done (an earlier try landed). A newer instance in force →
///   `StaleHold`. After a conflict, an instance in force other than the one the previous
///   read saw → `StaleHold`. Otherwise (none in force, an older one, or an unreadable one)
///   → one update: stop, and set `hold-instance`, `hold-placed-at`, `hold-holder` (the
///   caller's username) and `hold-reason` (or remove a leftover reason); in Kueue mode also
///   add the hold finalizer. Never touches `opened` or A.
/// - **Release(m)**: `m` not in force (another instance, none, or an unreadable one) →
///   `StaleHold`. Plain mode: remove the hold annotations; if the TrainJob was opened and has
///   not ended, also unsuspend it and raise A in the same update, but only if no pod of it
///   remains, else `PodsRemain` and nothing written. Kueue mode: remove the annotations and
///   the hold finalizer and set `active: true` in one update; the readmission gate checks
///   pods and raises A. Either way, a stop the hold found (`hold-found`: someone else's
///   suspend, Kueue's own deactivation) is left in place: Release restores what the hold
///   found, and never resets Kueue's requeueing limit or hides its reason.
/// - **Open**: already opened → done. Otherwise write the opened mark on the TrainJob; in
///   plain mode, if no hold is in force and the job has not ended, unsuspend it and raise A
///   in the same update — but only if no pod of the job's name remains (a TrainJob deleted
///   and created again under its name may still have an execution terminating), else
///   `PodsRemain` and nothing written. A hold in force is never lifted by Open.
///
/// **The holder.** A call that would replace or lift a hold in force — a Release(m) of the
/// instance in force, a Hold(m) over another instance (an older one, or an unreadable one) —
/// is refused `NotHolder` when the hold records a holder (`hold-holder`) other than the
/// caller's username, unless the caller may override ([`CallerId::may_override`]); an
/// override Hold records the overrider as the new holder. The stale rules come first: a call
/// that would write nothing anyway (`StaleHold`, `AlreadyInForce`) is answered so, whoever
/// makes it, so a Hold(m) of the instance in force by another identity changes nothing and
/// leaves the holder as it is. A hold that records no holder (placed by a holdfast that did
/// not record them) is released or replaced by any caller, as before, and the next Hold
/// records its caller.
///
/// Hold records in `hold-found` what stopped the object when it was placed (the
/// [`HeldView::stop_cause`]), or keeps the record of the hold it replaces, whose stop it
/// found.
///
/// Choices where the seed is silent:
/// - Hold(m) with `m` in force on an object that is not stopped and has not ended (someone
///   lifted the stop behind the webhook's back) writes the stop again rather than report a
///   hold that is not holding.
/// - An opened TrainJob with no hold that is suspended (someone else suspended it) is not
///   restarted by a second Open: the gate is already open, and that suspend is not ours.
pub fn decide(call: &Call, read: &HeldView, after_conflict: Option<Seen>) -> Decision {
    match call {
        Call::Hold {
            instance,
            reason,
            placed_at,
            by,
        } => decide_hold(
            *instance,
            reason.as_deref(),
            &crate::rfc3339::seconds(*placed_at),
            by,
            read,
            after_conflict,
        ),
        Call::Release { instance, by } => decide_release(*instance, by, read),
        Call::Open => decide_open(read),
    }
}

fn decide_hold(
    m: u64,
    reason: Option<&str>,
    placed_at: &str,
    by: &CallerId,
    read: &HeldView,
    after_conflict: Option<Seen>,
) -> Decision {
    let target = CallKind::Hold.target(read.mode);
    let seen = read.seen();
    match seen {
        Seen::Instance(k) if k == m => {
            if read.stopped || read.ended {
                return Decision::Done(Outcome::AlreadyInForce);
            }
            let mut w = Write::new(target, &read.resource_version, Outcome::AlreadyInForce);
            w.stop = Some(true);
            w.hold_finalizer = hold_finalizer(read.mode, true);
            return Decision::Write(w);
        }
        Seen::Instance(k) if k > m => {
            return Decision::Fail(HoldError::stale(format!(
                "hold {k} is in force, newer than hold {m}"
            )));
        }
        _ => {}
    }
    if let Some(prev) = after_conflict
        && prev != seen
    {
        return Decision::Fail(HoldError::stale(format!(
            "hold {m} lost a write race: the hold in force changed from {} to {}",
            describe(prev),
            describe(seen)
        )));
    }
    if let Some(e) = not_holder(read, by, || {
        format!("hold {m} may not replace {}", describe(seen))
    }) {
        return Decision::Fail(e);
    }
    let mut w = Write::new(target, &read.resource_version, Outcome::Held);
    w.stop = Some(true);
    w.hold_finalizer = hold_finalizer(read.mode, true);
    w.set(ANN_HOLD_INSTANCE, m.to_string());
    w.set(ANN_HOLD_PLACED_AT, placed_at);
    w.set(ANN_HOLD_HOLDER, by.username.as_str());
    match reason {
        Some(r) => w.set(ANN_HOLD_REASON, r),
        None => w.remove(ANN_HOLD_REASON),
    }
    // A hold replacing ours keeps what the first one found; otherwise record what stops
    // the object now, if anything.
    let found = if read.hold.is_held() {
        read.found.as_deref()
    } else {
        read.stop_cause.as_deref()
    };
    match found {
        Some(f) => w.set(ANN_HOLD_FOUND, f),
        None => w.remove(ANN_HOLD_FOUND),
    }
    Decision::Write(w)
}

fn decide_release(m: u64, by: &CallerId, read: &HeldView) -> Decision {
    match read.seen() {
        Seen::Instance(k) if k == m => {}
        other => {
            return Decision::Fail(HoldError::stale(format!(
                "release of hold {m} refused: {} is in force",
                describe(other)
            )));
        }
    }
    if let Some(e) = not_holder(read, by, || format!("hold {m} may not be released")) {
        return Decision::Fail(e);
    }
    let target = CallKind::Release.target(read.mode);
    let mut w = Write::new(
        target,
        &read.resource_version,
        Outcome::Released { resumed: false },
    );
    for key in [
        ANN_HOLD_INSTANCE,
        ANN_HOLD_REASON,
        ANN_HOLD_PLACED_AT,
        ANN_HOLD_HOLDER,
        ANN_HOLD_FOUND,
    ] {
        w.remove(key);
    }
    // What the hold found stopped stays stopped.
    let restart = read.found.is_none();
    match read.mode {
        Mode::Plain => {
            if read.opened && !read.ended && restart {
                if read.pods_remain {
                    return Decision::Fail(HoldError::PodsRemain);
                }
                w.stop = Some(false);
                w.set(ANN_ATTEMPT, read.attempt.saturating_add(1).to_string());
                w.outcome = Outcome::Released { resumed: true };
            }
        }
        Mode::Kueue => {
            w.hold_finalizer = hold_finalizer(read.mode, false);
            if restart {
                w.stop = Some(false);
                w.outcome = Outcome::Released { resumed: true };
            }
        }
    }
    Decision::Write(w)
}

/// Kueue mode: the hold finalizer goes on and off the Workload with the hold, in the same
/// update (`holdfast.dev/hold`, see [`crate::names::HOLD_FINALIZER`]). Plain mode: none.
fn hold_finalizer(mode: Mode, add: bool) -> Option<bool> {
    (mode == Mode::Kueue).then_some(add)
}

fn decide_open(read: &HeldView) -> Decision {
    if read.opened {
        return Decision::Done(Outcome::AlreadyOpen);
    }
    let target = CallKind::Open.target(read.mode);
    let mut w = Write::new(
        target,
        &read.resource_version,
        Outcome::Opened { started: false },
    );
    w.set(ANN_OPENED, "true");
    if read.mode == Mode::Plain && !read.hold.is_held() && !read.ended {
        if read.pods_remain {
            return Decision::Fail(HoldError::PodsRemain);
        }
        w.stop = Some(false);
        w.set(ANN_ATTEMPT, read.attempt.saturating_add(1).to_string());
        w.outcome = Outcome::Opened { started: true };
    }
    Decision::Write(w)
}

/// `NotHolder` when the hold in force records a holder other than `by` and `by` may not
/// override; `what` says what was refused. `None`: the call may go on (no hold, no holder
/// recorded, the holder itself, or an overrider).
fn not_holder(read: &HeldView, by: &CallerId, what: impl FnOnce() -> String) -> Option<HoldError> {
    let holder = read.hold.holder()?;
    if holder == by.username || by.may_override {
        return None;
    }
    Some(HoldError::not_holder(format!(
        "{} by {}: the hold in force was placed by {}, and only its holder may release it or replace it with another instance; ask {} to release it, or ask someone allowed to override it (create on holdfast.dev trainjobs/override in the TrainJob's namespace)",
        what(),
        printable(&by.username),
        printable(holder),
        printable(holder),
    )))
}

fn describe(seen: Seen) -> String {
    match seen {
        Seen::Absent => "no hold".to_owned(),
        Seen::Instance(k) => format!("hold {k}"),
        Seen::Unreadable => "a hold with an unreadable instance".to_owned(),
    }
}

/// The executor's loop state for one call: how many writes have lost, and what the last
/// read saw. The executor's loop is then:
///
/// ```text
/// let mut attempts = Attempts::new();
/// loop {
///     meta.check_deadline(now())?;
///     let read = GET target (and, in Kueue mode, the other object);
///     let view = HeldView::read(&call, mode, &trainjob, workload.as_ref(), pods_remain)?;
///     match attempts.decide(&call, &view) {
///         Decision::Done(outcome) => return Ok(outcome),
///         Decision::Fail(err) => return Err(err),
///         Decision::Write(write) => {
///             apply(&write, &mut read, mode)?;
///             let timeout = meta.time_left(now())?;
///             match PUT read (timeout) {
///                 Ok(_) => return Ok(write.outcome),
///                 Err(409) => attempts.conflicted()?,
///                 Err(other) => return Err(..),
///             }
///         }
///     }
/// }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    conflicts: u32,
    last_seen: Option<Seen>,
    /// What the last write would have reported, while its outcome is unknown (its answer was
    /// lost): the next read decides whether it landed.
    unanswered: Option<Outcome>,
    /// What the last read's decision compared with (`after_conflict` of [`decide`]), for
    /// [`Attempts::decide_again`].
    compared_with: Option<Seen>,
}

impl Attempts {
    pub fn new() -> Self {
        Self::default()
    }

    /// [`decide`]s `call` on `read`, passing what the previous read saw if this read follows
    /// a conflict or a write whose answer was lost, and remembers what this read saw.
    ///
    /// After a lost answer the read tells what happened, and the answer is what is true:
    /// when the read shows the lost write's effect — Hold(m): `m` in force and stopped;
    /// Open: the opened mark; Release(m): no hold at all — it landed (or an identical call's
    /// did), and the call succeeds with the outcome its write would have had. A Release(m)
    /// whose read shows another instance in force cannot tell whether its write landed before
    /// that one, and is [`HoldError::Unknown`]. Otherwise the call decides again.
    pub fn decide(&mut self, call: &Call, read: &HeldView) -> Decision {
        self.compared_with = if self.conflicts > 0 || self.unanswered.is_some() {
            self.last_seen
        } else {
            None
        };
        self.last_seen = Some(read.seen());
        self.decide_again(call, read)
    }

    /// Decides `call` again on the read the last [`Attempts::decide`] was given, as that one
    /// did (comparing with the same earlier read): for a call remade once something outside
    /// the read is known, such as whether its caller may override another holder's hold
    /// ([`HoldError::is_not_holder`]).
    pub fn decide_again(&self, call: &Call, read: &HeldView) -> Decision {
        if let Some(outcome) = self.unanswered {
            match (call, read.seen()) {
                // The lost write's effect is there: it landed (or an identical call's did);
                // the call reports what its write did.
                (Call::Hold { instance, .. }, Seen::Instance(k))
                    if k == *instance && (read.stopped || read.ended) =>
                {
                    return Decision::Done(outcome);
                }
                (Call::Open, _) if read.opened => return Decision::Done(outcome),
                (Call::Release { .. }, Seen::Absent) => return Decision::Done(outcome),
                (Call::Release { instance, .. }, Seen::Instance(k)) if k != *instance => {
                    return Decision::Fail(HoldError::unknown(format!(
                        "the release of hold {instance} was sent and its answer lost; hold {k} is in force now, so whether it landed cannot be told: read Status"
                    )));
                }
                (Call::Release { instance, .. }, Seen::Unreadable) => {
                    return Decision::Fail(HoldError::unknown(format!(
                        "the release of hold {instance} was sent and its answer lost; an unreadable hold is in force now, so whether it landed cannot be told: read Status"
                    )));
                }
                _ => {}
            }
        }
        decide(call, read, self.compared_with)
    }

    /// Records that the write decided on the last read was sent and its answer lost (a
    /// transport error, a timeout, a 5xx): it may have landed. Unlike a 409 this spends no
    /// try; the call reads again until it knows or its deadline passes.
    pub fn unanswered(&mut self, outcome: Outcome) {
        self.unanswered = Some(outcome);
    }

    /// Whether a write of this call was sent and its outcome is still unknown.
    pub fn outcome_unknown(&self) -> bool {
        self.unanswered.is_some()
    }

    /// Records that the write decided on the last read failed with a 409. Returns
    /// [`HoldError::Conflict`] once [`MAX_TRIES`] writes have failed so.
    ///
    /// If an earlier write's answer was lost, the call ends [`HoldError::Unknown`] instead of
    /// `Conflict`: that write may have landed (a 409 on a later one does not prove otherwise:
    /// the lost one may still have been on its way).
    pub fn conflicted(&mut self) -> Result<(), HoldError> {
        self.conflicts = self.conflicts.saturating_add(1);
        if self.conflicts < MAX_TRIES {
            return Ok(());
        }
        if self.unanswered.is_some() {
            return Err(HoldError::unknown(format!(
                "an earlier write of this call was sent and its answer lost, then {} writes lost to other writers: whether the call took effect cannot be told; read Status",
                self.conflicts
            )));
        }
        Err(HoldError::Conflict {
            tries: self.conflicts,
        })
    }

    /// How many writes have failed with a 409 so far.
    pub fn conflicts(&self) -> u32 {
        self.conflicts
    }
}
