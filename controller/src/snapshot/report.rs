//! What a snapshot reconciliation ends with, recorded in the ledger and reported (log,
//! metrics, Events): a snapshot accepted, refused, created, or a runtime that cannot be
//! snapshotted. Which of them is [`holdfast_core::snapshot::step`]'s to decide.

use holdfast_core::snapshot::{
    self as core, Rendered, RuntimeRef, SnapshotError, SnapshotFault, Writer,
};

use super::events::{self as snapshot_events, SnapshotWarning, warn};
use super::ledger::{Known, Refused};
use super::reconcile::{Context, Job, Read};

impl Context {
    /// Records a snapshot read and accepted as the TrainJob's, and reports it.
    pub(super) async fn accept(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
        read: Read,
        adopted: bool,
        altered: bool,
    ) {
        let Ok(snapshot) = read.snapshot else {
            return;
        };
        let writer = snapshot.writer.label();
        tracing::info!(
            namespace = job.namespace(),
            trainjob = job.name(),
            writer,
            runtime = %runtime_ref,
            "accepted the existing runtime snapshot"
        );
        self.metrics.accepted(writer);
        let name = job.snapshot_name();
        if adopted {
            self.events.publish(
                &job.reference(),
                snapshot_events::adopted(runtime_ref, &name),
            );
        }
        if altered {
            self.metrics.failure("altered");
            warn(
                &self.events,
                &job.reference(),
                SnapshotWarning::Altered { configmap: &name },
            );
        }
        self.check_admission(job, runtime_ref, snapshot.resource_version())
            .await;
        self.ledger.record_known(
            job.key.clone(),
            Known {
                trainjob_uid: job.uid.clone(),
                configmap_uid: read.identity.configmap_uid,
                configmap_resource_version: read.identity.configmap_resource_version,
                digest: read.digest.clone(),
                source_resource_version: snapshot.source.resource_version.clone(),
                holdfasts: snapshot.writer == Writer::Holdfast,
            },
        );
        self.ledger.record_content(&read.digest, snapshot.runtime);
    }

    /// Reports an untrusted ConfigMap, once per ConfigMap version. It is never written to.
    pub(super) async fn refuse(&self, job: &Job<'_>, identity: Refused, fault: SnapshotFault) {
        if self.ledger.already_refused(&job.key, &identity) {
            return;
        }
        self.metrics.failure(fault.metric_label());
        let name = job.snapshot_name();
        let notice = match &fault {
            SnapshotFault::Squatted { .. } => SnapshotWarning::Squatted {
                configmap: &name,
                fault: &fault,
            },
            _ => SnapshotWarning::Invalid {
                configmap: &name,
                fault: &fault,
            },
        };
        warn(&self.events, &job.reference(), notice);
        self.ledger.record_refused(job.key.clone(), identity);
    }

    /// Records and reports the snapshot just created.
    pub(super) async fn created(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
        rendered: &Rendered,
    ) {
        self.metrics.created.inc();
        let version = &rendered.provenance.resource_version;
        tracing::info!(
            namespace = job.namespace(),
            trainjob = job.name(),
            runtime = %runtime_ref,
            runtime_resource_version = %version,
            "runtime snapshot created"
        );
        self.events.publish(
            &job.reference(),
            snapshot_events::taken(runtime_ref, version, &job.snapshot_name()),
        );
        self.ledger
            .record_content(&rendered.provenance.sha256, rendered.object.clone());
        self.check_admission(job, runtime_ref, Some(version)).await;
    }

    /// The runtime cannot be snapshotted: say so once per runtime version; no retry loop (the
    /// TrainJob is reconciled again when the runtime changes).
    pub(super) async fn unsnapshottable(
        &self,
        job: &Job<'_>,
        runtime_version: &str,
        error: &SnapshotError,
    ) {
        self.metrics.failure(error.metric_label());
        if self
            .ledger
            .already_unsnapshottable(&job.key, runtime_version)
        {
            return;
        }
        warn(
            &self.events,
            &job.reference(),
            SnapshotWarning::Unsnapshottable { error },
        );
        self.ledger
            .record_unsnapshottable(job.key.clone(), runtime_version.to_owned());
    }

    /// Flags a snapshot of another runtime version than the TrainJob was admitted against.
    ///
    /// The admitted version is recorded by the mutating webhook when it admits the TrainJob.
    /// When it is absent (a TrainJob admitted before holdfast ran, or with the webhook down)
    /// nothing is flagged, and the controller does not record it either: what it would write
    /// is the version it snapshotted, which says nothing about what was admitted, and the
    /// write would double the requests per TrainJob.
    pub(super) async fn check_admission(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
        snapshotted: Option<&str>,
    ) {
        let admitted = job.object.admitted_runtime_version();
        let (Some(admitted), Some(snapshotted)) = (admitted, snapshotted) else {
            return;
        };
        if core::admission_race(Some(admitted), snapshotted) {
            self.metrics.admission_races.inc();
            warn(
                &self.events,
                &job.reference(),
                SnapshotWarning::AdmissionRace {
                    runtime: runtime_ref,
                    admitted,
                    snapshotted,
                },
            );
        }
    }
}
