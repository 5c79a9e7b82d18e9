//! One TrainJob's snapshot reconciliation, sans I/O: [`step`] takes what the reconciler has
//! seen so far ([`Seen`]) and answers the one thing to do next ([`Step`]): a request to make
//! (read the ConfigMap at the snapshot's name, delete an orphan, take a snapshot), or the end
//! of the reconciliation (done, look again later, refuse, accept, report).
//!
//! The reconciler starts from what it knows without a request (the TrainJob, the metadata
//! watch's view of the ConfigMap, the ledger), makes the request asked for, records its
//! answer in the matching field of [`Seen`], and asks again. Each field is asked for at most
//! once, so a reconciliation makes at most four requests (a read for the orphan check and a
//! delete, or a take and a read).
//!
//! The rules, in order:
//!
//! 1. A TrainJob without a name, namespace or uid, and one that has finished or is being
//!    deleted, gets no snapshot. One without `spec.runtimeRef` cannot get one.
//! 2. A ConfigMap at the snapshot's name not controlled by this TrainJob:
//!    - controlled by an earlier TrainJob of the same name: its snapshot awaits garbage
//!      collection; look again later;
//!    - controlled by no one: read it; if it was demonstrably a snapshot (holdfast's label, or
//!      written by Trainer's snapshot writer) it is an orphan, deleted (preconditioned on its
//!      uid and resourceVersion) so the TrainJob gets its own;
//!    - anything else squats the name: refused, never written to.
//! 3. A ConfigMap controlled by this TrainJob: holdfast's own is the snapshot, trusted as it
//!    is; someone else's (Trainer's) is read once per ConfigMap version, checked as Trainer's
//!    reader checks it, and accepted or refused.
//! 4. No ConfigMap: take a snapshot. A create that finds the name taken (written since the
//!    watch last told) reads the ConfigMap as in 3.

use std::time::Duration;

use super::{MAX_CONFIGMAP_DATA_BYTES, SnapshotError, SnapshotFault, Writer};

/// The field manager of Kubeflow Trainer 2.3's snapshot writer (server-side apply).
pub const TRAINER_FIELD_MANAGER: &str = "trainer";

/// A ConfigMap's identity at one version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigMapVersion {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// The ConfigMap at the snapshot's name, as the metadata watch shows it (no request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indexed {
    pub version: ConfigMapVersion,
    pub controller: Controller,
    /// It carries holdfast's label `holdfast.dev/runtime-snapshot: "true"`.
    pub holdfasts: bool,
}

/// Who controls the ConfigMap at the snapshot's name (its first ownerReference with
/// `controller: true`, as `metav1.GetControllerOf` and Trainer's reader pick it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Controller {
    /// This TrainJob (by uid).
    ThisTrainJob,
    /// An earlier TrainJob of the same name (another uid).
    EarlierTrainJob,
    /// Something else, by uid.
    Other { uid: String },
    /// No one.
    Uncontrolled,
}

impl Controller {
    /// From the controller's uid, whether it is a TrainJob of the snapshot's TrainJob name,
    /// and the TrainJob's own uid.
    pub fn of(controller_uid: Option<&str>, namesake_trainjob: bool, trainjob_uid: &str) -> Self {
        match controller_uid {
            None => Controller::Uncontrolled,
            Some(uid) if uid == trainjob_uid => Controller::ThisTrainJob,
            Some(_) if namesake_trainjob => Controller::EarlierTrainJob,
            Some(uid) => Controller::Other {
                uid: uid.to_owned(),
            },
        }
    }
}

/// The ConfigMap at the snapshot's name, read for the orphan check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrphanCheck {
    /// Some ownerReference has `controller: true`.
    pub has_controller: bool,
    /// It carries holdfast's label.
    pub holdfasts: bool,
    /// A field manager is [`TRAINER_FIELD_MANAGER`].
    pub trainers: bool,
}

/// The answer to [`Step::DeleteOrphan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    Yes,
    /// 404 or 409: gone or changed since the read.
    Raced,
}

/// A snapshot read in full and accepted by the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readable {
    pub writer: Writer,
    /// Its data differs from the digest holdfast recorded.
    pub altered: bool,
}

/// The answer to [`Step::Take`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// The runtime does not exist (neither in the watch's store nor when read).
    RuntimeNotFound,
    /// The runtime cannot be rendered into a snapshot the apiserver accepts.
    Unrenderable(SnapshotError),
    /// The ConfigMap was created.
    Created,
    /// The create found the name taken (409).
    NameTaken,
    /// The apiserver refused the create as too large (its limit counts metadata too).
    TooLarge { bytes: usize },
}

/// What the reconciler has seen so far. Start with [`Seen::new`] and fill the field each
/// [`Step`] asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The TrainJob has a name, a namespace and a uid.
    pub identified: bool,
    /// The TrainJob has finished or is being deleted.
    pub ending: bool,
    /// Why its `spec.runtimeRef` cannot be read, if it cannot.
    pub runtime_ref: Result<(), SnapshotError>,
    /// The ConfigMap at the snapshot's name in the metadata watch, if any.
    pub indexed: Option<Indexed>,
    /// The ConfigMap version already read and accepted as this TrainJob's (the ledger).
    pub accepted: Option<ConfigMapVersion>,
    /// The answer to [`Step::CheckOrphan`]: `Some(None)` if the ConfigMap was gone.
    pub orphan: Option<Option<OrphanCheck>>,
    /// The answer to [`Step::DeleteOrphan`].
    pub deleted: Option<Deleted>,
    /// The answer to [`Step::Read`]: `Some(None)` if the ConfigMap was gone.
    pub read: Option<Option<Result<Readable, SnapshotFault>>>,
    /// The answer to [`Step::Take`].
    pub taken: Option<Taken>,
}

impl Seen {
    /// What is known of a TrainJob before any request.
    pub fn new(identified: bool, ending: bool, runtime_ref: Result<(), SnapshotError>) -> Self {
        Seen {
            identified,
            ending,
            runtime_ref,
            indexed: None,
            accepted: None,
            orphan: None,
            deleted: None,
            read: None,
            taken: None,
        }
    }
}

/// Why a reconciliation ends with nothing to do until something changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// No name, namespace or uid: not a TrainJob the apiserver served.
    Unidentified,
    /// Finished or being deleted: no snapshot.
    Finished,
    /// Holdfast's own snapshot: immutable, its provenance in its annotations.
    HoldfastsOwn,
    /// Someone else's snapshot, already read and accepted at this version.
    AlreadyAccepted,
}

/// Why a reconciliation looks again after a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Again {
    /// An earlier TrainJob of this name's snapshot: the garbage collector will delete it (its
    /// owner's uid no longer exists), and its deletion reconciles this TrainJob again.
    EarlierTrainJobsSnapshot,
    /// The ConfigMap the watch showed was gone when read: start over.
    Gone,
    /// The orphan changed or went between its read and its delete.
    OrphanRaced,
    /// The orphan was deleted: take this TrainJob's own.
    OrphanRemoved,
}

impl Again {
    /// How long to wait.
    pub fn after(self) -> Duration {
        match self {
            Again::EarlierTrainJobsSnapshot => Duration::from_secs(30),
            Again::Gone | Again::OrphanRaced => Duration::from_secs(1),
            Again::OrphanRemoved => Duration::from_millis(200),
        }
    }
}

/// Which version of the ConfigMap a refusal is about (each is reported once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// As the metadata watch showed it.
    Indexed,
    /// As read in full.
    Read,
}

/// The next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Done: nothing more until the TrainJob, its ConfigMap or its runtime changes.
    Rest(Rest),
    /// Done for now: look again after [`Again::after`].
    Again(Again),
    /// The TrainJob names no runtime it could be snapshotted from: say so; done.
    NoRuntimeRef(SnapshotError),
    /// Read the ConfigMap at the snapshot's name for the orphan check; answer in
    /// [`Seen::orphan`].
    CheckOrphan,
    /// Delete the orphaned snapshot, preconditioned on the uid and resourceVersion read;
    /// answer in [`Seen::deleted`].
    DeleteOrphan { writer: Writer },
    /// Read the ConfigMap at the snapshot's name in full and check it as Trainer's reader
    /// does; answer in [`Seen::read`].
    Read,
    /// Take a snapshot: find the runtime, render it, create the ConfigMap; answer in
    /// [`Seen::taken`].
    Take,
    /// The ConfigMap is not trusted: report it (once per version), never write to it; done.
    Refuse { fault: SnapshotFault, of: Version },
    /// The snapshot read is this TrainJob's: record it; `adopted` (Trainer wrote it) and
    /// `altered` are reported; done.
    Accept { adopted: bool, altered: bool },
    /// The snapshot was created: record and report it; done.
    Created,
    /// The runtime does not exist: report it and retry with backoff.
    RuntimeNotFound,
    /// The runtime cannot be snapshotted: report it once per runtime version; done until the
    /// runtime changes.
    Unsnapshottable(SnapshotError),
}

/// The next step of the reconciliation of a TrainJob that has seen `seen`.
pub fn step(seen: &Seen) -> Step {
    if !seen.identified {
        return Step::Rest(Rest::Unidentified);
    }
    if seen.ending {
        return Step::Rest(Rest::Finished);
    }
    if let Err(error) = &seen.runtime_ref {
        return Step::NoRuntimeRef(error.clone());
    }
    match (&seen.indexed, &seen.taken) {
        (Some(indexed), _) => existing(seen, indexed),
        (None, None) => Step::Take,
        (None, Some(taken)) => after_take(seen, taken),
    }
}

/// A ConfigMap of the snapshot's name exists (the watch says so).
fn existing(seen: &Seen, indexed: &Indexed) -> Step {
    match &indexed.controller {
        Controller::EarlierTrainJob => Step::Again(Again::EarlierTrainJobsSnapshot),
        Controller::Other { uid } => squatted(Some(uid)),
        Controller::Uncontrolled => orphan(seen),
        Controller::ThisTrainJob if indexed.holdfasts => Step::Rest(Rest::HoldfastsOwn),
        Controller::ThisTrainJob if seen.accepted.as_ref() == Some(&indexed.version) => {
            Step::Rest(Rest::AlreadyAccepted)
        }
        Controller::ThisTrainJob => read(seen),
    }
}

/// A ConfigMap with no controller: an orphaned snapshot is deleted; anything else squats.
fn orphan(seen: &Seen) -> Step {
    match (&seen.orphan, seen.deleted) {
        (None, _) => Step::CheckOrphan,
        (Some(None), _) => Step::Again(Again::Gone),
        (Some(Some(check)), None) => match orphaned_snapshot_writer(check) {
            Some(writer) => Step::DeleteOrphan { writer },
            None => squatted(None),
        },
        (Some(Some(_)), Some(Deleted::Yes)) => Step::Again(Again::OrphanRemoved),
        (Some(Some(_)), Some(Deleted::Raced)) => Step::Again(Again::OrphanRaced),
    }
}

/// Who wrote an uncontrolled ConfigMap that was demonstrably a snapshot (holdfast's label,
/// or Trainer's snapshot writer as a field manager); `None` if it was not one, or if it has
/// a controller after all.
pub fn orphaned_snapshot_writer(check: &OrphanCheck) -> Option<Writer> {
    if check.has_controller {
        return None;
    }
    if check.holdfasts {
        Some(Writer::Holdfast)
    } else if check.trainers {
        Some(Writer::Trainer)
    } else {
        None
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

/// Read the ConfigMap in full, or act on what the read found.
fn read(seen: &Seen) -> Step {
    match &seen.read {
        None => Step::Read,
        Some(None) => Step::Again(Again::Gone),
        Some(Some(Err(fault))) => Step::Refuse {
            fault: fault.clone(),
            of: Version::Read,
        },
        Some(Some(Ok(readable))) => Step::Accept {
            adopted: readable.writer == Writer::Trainer,
            altered: readable.altered,
        },
    }
}

fn after_take(seen: &Seen, taken: &Taken) -> Step {
    match taken {
        Taken::RuntimeNotFound => Step::RuntimeNotFound,
        Taken::Unrenderable(error) => Step::Unsnapshottable(error.clone()),
        Taken::Created => Step::Created,
        Taken::NameTaken => read(seen),
        Taken::TooLarge { bytes } => Step::Unsnapshottable(SnapshotError::TooLarge {
            bytes: *bytes,
            limit: MAX_CONFIGMAP_DATA_BYTES,
        }),
    }
}

/// Whether the runtime watch's store can be used as the runtime to snapshot, without a
/// read: it holds the runtime (`store` is its resourceVersion), and, when the TrainJob
/// records the version it was admitted against, at that version (the watch may lag the edit
/// the webhook saw).
pub fn store_trusted(store: Option<Option<&str>>, admitted: Option<&str>) -> bool {
    match (store, admitted) {
        (None, _) => false,
        (Some(version), Some(admitted)) => version == Some(admitted),
        (Some(_), None) => true,
    }
}
