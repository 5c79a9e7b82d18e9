//! The decisions of leader election, apart from its I/O (see the parent module for the
//! algorithm): what to do with the Lease as read, whether the leader must give up, and what
//! a failed request means. Everything here is a pure function of what was seen and how long
//! ago, so each rule is a row in the tables below.

use std::time::Duration;

/// The Lease as read: its holder (empty: released) and the duration it declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen<'a> {
    pub holder: &'a str,
    /// `leaseDurationSeconds`; `None` falls back to our own lease duration.
    pub duration: Option<Duration>,
    /// How long ago, on our monotonic clock, we first saw the Lease as it is now (its
    /// resourceVersion unchanged since).
    pub unchanged_for: Duration,
}

/// What one acquire-or-renew step does with the Lease it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, holding it.
    Create,
    /// Write ourselves as holder, preconditioned on what was read. `transition`: someone
    /// else held it (or nobody: released), so `leaseTransitions` rises and `acquireTime` is
    /// now; otherwise it is our renewal.
    Write { transition: bool },
    /// Another replica holds it and has renewed within its duration: stand by.
    Standby { holder: String },
}

/// Decides the step for `identity` given the Lease read (`None`: it does not exist).
/// `own_duration` is used when the Lease declares none.
pub fn step(identity: &str, lease: Option<&Seen<'_>>, own_duration: Duration) -> Step {
    let Some(seen) = lease else {
        return Step::Create;
    };
    if seen.holder == identity {
        return Step::Write { transition: false };
    }
    if seen.holder.is_empty() {
        return Step::Write { transition: true };
    }
    let duration = seen.duration.unwrap_or(own_duration);
    if seen.unchanged_for > duration {
        Step::Write { transition: true }
    } else {
        Step::Standby {
            holder: seen.holder.to_owned(),
        }
    }
}

/// Whether the leader must stop: it has not renewed for `renew_deadline` (shorter than the
/// lease duration, so it stops before any standby may take over).
pub fn must_give_up(since_last_renew: Duration, renew_deadline: Duration) -> bool {
    since_last_renew >= renew_deadline
}

/// What a failed Lease request means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Another replica wrote first (409): ordinary contention; read again.
    Contended,
    /// This replica cannot lead as configured, whatever it retries: RBAC refuses it, the
    /// credentials are rejected, the Lease namespace does not exist, or the Lease is invalid.
    /// Loud: an error log naming the cause, the failure metric, and `/readyz` failing until
    /// an attempt gets through.
    CannotLead(String),
    /// The apiserver or the network failed; retried, and logged as a warning.
    Transient,
}

/// Which request on the Lease failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Read,
    Create,
    /// The preconditioned replace (acquire, renew or release).
    Replace,
}

/// Classifies a failed `request` on the Lease in `namespace` by its HTTP status (`None`: no
/// answer, a network or client error).
pub fn failure(request: Request, status: Option<u16>, namespace: &str) -> Failure {
    match status {
        Some(409) => Failure::Contended,
        // The Lease was deleted under us: read again (and create it). Only a create's 404
        // says the namespace is missing.
        Some(404) if request != Request::Create => Failure::Transient,
        Some(401) => Failure::CannotLead(
            "the apiserver rejects this replica's credentials (401): check its kubeconfig or service account token".to_owned(),
        ),
        Some(403) => Failure::CannotLead(format!(
            "RBAC forbids this replica's Leases in namespace {namespace} (403): bind the chart's leader-election Role there, or point --lease-namespace at the release namespace"
        )),
        Some(404) => Failure::CannotLead(format!(
            "namespace {namespace} does not exist (404): create it or fix --lease-namespace"
        )),
        Some(400 | 422) => Failure::CannotLead(format!(
            "the apiserver refuses the Lease as invalid ({}): check --lease-name and --identity",
            status.unwrap_or_default()
        )),
        _ => Failure::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "replica-a";
    const D: Duration = Duration::from_secs(15);

    fn seen(holder: &str, unchanged_for: u64) -> Seen<'_> {
        Seen {
            holder,
            duration: None,
            unchanged_for: Duration::from_secs(unchanged_for),
        }
    }

    #[test]
    fn acquire_or_renew_steps() {
        let cases: &[(&str, Option<Seen<'_>>, Step)] = &[
            ("no Lease: create it", None, Step::Create),
            (
                "ours: renew, no transition",
                Some(seen(ME, 100)),
                Step::Write { transition: false },
            ),
            (
                "released (no holder): take it at once",
                Some(seen("", 0)),
                Step::Write { transition: true },
            ),
            (
                "held by another, renewed recently: stand by",
                Some(seen("replica-b", 3)),
                Step::Standby {
                    holder: "replica-b".to_owned(),
                },
            ),
            (
                "held by another, exactly its duration: not yet",
                Some(seen("replica-b", 15)),
                Step::Standby {
                    holder: "replica-b".to_owned(),
                },
            ),
            (
                "held by another, expired on our clock: take it over",
                Some(seen("replica-b", 16)),
                Step::Write { transition: true },
            ),
            (
                "the Lease's own duration wins over ours",
                Some(Seen {
                    holder: "replica-b",
                    duration: Some(Duration::from_secs(60)),
                    unchanged_for: Duration::from_secs(30),
                }),
                Step::Standby {
                    holder: "replica-b".to_owned(),
                },
            ),
            (
                "a short declared duration expires sooner",
                Some(Seen {
                    holder: "replica-b",
                    duration: Some(Duration::from_secs(1)),
                    unchanged_for: Duration::from_secs(2),
                }),
                Step::Write { transition: true },
            ),
        ];
        for (what, lease, want) in cases {
            assert_eq!(&step(ME, lease.as_ref(), D), want, "{what}");
        }
    }

    #[test]
    fn the_leader_gives_up_at_the_renew_deadline() {
        let deadline = Duration::from_secs(10);
        assert!(!must_give_up(Duration::from_secs(9), deadline));
        assert!(must_give_up(Duration::from_secs(10), deadline));
        assert!(must_give_up(Duration::from_secs(11), deadline));
    }

    #[test]
    fn failures_are_contention_configuration_or_transient() {
        use Request::{Create, Read, Replace};
        assert_eq!(failure(Replace, Some(409), "ns"), Failure::Contended);
        for code in [401, 403, 404, 400, 422] {
            assert!(
                matches!(failure(Create, Some(code), "ns"), Failure::CannotLead(_)),
                "{code}"
            );
        }
        let Failure::CannotLead(why) = failure(Read, Some(403), "team-a") else {
            panic!("403 cannot lead");
        };
        assert!(why.contains("team-a") && why.contains("RBAC"), "{why}");
        // A Lease deleted while we lead or stand by: read again and create it.
        assert_eq!(failure(Replace, Some(404), "ns"), Failure::Transient);
        assert_eq!(failure(Read, Some(404), "ns"), Failure::Transient);
        for code in [Some(500), Some(503), Some(429), Some(504), None] {
            assert_eq!(failure(Replace, code, "ns"), Failure::Transient, "{code:?}");
        }
    }
}
