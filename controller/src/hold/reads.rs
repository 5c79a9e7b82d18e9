//! The reads a call and a preflight share: one made again after transient failures, and
//! the TrainJob's Workload.

use std::time::Duration;

use holdfast_core::{
    hold::HoldError,
    workload_selection::{Selected, owned_by, select_workload, select_workload_without_mover},
};
use kube::core::params::ListParams;
use serde_json::Value;

use super::requests::{CallRequests, ReadRequest, RequestError};
use holdfast_cluster::resources;
use holdfast_core::names::JOB_UID_LABEL;

/// Makes a read, again after a transient failure (after `backoff`, doubling up to a second)
/// until it answers or the deadline passes.
pub(crate) async fn retrying_read(
    reqs: &mut CallRequests<'_>,
    backoff: Duration,
    what: &str,
    request: &ReadRequest<'_>,
) -> Result<Value, HoldError> {
    let mut pause = backoff;
    loop {
        match reqs.read(request).await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() => {
                tracing::debug!(error = %e, what, "read failed transiently; reading again");
                reqs.pause(pause).await.map_err(|d| last_error(d, &e))?;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into_hold_error(what)),
        }
    }
}

/// The TrainJob's Workload: among those it owns as controller (listed by Kueue's job-uid
/// label, which on a TrainJob's Workload only Kueue may change, then checked by
/// ownerReference; the whole namespace when the label finds none), the one
/// [`select_workload`] chooses (the newest live one; a held one being deleted when
/// nothing replaces it), or `None`. While a held Workload being deleted still carries its
/// hold next to its replacement, the readmission controller is moving the hold: read
/// again (after `backoff`, doubling up to half a second) until it is done or the deadline
/// passes.
///
/// `mover`: whether the readmission controller runs (kueue mode). Without it (plain mode,
/// reading a hold left from kueue mode) nobody moves a hold, and the held Workload being
/// deleted is the one chosen ([`select_workload_without_mover`]).
pub(crate) async fn workload_of(
    reqs: &mut CallRequests<'_>,
    backoff: Duration,
    namespace: &str,
    trainjob: &Value,
    mover: bool,
) -> Result<Option<Value>, HoldError> {
    let uid = trainjob
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .ok_or_else(|| HoldError::invalid("the TrainJob read has no metadata.uid"))?;
    let labelled = ListParams::default().labels(&format!("{JOB_UID_LABEL}={uid}"));
    let mut pause = backoff;
    loop {
        let mut list = retrying_read(
            reqs,
            backoff,
            "listing the TrainJob's Workloads",
            &ReadRequest::List {
                ar: resources::workload(),
                namespace: Some(namespace),
                params: labelled.clone(),
            },
        )
        .await?;
        let owns_one = |list: &Value| {
            list.get("items")
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().any(|w| owned_by(w, uid)))
        };
        if !owns_one(&list) {
            // Kueue's label is an index only, and an editor may remove or change it:
            // ownership decides, so look at every Workload in the namespace.
            list = retrying_read(
                reqs,
                backoff,
                "listing the namespace's Workloads",
                &ReadRequest::List {
                    ar: resources::workload(),
                    namespace: Some(namespace),
                    params: ListParams::default(),
                },
            )
            .await?;
        }
        let items = list
            .get("items")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let selected = if mover {
            select_workload(items, uid)
        } else {
            select_workload_without_mover(items, uid)
        };
        match selected {
            Selected::None => return Ok(None),
            Selected::Workload(w) => return Ok(Some(w.clone())),
            Selected::TransferPending => {
                tracing::debug!(
                    namespace,
                    "a hold is being moved to a new Workload; reading again"
                );
                reqs.pause(pause).await?;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// A deadline error that names the transient failure that used the time up.
pub(crate) fn last_error(deadline: HoldError, last: &RequestError) -> HoldError {
    match deadline {
        HoldError::Rejected { cause, message } => HoldError::Rejected {
            cause,
            message: format!("{message}; the last request failed: {last}"),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_error_names_the_last_failure() {
        let e = last_error(
            HoldError::deadline_passed("late"),
            &RequestError::Transport("connection refused".into()),
        );
        assert!(
            matches!(&e, HoldError::Rejected { message, .. } if message.contains("connection refused")),
            "{e:?}"
        );
    }
}
