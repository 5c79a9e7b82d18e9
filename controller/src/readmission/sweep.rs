//! Held Workloads being deleted whose TrainJob is gone. The TrainJob reconcile never sees
//! them (it runs for TrainJobs that exist), so this sweep lets them go: their hold has
//! nothing left to hold. It runs when such a Workload changes and every `interval`, and
//! checks the TrainJob's absence with a live read before it writes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use holdfast_core::{
    hold::apply,
    mode::Mode,
    readmission::{TransferStep, WorkloadView, decide_transfer, has_hold_finalizer, terminating},
};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::{Error, reconcile::Context};
use crate::trainjob::Watched;
use holdfast_cluster::resources;
use holdfast_core::names::JOB_UID_LABEL;

pub(crate) async fn run(
    ctx: Arc<Context>,
    trainjobs: Store<Watched>,
    mut poked: UnboundedReceiver<()>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    // No `Store::wait_until_ready` here: the controller already awaits the TrainJob store's,
    // and kube-runtime wakes only one of several tasks awaiting the same store. Before the
    // stores have synced the sweep merely finds nothing, or checks with a live read.
    let mut tick = tokio::time::interval(interval);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            poke = poked.next() => if poke.is_none() { return },
        }
        let known: BTreeSet<String> = trainjobs.state().iter().filter_map(|t| t.uid()).collect();
        for w in ctx.workloads.state() {
            let Ok(value) = serde_json::to_value(&*w) else {
                continue;
            };
            if !(terminating(&value) && has_hold_finalizer(&value)) {
                continue;
            }
            let owner = owner(&w);
            if owner.as_ref().is_some_and(|(_, uid)| known.contains(uid)) {
                continue;
            }
            if let Err(e) = let_go_if_orphaned(&ctx, &w, owner).await {
                ctx.metrics.failed(e.metric_label());
                tracing::warn!(workload = w.name_any(), error = %e, "releasing an orphaned held Workload failed");
            }
        }
    }
}

/// The Workload's TrainJob: `(name, uid)`.
fn owner(w: &DynamicObject) -> Option<(String, String)> {
    w.owner_references()
        .iter()
        .find(|o| o.kind == holdfast_core::names::TRAINJOB_KIND)
        .map(|o| (o.name.clone(), o.uid.clone()))
        .or_else(|| {
            w.labels()
                .get(JOB_UID_LABEL)
                .map(|uid| (String::new(), uid.clone()))
        })
}

async fn let_go_if_orphaned(
    ctx: &Context,
    w: &DynamicObject,
    owner: Option<(String, String)>,
) -> Result<(), Error> {
    let namespace = w.namespace().unwrap_or_default();
    if let Some((name, uid)) = &owner
        && !name.is_empty()
    {
        let trainjobs: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &namespace, &resources::trainjob());
        if let Some(tj) = trainjobs.get_opt(name).await?
            && tj.uid().as_deref() == Some(uid.as_str())
        {
            return Ok(());
        }
    }
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &resources::workload());
    let name = w.name_any();
    let Some(fresh) = workloads.get_opt(&name).await? else {
        return Ok(());
    };
    let mut value = serde_json::to_value(&fresh)?;
    if let Some(o) = value.as_object_mut() {
        let ar = resources::workload();
        o.insert("apiVersion".to_owned(), ar.api_version.clone().into());
        o.insert("kind".to_owned(), ar.kind.clone().into());
    }
    let view = WorkloadView::read(&value, &BTreeSet::new());
    if let TransferStep::Write { write, .. } = decide_transfer(None, &[view]) {
        apply(&write, &mut value, Mode::Kueue)?;
        let object: DynamicObject = serde_json::from_value(value)?;
        workloads.replace(&name, &ctx.pp(), &object).await?;
        ctx.metrics.wrote("transfer_release");
        tracing::info!(
            namespace,
            workload = name,
            "let go of a held Workload whose TrainJob is gone"
        );
    }
    Ok(())
}
