//! The reconciliation's decisions, one row per behaviour (the book's "Snapshots and
//! KEP-2599"): what the reconciler has seen, and the one thing it does next.

use super::step::{
    Again, ConfigMapVersion, Controller, Deleted, Indexed, OrphanCheck, Readable, Rest, Seen, Step,
    Taken, Version, step, store_trusted,
};
use super::{MAX_CONFIGMAP_DATA_BYTES, RefField, SnapshotError, SnapshotFault, Writer};

fn live() -> Seen {
    Seen::new(true, false, Ok(()))
}

fn version(rv: &str) -> ConfigMapVersion {
    ConfigMapVersion {
        uid: Some("cm-uid".into()),
        resource_version: Some(rv.into()),
    }
}

/// `live()` with a ConfigMap at the snapshot's name, at resourceVersion 7.
fn at_name(controller: Controller, holdfasts: bool) -> Seen {
    Seen {
        indexed: Some(Indexed {
            version: version("7"),
            controller,
            holdfasts,
        }),
        ..live()
    }
}

fn trainers() -> Seen {
    at_name(Controller::ThisTrainJob, false)
}

fn uncontrolled(check: Option<OrphanCheck>) -> Seen {
    Seen {
        orphan: Some(check),
        ..at_name(Controller::Uncontrolled, false)
    }
}

fn orphan_of(holdfasts: bool, trainers: bool) -> OrphanCheck {
    OrphanCheck {
        has_controller: false,
        holdfasts,
        trainers,
    }
}

fn taken(answer: Taken) -> Seen {
    Seen {
        taken: Some(answer),
        ..live()
    }
}

fn squatted(owner: Option<&str>) -> Step {
    Step::Refuse {
        fault: SnapshotFault::Squatted {
            owner: owner.map(str::to_owned),
        },
        of: Version::Indexed,
    }
}

fn mismatch() -> SnapshotFault {
    SnapshotFault::Mismatch {
        field: RefField::Name,
        expected: "torch".into(),
        found: "other".into(),
    }
}

fn too_deep() -> SnapshotError {
    SnapshotError::TooDeep { limit: 64 }
}

#[test]
fn each_reconciliation_decision_as_the_book_names_it() {
    let no_ref = SnapshotError::MissingField {
        object: "TrainJob",
        field: "spec.runtimeRef.name",
    };
    let cases: Vec<(&str, Seen, Step)> = vec![
        (
            "a TrainJob without name, namespace or uid is left alone",
            Seen::new(false, false, Ok(())),
            Step::Rest(Rest::Unidentified),
        ),
        (
            "a finished or deleted TrainJob gets no snapshot",
            Seen::new(true, true, Ok(())),
            Step::Rest(Rest::Finished),
        ),
        (
            "a finished TrainJob gets no snapshot even with a squatter at its name",
            Seen {
                ending: true,
                ..at_name(Controller::Other { uid: "x".into() }, false)
            },
            Step::Rest(Rest::Finished),
        ),
        (
            "a TrainJob without runtimeRef cannot be snapshotted",
            Seen::new(true, false, Err(no_ref.clone())),
            Step::NoRuntimeRef(no_ref),
        ),
        ("no snapshot: take one", live(), Step::Take),
        (
            "an earlier TrainJob's snapshot of the same name awaits garbage collection",
            at_name(Controller::EarlierTrainJob, true),
            Step::Again(Again::EarlierTrainJobsSnapshot),
        ),
        (
            "a ConfigMap controlled by someone else squats the name (SnapshotNameTaken)",
            at_name(Controller::Other { uid: "u-9".into() }, false),
            squatted(Some("u-9")),
        ),
        (
            "someone else's ConfigMap squats even with holdfast's label",
            at_name(Controller::Other { uid: "u-9".into() }, true),
            squatted(Some("u-9")),
        ),
        (
            "an uncontrolled ConfigMap is read for the orphan check",
            at_name(Controller::Uncontrolled, false),
            Step::CheckOrphan,
        ),
        (
            "an uncontrolled ConfigMap gone when read: start over",
            uncontrolled(None),
            Step::Again(Again::Gone),
        ),
        (
            "an orphaned holdfast snapshot is deleted",
            uncontrolled(Some(orphan_of(true, false))),
            Step::DeleteOrphan {
                writer: Writer::Holdfast,
            },
        ),
        (
            "an orphaned Trainer snapshot is deleted",
            uncontrolled(Some(orphan_of(false, true))),
            Step::DeleteOrphan {
                writer: Writer::Trainer,
            },
        ),
        (
            "an uncontrolled ConfigMap that was never a snapshot squats the name",
            uncontrolled(Some(orphan_of(false, false))),
            squatted(None),
        ),
        (
            "a ConfigMap controlled by the time it is read is not deleted as an orphan",
            uncontrolled(Some(OrphanCheck {
                has_controller: true,
                holdfasts: true,
                trainers: true,
            })),
            squatted(None),
        ),
        (
            "an orphan removed: the TrainJob gets its own",
            Seen {
                deleted: Some(Deleted::Yes),
                ..uncontrolled(Some(orphan_of(true, false)))
            },
            Step::Again(Again::OrphanRemoved),
        ),
        (
            "an orphan changed or gone before its delete: start over",
            Seen {
                deleted: Some(Deleted::Raced),
                ..uncontrolled(Some(orphan_of(false, true)))
            },
            Step::Again(Again::OrphanRaced),
        ),
        (
            "holdfast's own snapshot is trusted as it is",
            at_name(Controller::ThisTrainJob, true),
            Step::Rest(Rest::HoldfastsOwn),
        ),
        ("someone else's snapshot is read", trainers(), Step::Read),
        (
            "someone else's snapshot is read once per ConfigMap version",
            Seen {
                accepted: Some(version("7")),
                ..trainers()
            },
            Step::Rest(Rest::AlreadyAccepted),
        ),
        (
            "someone else's snapshot changed since it was accepted is read again",
            Seen {
                accepted: Some(version("6")),
                ..trainers()
            },
            Step::Read,
        ),
        (
            "someone else's snapshot gone when read: start over",
            Seen {
                read: Some(None),
                ..trainers()
            },
            Step::Again(Again::Gone),
        ),
        (
            "Trainer's snapshot is accepted as it is (SnapshotAdopted)",
            Seen {
                read: Some(Some(Ok(Readable {
                    writer: Writer::Trainer,
                    altered: false,
                }))),
                ..trainers()
            },
            Step::Accept {
                adopted: true,
                altered: false,
            },
        ),
        (
            "an altered snapshot is accepted and flagged (SnapshotAltered)",
            Seen {
                read: Some(Some(Ok(Readable {
                    writer: Writer::Holdfast,
                    altered: true,
                }))),
                ..trainers()
            },
            Step::Accept {
                adopted: false,
                altered: true,
            },
        ),
        (
            "a snapshot Trainer's reader would refuse is refused (SnapshotInvalid)",
            Seen {
                read: Some(Some(Err(mismatch()))),
                ..trainers()
            },
            Step::Refuse {
                fault: mismatch(),
                of: Version::Read,
            },
        ),
        (
            "a missing runtime is RuntimeNotFound, retried",
            taken(Taken::RuntimeNotFound),
            Step::RuntimeNotFound,
        ),
        (
            "a runtime that cannot be rendered is unsnapshottable (SnapshotTooDeep)",
            taken(Taken::Unrenderable(too_deep())),
            Step::Unsnapshottable(too_deep()),
        ),
        (
            "the snapshot is taken (SnapshotTaken)",
            taken(Taken::Created),
            Step::Created,
        ),
        (
            "a name taken since the watch: the ConfigMap is read",
            taken(Taken::NameTaken),
            Step::Read,
        ),
        (
            "a name taken since the watch by Trainer's snapshot: accepted",
            Seen {
                read: Some(Some(Ok(Readable {
                    writer: Writer::Trainer,
                    altered: false,
                }))),
                ..taken(Taken::NameTaken)
            },
            Step::Accept {
                adopted: true,
                altered: false,
            },
        ),
        (
            "a name taken since the watch by a squatter: refused",
            Seen {
                read: Some(Some(Err(SnapshotFault::Squatted { owner: None }))),
                ..taken(Taken::NameTaken)
            },
            Step::Refuse {
                fault: SnapshotFault::Squatted { owner: None },
                of: Version::Read,
            },
        ),
        (
            "a snapshot the apiserver refuses as too large is SnapshotTooLarge",
            taken(Taken::TooLarge { bytes: 2_000_000 }),
            Step::Unsnapshottable(SnapshotError::TooLarge {
                bytes: 2_000_000,
                limit: MAX_CONFIGMAP_DATA_BYTES,
            }),
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(name, seen, expected)| {
            let got = step(seen);
            (&got != expected).then(|| format!("{name}: expected {expected:?}, got {got:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn controller_of_the_configmap_at_the_snapshots_name() {
    let cases = [
        ("this TrainJob", Some("me"), false, Controller::ThisTrainJob),
        (
            "this TrainJob, of its name",
            Some("me"),
            true,
            Controller::ThisTrainJob,
        ),
        (
            "an earlier TrainJob",
            Some("old"),
            true,
            Controller::EarlierTrainJob,
        ),
        (
            "something else",
            Some("x"),
            false,
            Controller::Other { uid: "x".into() },
        ),
        ("no one", None, false, Controller::Uncontrolled),
    ];
    for (name, uid, namesake, expected) in cases {
        assert_eq!(Controller::of(uid, namesake, "me"), expected, "{name}");
    }
}

#[test]
fn the_runtime_store_is_trusted_only_at_the_admitted_version() {
    let cases = [
        ("not in the store", None, Some("5"), false),
        ("not in the store, none admitted", None, None, false),
        ("at the admitted version", Some(Some("5")), Some("5"), true),
        (
            "behind the admitted version",
            Some(Some("4")),
            Some("5"),
            false,
        ),
        ("no version in the store", Some(None), Some("5"), false),
        ("none admitted", Some(Some("4")), None, true),
    ];
    for (name, store, admitted, expected) in cases {
        assert_eq!(store_trusted(store, admitted), expected, "{name}");
    }
}

/// Each answer is asked for at most once: the step never asks again for what it has.
#[test]
fn no_request_is_asked_twice() {
    let answered = [
        (
            uncontrolled(Some(orphan_of(true, false))),
            Step::CheckOrphan,
        ),
        (
            Seen {
                read: Some(None),
                ..trainers()
            },
            Step::Read,
        ),
        (taken(Taken::NameTaken), Step::Take),
    ];
    for (seen, asked) in answered {
        assert_ne!(step(&seen), asked, "{seen:?}");
    }
}
