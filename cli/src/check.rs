//! `holdfast check`: does the install protect and serve? Four checks, each printed with pass
//! or fail and, when it fails, what to do:
//!
//! 1. **caBundle**: every webhook of holdfast's webhook configurations (`<fullname>`, mutating
//!    and validating) carries a CA the apiserver can trust it by;
//! 2. **leader**: the controller's Lease (`<fullname>-controller`) has a holder whose lease has
//!    not run out;
//! 3. **protects**: a dry-run create of a ConfigMap named as a runtime snapshot, in the
//!    namespace checked, is refused by holdfast — its snapshot webhook or its snapshot
//!    ValidatingAdmissionPolicy named in the refusal — not let through, nor refused by
//!    anything else (RBAC, another admission plugin). Dry run: nothing is written;
//! 4. **serves**: the hold API answers preflight with `result: Ok`.
//!
//! The judgements are pure functions of what was read, unit-tested; the reads are
//! [`webhook_configurations`], [`lease`] and [`protected_write`].

use anyhow::Context;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;

use crate::discover::Release;

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The check: `caBundle`, `leader`, `protects`, `serves`.
    pub check: &'static str,
    pub pass: bool,
    /// What was seen.
    pub seen: String,
    /// What to do, when it failed.
    pub fix: Option<String>,
}

impl Verdict {
    fn pass(check: &'static str, seen: impl Into<String>) -> Verdict {
        Verdict {
            check,
            pass: true,
            seen: seen.into(),
            fix: None,
        }
    }

    fn fail(check: &'static str, seen: impl Into<String>, fix: impl Into<String>) -> Verdict {
        Verdict {
            check,
            pass: false,
            seen: seen.into(),
            fix: Some(fix.into()),
        }
    }

    /// A check whose reads failed: what failed, and what to do.
    pub fn unread(check: &'static str, error: &anyhow::Error) -> Verdict {
        Verdict::fail(
            check,
            format!("{error:#}"),
            "a 403: run as someone who may read holdfast's objects (a cluster admin); a namespace with no release: pass --holdfast-namespace/--release",
        )
    }

    /// `PASS  leader      holdfast-controller-6b7f-x holds Lease ...`, and for a failure a
    /// second line with what to do. Printable whatever the cluster's text holds.
    pub fn lines(&self) -> String {
        use holdfast_core::hold::printable;
        let mark = if self.pass { "PASS" } else { "FAIL" };
        let mut out = format!("{mark}  {:<9} {}", self.check, printable(&self.seen));
        if let Some(fix) = &self.fix {
            out.push_str(&format!("\n      {:<9} what to do: {}", "", printable(fix)));
        }
        out
    }
}

/// The name of the snapshot ConfigMap the protected write tries to create (a runtime
/// snapshot's name: `<trainjob>-runtime-snapshot`).
pub const PROBE_CONFIGMAP: &str = "holdfast-check-runtime-snapshot";
/// holdfast's snapshot webhook entry, named in its refusals.
pub const SNAPSHOT_WEBHOOK: &str = "snapshots.validate.holdfast.dev";

/// A webhook configuration as read: its kind, and each webhook's name and caBundle length
/// (`None`: the configuration does not exist).
pub struct Configuration {
    pub kind: &'static str,
    pub name: String,
    pub webhooks: Option<Vec<(String, usize)>>,
}

/// caBundle: the mutating configuration exists with webhooks, and every webhook of both
/// carries a caBundle (a validating configuration may be absent or empty: the policies then
/// validate, which `protects` checks).
pub fn judge_ca_bundles(configurations: &[Configuration]) -> Verdict {
    const CHECK: &str = "caBundle";
    let mut seen = Vec::new();
    for c in configurations {
        match &c.webhooks {
            None if c.kind == "MutatingWebhookConfiguration" => {
                return Verdict::fail(
                    CHECK,
                    format!("{} {} does not exist", c.kind, c.name),
                    "install the chart (or pass --holdfast-namespace/--release for the release you meant)",
                );
            }
            None => seen.push(format!("no {}", c.kind)),
            Some(hooks) => {
                if let Some((hook, _)) = hooks.iter().find(|(_, len)| *len == 0) {
                    return Verdict::fail(
                        CHECK,
                        format!("{} {}: webhook {hook} has no caBundle", c.kind, c.name),
                        "the controller injects it once it runs: see `kubectl logs` of the controller (certs.mode cert-manager: cert-manager's cainjector injects it)",
                    );
                }
                if hooks.is_empty() && c.kind == "MutatingWebhookConfiguration" {
                    return Verdict::fail(
                        CHECK,
                        format!("{} {} has no webhook", c.kind, c.name),
                        "reinstall the chart: its mutating configuration always has webhooks",
                    );
                }
                seen.push(format!("{} {}: {} webhooks", c.kind, c.name, hooks.len()));
            }
        }
    }
    Verdict::pass(CHECK, format!("injected ({})", seen.join("; ")))
}

/// The controller's Lease as read (`None`: it does not exist).
pub struct LeaseRead {
    pub name: String,
    pub holder: Option<String>,
    pub renewed: Option<Timestamp>,
    pub duration_seconds: Option<i32>,
}

/// leader: the Lease has a holder, renewed within its duration of `now`.
pub fn judge_lease(lease: Option<&LeaseRead>, now: Timestamp) -> Verdict {
    const CHECK: &str = "leader";
    let fix = "check that a controller pod is Running and Ready, and its log (`kubectl logs`): \
               no leader serves the hold API or reconciles";
    let Some(l) = lease else {
        return Verdict::fail(CHECK, "the controller's Lease does not exist", fix);
    };
    let Some(holder) = l.holder.as_deref().filter(|h| !h.is_empty()) else {
        return Verdict::fail(CHECK, format!("Lease {} has no holder", l.name), fix);
    };
    let expires = l.renewed.zip(l.duration_seconds).and_then(|(at, secs)| {
        at.checked_add(jiff::SignedDuration::from_secs(i64::from(secs)))
            .ok()
    });
    match expires {
        Some(end) if end > now => Verdict::pass(
            CHECK,
            format!(
                "{holder} holds Lease {} (renewed {})",
                l.name,
                l.renewed
                    .map(holdfast_core::rfc3339::seconds)
                    .unwrap_or_default()
            ),
        ),
        _ => Verdict::fail(
            CHECK,
            format!(
                "Lease {} of {holder} has run out (not renewed within its duration)",
                l.name
            ),
            fix,
        ),
    }
}

/// protects: the dry-run snapshot write (`Ok`: let through; else the refusal's code and
/// message) was refused by holdfast, by name: its snapshot webhook entry, or its snapshot
/// policy `<fullname>-snapshots`.
pub fn judge_protected_write(
    outcome: Result<(), (u16, String)>,
    namespace: &str,
    fullname: &str,
) -> Verdict {
    const CHECK: &str = "protects";
    let policy = format!("{fullname}-snapshots");
    match outcome {
        Ok(()) => Verdict::fail(
            CHECK,
            format!(
                "a dry-run create of runtime snapshot ConfigMap {namespace}/{PROBE_CONFIGMAP} was let through"
            ),
            format!(
                "holdfast's webhooks or policies are not registered, not called, or exclude namespace {namespace} \
                 (webhook.excludeNamespaces; the release namespace is always excluded: check with -n TENANT_NAMESPACE)"
            ),
        ),
        Err((code, message)) => {
            let named = [SNAPSHOT_WEBHOOK, policy.as_str()].iter().any(|n| {
                message.contains(&format!("\"{n}\"")) || message.contains(&format!("'{n}'"))
            });
            if named && matches!(code, 400 | 403 | 422) {
                Verdict::pass(
                    CHECK,
                    format!(
                        "a dry-run snapshot write in {namespace} was refused by holdfast: {message}"
                    ),
                )
            } else {
                Verdict::fail(
                    CHECK,
                    format!(
                        "the dry-run snapshot write in {namespace} was refused ({code}), but not by {SNAPSHOT_WEBHOOK} or {policy}: {message}"
                    ),
                    "run as someone who may create ConfigMaps in that namespace (RBAC decides before holdfast), or pick another with -n",
                )
            }
        }
    }
}

/// serves: the hold API's answer to preflight (or why none came).
pub fn judge_preflight(answer: Result<(u16, &Value), String>) -> Verdict {
    const CHECK: &str = "serves";
    match answer {
        Ok((200, body)) if body.get("result").and_then(Value::as_str) == Some("Ok") => {
            let bound = body
                .get("callBoundSeconds")
                .and_then(Value::as_f64)
                .map(|s| format!(", CallBound {s}s"))
                .unwrap_or_default();
            Verdict::pass(CHECK, format!("the hold API answered preflight{bound}"))
        }
        Ok((status, body)) => Verdict::fail(
            CHECK,
            format!("the hold API answered preflight with {status}: {body}"),
            "401/403: bind your identity through the chart's rbac.holdCallerBindings; 503: wait for a leader; else see the controller's log",
        ),
        Err(why) => Verdict::fail(
            CHECK,
            format!("the hold API did not answer preflight: {why}"),
            "check the controller is Ready, and pass --server/--ca-file if you reach it directly",
        ),
    }
}

/// holdfast's webhook configurations, as [`judge_ca_bundles`] reads them.
pub async fn webhook_configurations(
    client: &kube::Client,
    release: &Release,
) -> anyhow::Result<Vec<Configuration>> {
    let name = release.webhook_configuration().to_owned();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(&name)
        .await
        .with_context(|| format!("reading MutatingWebhookConfiguration {name}"))?
        .map(|c| {
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.client_config.ca_bundle.map_or(0, |b| b.0.len())))
                .collect()
        });
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&name)
        .await
        .with_context(|| format!("reading ValidatingWebhookConfiguration {name}"))?
        .map(|c| {
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.client_config.ca_bundle.map_or(0, |b| b.0.len())))
                .collect()
        });
    Ok(vec![
        Configuration {
            kind: "MutatingWebhookConfiguration",
            name: name.clone(),
            webhooks: mutating,
        },
        Configuration {
            kind: "ValidatingWebhookConfiguration",
            name,
            webhooks: validating,
        },
    ])
}

/// The controller's Lease (named as its Service).
pub async fn lease(client: &kube::Client, release: &Release) -> anyhow::Result<Option<LeaseRead>> {
    let lease = Api::<Lease>::namespaced(client.clone(), &release.namespace)
        .get_opt(&release.service)
        .await
        .with_context(|| format!("reading Lease {}/{}", release.namespace, release.service))?;
    Ok(lease.map(|l| {
        let spec = l.spec.unwrap_or_default();
        LeaseRead {
            name: format!("{}/{}", release.namespace, release.service),
            holder: spec.holder_identity,
            renewed: spec.renew_time.map(|t| t.0),
            duration_seconds: spec.lease_duration_seconds,
        }
    }))
}

/// The dry-run create of a snapshot ConfigMap in `namespace`: `Ok` if the apiserver would
/// have written it, else its refusal.
pub async fn protected_write(
    client: &kube::Client,
    namespace: &str,
) -> anyhow::Result<Result<(), (u16, String)>> {
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some(PROBE_CONFIGMAP.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&dry, &probe)
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) => Ok(Err((s.code, s.message))),
        Err(e) => Err(e).context("the dry-run write of a snapshot ConfigMap"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(kind: &'static str, hooks: Option<&[(&str, usize)]>) -> Configuration {
        Configuration {
            kind,
            name: "hf".into(),
            webhooks: hooks.map(|h| h.iter().map(|(n, l)| (n.to_string(), *l)).collect()),
        }
    }

    #[test]
    fn check_passes_the_ca_bundle_only_when_every_webhook_has_one() {
        const M: &str = "MutatingWebhookConfiguration";
        const V: &str = "ValidatingWebhookConfiguration";
        let ok = judge_ca_bundles(&[
            config(M, Some(&[("jobs.mutate.holdfast.dev", 1200)])),
            config(V, None),
        ]);
        assert!(ok.pass, "{ok:?}");
        let missing = judge_ca_bundles(&[
            config(M, Some(&[("jobs.mutate.holdfast.dev", 1200)])),
            config(V, Some(&[("snapshots.validate.holdfast.dev", 0)])),
        ]);
        assert!(!missing.pass);
        assert!(
            missing
                .seen
                .contains("snapshots.validate.holdfast.dev has no caBundle"),
            "{missing:?}"
        );
        assert!(
            missing.lines().contains("what to do:"),
            "{}",
            missing.lines()
        );
        assert!(!judge_ca_bundles(&[config(M, None), config(V, None)]).pass);
        assert!(!judge_ca_bundles(&[config(M, Some(&[])), config(V, None)]).pass);
    }

    #[test]
    fn check_wants_a_lease_holder_within_its_duration() {
        let now: Timestamp = "2026-12-05T03:00:00Z".parse().expect("time");
        let lease = |holder: Option<&str>, renewed: &str| LeaseRead {
            name: "hs/hf-controller".into(),
            holder: holder.map(str::to_owned),
            renewed: renewed.parse().ok(),
            duration_seconds: Some(15),
        };
        assert!(judge_lease(Some(&lease(Some("pod-a"), "2026-12-05T02:59:50Z")), now).pass);
        let stale = judge_lease(Some(&lease(Some("pod-a"), "2026-12-05T02:59:40Z")), now);
        assert!(!stale.pass && stale.seen.contains("run out"), "{stale:?}");
        assert!(!judge_lease(Some(&lease(None, "2026-12-05T02:59:50Z")), now).pass);
        assert!(!judge_lease(Some(&lease(Some(""), "2026-12-05T02:59:50Z")), now).pass);
        assert!(!judge_lease(None, now).pass);
    }

    #[test]
    fn check_counts_a_write_as_protected_only_when_holdfast_refused_it() {
        let webhook = "admission webhook \"snapshots.validate.holdfast.dev\" denied the request: a runtime snapshot";
        assert!(judge_protected_write(Err((403, webhook.into())), "team-a", "hf").pass);
        let policy = "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'hf-snapshots' with binding 'hf-snapshots' denied request";
        assert!(judge_protected_write(Err((403, policy.into())), "team-a", "hf").pass);
        let other_policy = "ValidatingAdmissionPolicy 'other-snapshots' denied request";
        assert!(!judge_protected_write(Err((403, other_policy.into())), "team-a", "hf").pass);
        let rbac = "configmaps is forbidden: User \"bob\" cannot create resource \"configmaps\"";
        let refused = judge_protected_write(Err((403, rbac.into())), "team-a", "hf");
        assert!(!refused.pass && refused.fix.as_deref().is_some_and(|f| f.contains("RBAC")));
        let let_through = judge_protected_write(Ok(()), "hs", "hf");
        assert!(!let_through.pass);
        assert!(
            let_through.fix.as_deref().is_some_and(|f| f.contains("-n")),
            "{let_through:?}"
        );
        assert!(!judge_protected_write(Err((500, webhook.into())), "team-a", "hf").pass);
    }

    #[test]
    fn check_wants_preflight_answered_ok() {
        let ok = json!({"result": "Ok", "callBoundSeconds": 40.5});
        let v = judge_preflight(Ok((200, &ok)));
        assert!(v.pass && v.seen.contains("CallBound 40.5s"), "{v:?}");
        assert!(!judge_preflight(Ok((200, &json!("<html>")))).pass);
        assert!(!judge_preflight(Ok((403, &json!({"error": "Forbidden"})))).pass);
        assert!(!judge_preflight(Err("connection refused".into())).pass);
    }
}
