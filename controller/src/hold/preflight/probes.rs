//! Hold is a probed capability. Preflight asks the apiserver whether the controller may do
//! what each call needs (SelfSubjectAccessReview), whether the CRDs are served (discovery),
//! and makes a hold round trip for real but without effect: the hold write, rendered on a real
//! object exactly as Hold would render it, PUT with `dryRun=All`, so that admission (the
//! webhook included) and validation judge it. In Kueue mode it also lists every ClusterQueue
//! that does not require holdfast's readmission check (Release and Open of a job there are
//! refused at call time; Hold goes ahead).

use holdfast_core::{
    hold::{Call, CallMeta, CallerId, Decision, HeldView, HoldError, apply, decide},
    mode::Mode,
    readmission::multikueue::UnderMultiKueue,
};
use jiff::Timestamp;
use kube::core::params::ListParams;
use kube::core::{ApiResource, DynamicObject, Resource};
use serde_json::{Value, json};

use super::report::{Check, CheckResult, NO_TRAINJOB, PreflightReport, Probe, UngatedQueue};
use crate::hold::{
    config::{ExecutorConfig, PolicyProbe},
    reads,
    requests::{CallRequests, ReadRequest, RequestError},
};
use holdfast_cluster::queues::Queues;
use holdfast_cluster::resources;

impl Probe {
    /// `(group, resource, verb)` of an RBAC probe.
    fn access(self) -> Option<(String, String, &'static str)> {
        let of = |ar: ApiResource, verb| (ar.group, ar.plural, verb);
        let named =
            |group: &str, resource: &str, verb| (group.to_owned(), resource.to_owned(), verb);
        Some(match self {
            Probe::GetTrainjobs => of(resources::trainjob(), "get"),
            Probe::UpdateTrainjobs => of(resources::trainjob(), "update"),
            Probe::ListPods => of(resources::pod(), "list"),
            Probe::ListWorkloads => of(resources::workload(), "list"),
            Probe::UpdateWorkloads => of(resources::workload(), "update"),
            Probe::CreateTokenreviews => named("authentication.k8s.io", "tokenreviews", "create"),
            Probe::CreateSubjectaccessreviews => {
                named("authorization.k8s.io", "subjectaccessreviews", "create")
            }
            Probe::TrainjobsServed
            | Probe::WorkloadsServed
            | Probe::ReadmissionCheck
            | Probe::ReadmissionGatePolicy
            | Probe::HoldRoundTrip
            | Probe::AdmissionPolicies => return None,
        })
    }
}

/// What a preflight probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// Every probe; the hold round trip on `target` (else on TrainJobs listed, one namespace
    /// at a time).
    Full { target: Option<(&'a str, &'a str)> },
    /// Every probe but the hold round trip, whose last result is kept: what a call probes
    /// before it acts (its own write is a round trip, and a dry-run write of its own would
    /// double its writes).
    BeforeCall,
}

/// What a preflight probes with: the executor's client, mode, settings and queues, and the
/// deadline of this preflight.
pub(crate) struct Prober<'a> {
    pub client: &'a kube::Client,
    pub mode: Mode,
    pub config: &'a ExecutorConfig,
    pub meta: CallMeta,
    /// Kueue mode: the watched queues.
    pub queues: Option<&'a Queues>,
    /// The MultiKueue workers the readmission gate sees.
    pub workers: &'a crate::multikueue::Workers,
}

/// Runs every probe of the executor's mode. `previous`: the last report, whose round trip a
/// [`Scope::BeforeCall`] probe keeps.
pub(crate) async fn run(
    exec: &Prober<'_>,
    scope: Scope<'_>,
    previous: Option<&PreflightReport>,
) -> PreflightReport {
    let mode = exec.mode;
    let config = exec.config;
    let mut reqs = CallRequests::new(
        exec.client,
        &exec.meta,
        config.transit_margin,
        &config.user_agent,
        "preflight",
    );
    let mut checks = Vec::new();
    let mut probes = Probe::all(mode);
    if config.policy_probe.is_some() {
        probes.push(Probe::AdmissionPolicies);
    }
    if mode == Mode::Kueue && config.gate_policy.is_some() {
        probes.push(Probe::ReadmissionGatePolicy);
    }
    for probe in probes {
        let check = match probe {
            Probe::TrainjobsServed => served(&mut reqs, probe, &resources::trainjob()).await,
            Probe::WorkloadsServed => served(&mut reqs, probe, &resources::workload()).await,
            Probe::ReadmissionCheck => readmission_check(&mut reqs).await,
            Probe::ReadmissionGatePolicy => match &config.gate_policy {
                Some(name) => gate_policy(&mut reqs, name).await,
                None => Check::new(probe, CheckResult::NotChecked, "not asked for"),
            },
            Probe::AdmissionPolicies => match &config.policy_probe {
                Some(p) => policies_enforced(&mut reqs, p).await,
                None => Check::new(probe, CheckResult::NotChecked, "not asked for"),
            },
            Probe::HoldRoundTrip => match scope {
                Scope::Full { target } => round_trip(exec, &mut reqs, target).await,
                Scope::BeforeCall => match previous
                    .and_then(|r| r.checks.iter().find(|c| c.probe == Probe::HoldRoundTrip))
                {
                    Some(last) => last.clone(),
                    None => Check::new(
                        probe,
                        CheckResult::NotChecked,
                        format!("{NO_TRAINJOB} yet: this call's own write is the round trip"),
                    ),
                },
            },
            _ => access(&mut reqs, probe).await,
        };
        checks.push(check);
    }
    let mut report = PreflightReport::new(
        mode,
        holdfast_core::hold::call_bound(config.apiserver_request_timeout),
        config.apiserver_request_timeout,
        checks,
    );
    if let Some(queues) = exec.queues {
        report.ungated_cluster_queues = queues
            .ungated()
            .into_iter()
            .map(|(name, why)| UngatedQueue { name, why })
            .collect();
        for (name, check) in queues.multikueue() {
            let under = UnderMultiKueue::Queue {
                cluster_queue: name.clone(),
                check,
            };
            let coverage =
                crate::multikueue::coverage_of(exec.client, Some(queues), exec.workers, &under)
                    .await;
            let why = if coverage.covered() {
                format!(
                    "hold, release and open go ahead: {}, and the readmission gate counts the previous execution's pods there",
                    coverage.why_not()
                )
            } else {
                under.refusals(&coverage)
            };
            report
                .multikueue_cluster_queues
                .push(UngatedQueue { name, why });
        }
    }
    report
}

/// A SelfSubjectAccessReview of the probe's access, cluster-wide.
async fn access(reqs: &mut CallRequests<'_>, probe: Probe) -> Check {
    let Some((group, resource, verb)) = probe.access() else {
        return Check::new(probe, CheckResult::NotChecked, "not an access probe");
    };
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": group, "resource": resource, "verb": verb}}
    });
    match reqs
        .create(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &review,
        )
        .await
    {
        Ok(answer) if answer.pointer("/status/allowed") == Some(&Value::Bool(true)) => {
            Check::new(probe, CheckResult::Passed, "")
        }
        Ok(answer) => Check::new(
            probe,
            CheckResult::Failed,
            format!(
                "the controller may not {verb} {resource}{}",
                answer
                    .pointer("/status/reason")
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        ),
        Err(e) => Check::new(probe, CheckResult::NotChecked, e.to_string()),
    }
}

/// Whether an AdmissionCheck served by holdfast's readmission gate exists.
async fn readmission_check(reqs: &mut CallRequests<'_>) -> Check {
    let probe = Probe::ReadmissionCheck;
    let path = DynamicObject::url_path(&resources::admission_check(), None);
    match reqs.get_path(&path).await {
        Ok(list) => {
            let ours: Vec<&str> = list
                .get("items")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter(|c| holdfast_core::readmission::is_our_check(c))
                        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            if ours.is_empty() {
                Check::new(
                    probe,
                    CheckResult::Failed,
                    format!(
                        "no AdmissionCheck has controllerName {}: create one and require it \
                         in the ClusterQueues of held jobs",
                        holdfast_core::names::READMISSION_CONTROLLER
                    ),
                )
            } else {
                Check::new(probe, CheckResult::Passed, ours.join(", "))
            }
        }
        Err(e) if e.code() == Some(404) => Check::new(
            probe,
            CheckResult::Failed,
            format!("{path} is not served: are Kueue's CRDs installed?"),
        ),
        Err(e) if e.code() == Some(403) => Check::new(
            probe,
            CheckResult::Failed,
            format!("the controller may not list admissionchecks: {e}"),
        ),
        Err(e) => Check::new(probe, CheckResult::NotChecked, e.to_string()),
    }
}

/// Whether the readmission-gate policy `name` and its binding are installed as the chart
/// renders them.
async fn gate_policy(reqs: &mut CallRequests<'_>, name: &str) -> Check {
    let probe = Probe::ReadmissionGatePolicy;
    let base = "/apis/admissionregistration.k8s.io/v1";
    let mut read = Vec::with_capacity(2);
    for kind in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        match reqs.get_path(&format!("{base}/{kind}/{name}")).await {
            Ok(object) => read.push(Some(object)),
            Err(e) if e.code() == Some(404) => read.push(None),
            Err(e) if e.code() == Some(403) => {
                return Check::new(
                    probe,
                    CheckResult::Failed,
                    format!(
                        "the controller may not get {kind} {name} (the chart grants it by \
                         name): {e}"
                    ),
                );
            }
            Err(e) => return Check::new(probe, CheckResult::NotChecked, e.to_string()),
        }
    }
    match holdfast_core::readmission::gate_policy::gate_policy_problem(
        name,
        read.first().and_then(Option::as_ref),
        read.get(1).and_then(Option::as_ref),
    ) {
        None => Check::new(probe, CheckResult::Passed, name),
        Some(why) => Check::new(probe, CheckResult::Failed, why),
    }
}

/// The ConfigMap [`policies_enforced`] dry-runs: no snapshot name, label or owner.
pub const POLICY_PROBE_CONFIGMAP: &str = "holdfast-preflight-policy-probe";

/// Whether the apiserver enforces holdfast's ValidatingAdmissionPolicies: the controller's
/// dry-run create of [`POLICY_PROBE_CONFIGMAP`] must be refused by one.
async fn policies_enforced(reqs: &mut CallRequests<'_>, p: &PolicyProbe) -> Check {
    let probe = Probe::AdmissionPolicies;
    let path = format!("/api/v1/namespaces/{}/configmaps", p.namespace);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": POLICY_PROBE_CONFIGMAP, "namespace": p.namespace}});
    let (result, detail) = policy_verdict(
        &p.engine,
        &p.namespace,
        reqs.create_with(&path, &cm, true).await,
    );
    Check::new(probe, result, detail)
}

/// How the dry-run create of [`policies_enforced`] reads.
fn policy_verdict(
    engine: &str,
    namespace: &str,
    answer: Result<Value, RequestError>,
) -> (CheckResult, String) {
    let what = format!(
        "a dry-run create of ConfigMap {namespace}/{POLICY_PROBE_CONFIGMAP} by the controller"
    );
    match answer {
        Err(e) if e.to_string().contains("ValidatingAdmissionPolicy") => (
            CheckResult::Passed,
            format!("{what} was refused by a ValidatingAdmissionPolicy, as it must be"),
        ),
        Ok(_) => (
            CheckResult::Failed,
            format!(
                "validation.engine is {engine}, but the apiserver let through {what}, which the                  chart's ValidatingAdmissionPolicy on the controller's ConfigMaps must refuse:                  it enforces no ValidatingAdmissionPolicy (the ValidatingAdmissionPolicy                  admission plugin is off) or the chart's policies are not installed, so nothing                  enforces holdfast's rules. Enable the plugin (on by default since Kubernetes                  1.30: take it out of kube-apiserver's --disable-admission-plugins), or set                  validation.engine=webhook and upgrade the release"
            ),
        ),
        Err(e) if e.is_transient() => (CheckResult::NotChecked, e.to_string()),
        Err(e) => (
            CheckResult::Failed,
            format!(
                "validation.engine is {engine}, and {what} was refused, but not by a                  ValidatingAdmissionPolicy ({e}): whether the apiserver enforces holdfast's                  policies is unknown"
            ),
        ),
    }
}

/// Whether the API group version at `path` serves `resource`.
/// Whether the API group version of `ar` serves its resource (the CRD is installed).
async fn served(reqs: &mut CallRequests<'_>, probe: Probe, ar: &ApiResource) -> Check {
    let path = &format!("/apis/{}", ar.api_version);
    let resource = &ar.plural;
    match reqs.get_path(path).await {
        Ok(list) => {
            let found = list
                .get("resources")
                .and_then(Value::as_array)
                .is_some_and(|rs| {
                    rs.iter()
                        .any(|r| r.get("name").and_then(Value::as_str) == Some(resource.as_str()))
                });
            if found {
                Check::new(probe, CheckResult::Passed, "")
            } else {
                Check::new(
                    probe,
                    CheckResult::Failed,
                    format!("{path} does not serve {resource}"),
                )
            }
        }
        Err(e) if e.code() == Some(404) => Check::new(
            probe,
            CheckResult::Failed,
            format!("{path} is not served: is the CRD installed?"),
        ),
        Err(e) => Check::new(probe, CheckResult::NotChecked, e.to_string()),
    }
}

/// The holder the dry-run hold names (never stored: a dry run).
const PREFLIGHT_CALLER: &str = "system:holdfast:preflight";

/// The untargeted round trip tries TrainJobs of at most this many namespaces, one each, when
/// the dry-run hold on one fails for a reason of that object's own.
pub const ROUND_TRIP_NAMESPACES: usize = 3;

/// How a dry-run hold on one TrainJob went.
#[derive(Debug)]
enum Tried {
    /// It says something about the cluster: passed, failed, or could not be made (the
    /// apiserver unreachable or timing out).
    Said(Check),
    /// It failed for a reason of the object's own (its content, or it changed or went away
    /// meanwhile): no evidence either way about the cluster.
    ObjectSpecific(String),
}

/// How the apiserver's refusal of a dry-run hold is read: `true` when the refusal is about
/// the object written rather than about the write: 422 Invalid from the object's own
/// validation (with the hold's annotations its annotations pass 256 KiB, or it no longer
/// validates against its CRD's schema), 413 (too large), 409 (it changed since it was read),
/// 404 (it was deleted since). Anything else that is not transient is about the cluster and
/// fails the probe: 403 and 401 (RBAC, or an admission webhook refusing), 400 (e.g. a webhook
/// that cannot dry-run), and a 422 that an admission policy or webhook answered (a
/// ValidatingAdmissionPolicy's denial is 422 Invalid by default, its message "... is
/// forbidden: ValidatingAdmissionPolicy ... denied request").
pub(crate) fn refusal_is_object_specific(code: u16, message: &str) -> bool {
    let admission = message.contains(" is forbidden: ")
        || message.contains("ValidatingAdmissionPolicy")
        || message.contains("admission webhook");
    match code {
        404 | 409 | 413 => true,
        422 => !admission,
        _ => false,
    }
}

/// The hold write of a probe Hold, rendered on a real object and PUT with `dryRun=All`: on
/// `target` if given, else on TrainJobs the controller lists, one namespace at a time, until
/// one says something about the cluster (at most [`ROUND_TRIP_NAMESPACES`]).
async fn round_trip(
    exec: &Prober<'_>,
    reqs: &mut CallRequests<'_>,
    target: Option<(&str, &str)>,
) -> Check {
    let probe = Probe::HoldRoundTrip;
    let not_checked = |d: String| Check::new(probe, CheckResult::NotChecked, d);
    if let Some((ns, name)) = target {
        if let Err(e) = crate::trainjob::check_name(ns, name) {
            return not_checked(e);
        }
        let trainjob = reads::retrying_read(
            reqs,
            exec.config.transient_backoff,
            "reading the preflight TrainJob",
            &ReadRequest::Get {
                ar: resources::trainjob(),
                namespace: ns,
                name,
            },
        )
        .await;
        return match trainjob {
            Ok(Value::Null) => not_checked(format!("{ns}/{name}: no such TrainJob")),
            Ok(tj) => match dry_run_hold(exec, reqs, &tj).await {
                Tried::Said(check) => check,
                Tried::ObjectSpecific(why) => not_checked(why),
            },
            Err(HoldError::Unsupported { reason }) => {
                Check::new(probe, CheckResult::Failed, reason)
            }
            Err(e) => not_checked(format!("{ns}/{name}: {e}")),
        };
    }
    let mut skipped: Vec<(String, String)> = Vec::new();
    while skipped.len() < ROUND_TRIP_NAMESPACES {
        let fields = skipped
            .iter()
            .map(|(ns, _)| format!("metadata.namespace!={ns}"))
            .collect::<Vec<_>>()
            .join(",");
        let listed = reads::retrying_read(
            reqs,
            exec.config.transient_backoff,
            "listing TrainJobs",
            &ReadRequest::List {
                ar: resources::trainjob(),
                namespace: None,
                params: ListParams::default().limit(1).fields(&fields),
            },
        )
        .await
        .map(|list| {
            list.get("items")
                .and_then(Value::as_array)
                .and_then(|items| items.first())
                .cloned()
        });
        let trainjob = match listed {
            Ok(Some(tj)) => tj,
            Ok(None) => break,
            Err(HoldError::Unsupported { reason }) => {
                return Check::new(probe, CheckResult::Failed, reason);
            }
            Err(e) => return not_checked(e.to_string()),
        };
        match dry_run_hold(exec, reqs, &trainjob).await {
            Tried::Said(check) => return check,
            Tried::ObjectSpecific(why) => {
                let namespace = trainjob
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if namespace.is_empty() {
                    break;
                }
                skipped.push((namespace, why));
            }
        }
    }
    let tried = skipped
        .iter()
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    not_checked(if skipped.is_empty() {
        format!(
            "{NO_TRAINJOB}; name one (GET /v1/preflight?namespace=NS&name=NAME), or call it: a call dry-runs its own"
        )
    } else {
        format!(
            "{NO_TRAINJOB} that says anything about the cluster (tried: {tried}); a call dry-runs its own"
        )
    })
}

/// The dry-run hold on `trainjob`.
async fn dry_run_hold(exec: &Prober<'_>, reqs: &mut CallRequests<'_>, trainjob: &Value) -> Tried {
    let probe = Probe::HoldRoundTrip;
    let namespace = trainjob
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let trainjob_name = trainjob
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let this = format!("{namespace}/{trainjob_name}");
    let own = |why: String| Tried::ObjectSpecific(format!("{this}: {why}"));
    let workload = match exec.mode {
        Mode::Plain => None,
        Mode::Kueue => {
            match reads::workload_of(
                reqs,
                exec.config.transient_backoff,
                &namespace,
                trainjob,
                true,
            )
            .await
            {
                Ok(Some(w)) => Some(w),
                // An unqueued TrainJob has no Workload (Kueue manages only queued jobs), and
                // a queued one has none until Kueue makes it.
                Ok(None) => return own("the TrainJob has no Kueue Workload (yet)".to_owned()),
                Err(HoldError::Unsupported { reason }) => {
                    return Tried::Said(Check::new(probe, CheckResult::Failed, reason));
                }
                Err(e) => {
                    return Tried::Said(Check::new(
                        probe,
                        CheckResult::NotChecked,
                        format!("{this}: {e}"),
                    ));
                }
            }
        }
    };
    let mode = exec.mode;
    let held = workload.as_ref().unwrap_or(trainjob);
    let instance = holdfast_core::hold::object::hold_state(held)
        .instance()
        .map_or(1, |k| k.saturating_add(1));
    // A dry run as an overrider: whoever holds the job, the probe decides a write to send.
    let call = Call::Hold {
        instance,
        reason: Some("holdfast preflight (dry run)".to_owned()),
        placed_at: Timestamp::now(),
        by: CallerId::new(PREFLIGHT_CALLER).overriding(),
    };
    let view = match HeldView::read(&call, mode, trainjob, workload.as_ref(), false) {
        Ok(v) => v,
        Err(e) => return own(e.to_string()),
    };
    let write = match decide(&call, &view, None) {
        Decision::Write(w) => w,
        other => return own(format!("no hold write to probe: {other:?}")),
    };
    let mut object = held.clone();
    if let Err(e) = apply(&write, &mut object, mode) {
        return own(e.to_string());
    }
    let ar = match write.target {
        holdfast_core::hold::HeldObject::TrainJob => resources::trainjob(),
        holdfast_core::hold::HeldObject::Workload => resources::workload(),
    };
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let what = format!("{namespace}/{name}");
    match reqs.replace(&ar, &namespace, &name, &object, true).await {
        Ok(_) => Tried::Said(Check::new(
            probe,
            CheckResult::Passed,
            format!("a dry-run hold of {what} was accepted"),
        )),
        Err(e)
            if e.code()
                .is_some_and(|code| refusal_is_object_specific(code, &e.to_string())) =>
        {
            own(format!(
                "the dry-run hold of {what} was refused for its own content or state: {e}"
            ))
        }
        Err(e) if e.is_transient() => Tried::Said(Check::new(
            probe,
            CheckResult::NotChecked,
            format!("the dry-run hold of {what} did not complete: {e}"),
        )),
        Err(e) => Tried::Said(Check::new(
            probe,
            CheckResult::Failed,
            format!("the dry-run hold of {what} was refused: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::preflight::report::Gated;

    #[test]
    fn a_refusal_of_the_objects_own_content_or_state_is_no_evidence_about_the_cluster() {
        let too_long = "the apiserver answered 422 Invalid: TrainJob.trainer.kubeflow.org \"a\" is invalid: [metadata.annotations: Too long: may not be more than 262144 bytes]";
        assert!(refusal_is_object_specific(422, too_long));
        for code in [404, 409, 413] {
            assert!(
                refusal_is_object_specific(code, "gone, changed, too large"),
                "{code}"
            );
        }
        for code in [400, 401, 403, 405] {
            assert!(!refusal_is_object_specific(code, "forbidden"), "{code}");
        }
        // An admission policy refusing holds is about the cluster, whatever its status.
        let policy = "the apiserver answered 422 Invalid: trainjobs.trainer.kubeflow.org \"mnist\" is forbidden: ValidatingAdmissionPolicy 'no-holds' with binding 'no-holds' denied request: holds are not allowed here";
        assert!(!refusal_is_object_specific(422, policy));
        let webhook = "the apiserver answered 422 Invalid: admission webhook \"x.example\" denied the request: no";
        assert!(!refusal_is_object_specific(422, webhook));
    }

    fn api(code: u16, message: &str) -> RequestError {
        RequestError::Api {
            code,
            reason: "x".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_policy_probe_let_through_means_nothing_enforces_the_rules() {
        let (result, detail) = policy_verdict("policy", "holdfast-system", Ok(json!({})));
        assert_eq!(result, CheckResult::Failed);
        assert!(
            detail.contains("validation.engine is policy")
                && detail.contains("admission plugin is off")
                && detail.contains("validation.engine=webhook"),
            "{detail}"
        );
        // It gates every call that writes.
        for call in [Gated::Hold, Gated::Release, Gated::Open] {
            assert!(Probe::AdmissionPolicies.gates(Mode::Plain).contains(&call));
            assert!(Probe::AdmissionPolicies.gates(Mode::Kueue).contains(&call));
        }
    }

    #[test]
    fn a_policy_probe_refused_by_a_policy_passes_and_any_other_answer_fails_closed() {
        let denied = "configmaps \"holdfast-preflight-policy-probe\" is forbidden: ValidatingAdmissionPolicy 'holdfast-controller-configmaps' with binding 'holdfast-controller-configmaps' denied request";
        let (result, _) = policy_verdict("policy", "ns", Err(api(403, denied)));
        assert_eq!(result, CheckResult::Passed);
        let (result, detail) = policy_verdict("both", "ns", Err(api(403, "no RBAC")));
        assert_eq!(result, CheckResult::Failed, "{detail}");
        let (result, _) = policy_verdict("both", "ns", Err(api(503, "busy")));
        assert_eq!(result, CheckResult::NotChecked);
    }
}
