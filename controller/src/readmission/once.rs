//! Warnings said once per occurrence: a reconcile that meets the same problem again (every
//! second while the gate waits for a worker's copy) publishes nothing new.

use std::collections::{HashMap, HashSet};

/// The problems already reported, per TrainJob (`namespace`, `name`): each as the uid of the
/// Workload it concerns and its cause, the Event's text.
#[derive(Debug, Default)]
pub(crate) struct Reported(HashMap<(String, String), HashSet<(String, String)>>);

impl Reported {
    /// Whether `cause` on Workload `workload` of TrainJob `namespace/name` is new, recording
    /// it: `true` the first time only.
    pub(crate) fn first(
        &mut self,
        namespace: &str,
        name: &str,
        workload: &str,
        cause: &str,
    ) -> bool {
        self.0
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default()
            .insert((workload.to_owned(), cause.to_owned()))
    }

    /// Forgets TrainJob `namespace/name`'s problems: they are over (or the TrainJob is gone),
    /// so the next one is reported again.
    pub(crate) fn forget(&mut self, namespace: &str, name: &str) {
        self.0.remove(&(namespace.to_owned(), name.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_reported_once_per_workload_and_cause_until_it_is_over() {
        let mut reported = Reported::default();
        assert!(reported.first("ns", "job", "wl-1", "no answer"));
        assert!(!reported.first("ns", "job", "wl-1", "no answer"), "again");
        assert!(
            reported.first("ns", "job", "wl-1", "forbidden"),
            "a new cause"
        );
        assert!(
            reported.first("ns", "job", "wl-2", "no answer"),
            "a new Workload"
        );
        assert!(
            reported.first("ns", "other", "wl-1", "no answer"),
            "another job"
        );
        reported.forget("ns", "job");
        assert!(
            reported.first("ns", "job", "wl-1", "no answer"),
            "over, then again"
        );
        assert!(!reported.first("ns", "other", "wl-1", "no answer"), "kept");
    }
}
