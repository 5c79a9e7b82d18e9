//! holdfast's AdmissionChecks (`spec.controllerName: holdfast.dev/readmission`): their
//! `Active` condition is kept true (Kueue admits nothing through a ClusterQueue whose checks
//! are not all active), and their names are the entries the gate serves on Workloads.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use holdfast_core::readmission::{activate_check, is_our_check};
use holdfast_core::rfc3339;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use super::{Error, ReadmissionMetrics};

/// The names of holdfast's AdmissionChecks, from the AdmissionCheck store.
#[derive(Clone)]
pub(crate) struct CheckNames(pub(crate) Store<DynamicObject>);

impl CheckNames {
    pub(crate) fn names(&self) -> BTreeSet<String> {
        self.0
            .state()
            .iter()
            .filter(|c| is_our_check(&c.data))
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }
}

pub(crate) struct CheckContext {
    pub(crate) client: kube::Client,
    pub(crate) field_manager: String,
    pub(crate) metrics: ReadmissionMetrics,
    pub(crate) names: CheckNames,
    /// The names last announced; a change re-reconciles every TrainJob.
    pub(crate) announced: Mutex<BTreeSet<String>>,
    pub(crate) changed: UnboundedSender<()>,
    pub(crate) retry: Duration,
}

/// Keeps one AdmissionCheck's `Active` condition true if it is holdfast's.
pub(crate) async fn reconcile(
    check: Arc<DynamicObject>,
    ctx: Arc<CheckContext>,
) -> Result<Action, Error> {
    let names = ctx.names.names();
    let changed = match ctx.announced.lock() {
        Ok(mut a) if *a != names => {
            *a = names;
            true
        }
        _ => false,
    };
    if changed {
        let _ = ctx.changed.unbounded_send(());
    }
    let mut value = serde_json::to_value(&*check)?;
    if !is_our_check(&value) {
        return Ok(Action::await_change());
    }
    let now = rfc3339::seconds(Timestamp::now());
    if !activate_check(&mut value, &now) {
        return Ok(Action::await_change());
    }
    let name = check.metadata.name.clone().unwrap_or_default();
    let object: DynamicObject = serde_json::from_value(value)?;
    let api: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &holdfast_cluster::resources::admission_check(),
    );
    let pp = PostParams {
        dry_run: false,
        field_manager: Some(ctx.field_manager.clone()),
    };
    api.replace_status(&name, &pp, &object).await?;
    ctx.metrics.wrote("check_active");
    tracing::info!(check = name, "readmission AdmissionCheck marked Active");
    Ok(Action::await_change())
}

pub(crate) fn error_policy(_: Arc<DynamicObject>, error: &Error, ctx: Arc<CheckContext>) -> Action {
    ctx.metrics.failed(error.metric_label());
    tracing::debug!(%error, "keeping an AdmissionCheck active failed; retrying");
    Action::requeue(ctx.retry)
}
