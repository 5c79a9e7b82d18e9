//! Kubernetes Events (`events.k8s.io/v1`) on the objects holdfast acts on — the TrainJob
//! for holds, the start gate, readmission and snapshots; the Secret for certificate
//! rotation — so that `kubectl describe` tells the story.
//!
//! Nothing waits for an Event. A part hands a [`Notice`] to the [`Publisher`] (a lock and a
//! map insert, no I/O) and goes on; one background worker per process writes them:
//!
//! - **Aggregated.** An Event is one (object, type, reason, action, note); the note is part
//!   of it because the apiserver refuses to change an Event's note. The same one again
//!   within [`PublisherConfig::series_window`] of the last write becomes the `series` of the
//!   Event already written (a merge patch of `series.count` and `lastObservedTime`;
//!   `kubectl describe` shows "(x5 over 2m)"), not a new object. Repeats that arrive while
//!   the first is still queued fold into it before any write.
//! - **Bounded.** At most [`PublisherConfig::queue_per_severity`] distinct Events wait per
//!   type, Warnings in a queue of their own, always written first. A Notice that finds its
//!   type's queue full is dropped (and counted: `holdfast_events_total{outcome="dropped"}`,
//!   plus a log line at most once a minute). Writes are paced to
//!   [`PublisherConfig::writes_per_second`] (bursts of [`PublisherConfig::burst`]), and the
//!   series of at most [`PublisherConfig::series_capacity`] Events are remembered (the
//!   oldest forgotten first: its next repeat starts a new Event). So a burst — the start-up
//!   migration of 100,000 TrainJobs, a node's worth of holds — costs at most a queue's
//!   worth of memory and a paced trickle of writes, whatever its size.
//!
//! Why not kube's `Recorder`: it writes on the caller's task (the caller waits for the
//! apiserver), keys its series without the note (a repeat with another note is counted
//! under the first note), and keeps every object's last Event, unbounded, scanning them all
//! on each publish.

mod metrics;
mod notice;
mod pace;
mod pending;
mod publisher;
mod series;

pub use metrics::EventMetrics;
pub use notice::{MAX_NOTE_BYTES, Notice, Severity, truncate_note};
pub use publisher::{Publisher, PublisherConfig};
