//! `holdfast-controller check-install`: what the chart's `helm test` hook runs, in the
//! holdfast image, as a ServiceAccount of its own. Two checks, each failing with what it saw:
//!
//! 1. **holdfast protects**: a dry-run create of a ConfigMap named as a runtime snapshot, in
//!    a namespace the webhooks cover (the chart's hook uses `default`), is denied by holdfast — its webhook entry or its
//!    ValidatingAdmissionPolicy, named as the one that denied it, with 403 or 422 — and not let through, nor refused by
//!    anything else (RBAC, another webhook). Dry run: nothing is written.
//! 2. **the hold API serves**: a TLS connection to the hold API, trusting only the CA of the
//!    release's mutating webhook configuration (the caBundle the apiserver trusts holdfast
//!    by), and a `status` call, with the pod's token, for a TrainJob that does not exist,
//!    answered 404 with the hold API's `Rejected`/`NotFound` body (or 200): authenticated (TokenReview), authorised (SubjectAccessReview),
//!    and looked up.
//!
//! The judgements are pure ([`judge_write`], [`judge_answer`]) and unit-tested; the I/O is
//! [`check`], which tier 2 runs against the real apiserver, webhook and hold API.

use anyhow::{Context, anyhow, bail};
use clap::Parser;
use holdfast_core::hold::{ErrorBody, RejectCause};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

/// `holdfast-controller check-install`'s flags (the chart's test hook sets them all).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "holdfast-controller check-install",
    about = "Check that an installed holdfast protects and serves (the chart's helm test)"
)]
pub struct CheckArgs {
    /// A namespace the webhooks cover (not the release's, which they never see): the
    /// protected write is tried there, and the status asked of a TrainJob there.
    #[arg(long)]
    pub namespace: String,
    /// The hold API's URL (`https://<controller Service>.<namespace>.svc:<port>`).
    #[arg(long)]
    pub hold_api: String,
    /// The release's MutatingWebhookConfiguration, whose caBundle is the hold API's CA.
    #[arg(long)]
    pub webhook_configuration: String,
    /// A name whose refusal counts as holdfast's: the snapshot webhook entry, the snapshot
    /// ValidatingAdmissionPolicy (repeat the flag).
    #[arg(long = "refused-by", required = true)]
    pub refused_by: Vec<String>,
    /// The TrainJob whose status is asked (one that does not exist).
    #[arg(long, default_value = "holdfast-install-check")]
    pub trainjob: String,
}

/// What came of the protected write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteVerdict {
    /// Refused by holdfast: the refusal's message.
    Protected(String),
    /// The apiserver would have written it: holdfast is not called, or lets it through.
    LetThrough,
    /// Refused, but not by holdfast (RBAC, another admission plugin): code and message.
    RefusedOtherwise(u16, String),
}

/// Judges the dry-run create's outcome: `Ok` (let through) or the apiserver's refusal.
pub fn judge_write(outcome: Result<(), (u16, String)>, refused_by: &[String]) -> WriteVerdict {
    match outcome {
        Ok(()) => WriteVerdict::LetThrough,
        Err((code, message)) => {
            let denied = refused_by.iter().any(|n| denied_by(&message, n));
            if denied && matches!(code, 403 | 422) {
                WriteVerdict::Protected(message)
            } else {
                WriteVerdict::RefusedOtherwise(code, message)
            }
        }
    }
}

/// Whether `message` is a denial by the webhook entry or the ValidatingAdmissionPolicy named
/// `name`, in the apiserver's words for one: not any message naming it (the apiserver's 400
/// "admission webhook ... does not support dry run", or a failure to call it, name it too).
fn denied_by(message: &str, name: &str) -> bool {
    let webhook = format!("admission webhook \"{name}\" denied the request");
    let policy = format!("ValidatingAdmissionPolicy '{name}' with binding '");
    message.contains(&webhook)
        || message
            .find(&policy)
            .is_some_and(|at| message[at + policy.len()..].contains("' denied request"))
}

/// What came of the hold API call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiVerdict {
    /// Answered about the TrainJob (200, or 404: it does not exist).
    Answers(u16),
    /// Any other answer: its code and body.
    Refuses(u16, String),
}

/// Judges the hold API's answer to `status` of a TrainJob that does not exist: a 404 counts
/// only with the hold API's own `Rejected`/`NotFound` body (a 404 for an unknown route, or
/// from whatever else answers at that URL, is not an answer about the TrainJob).
pub fn judge_answer(code: u16, body: &str) -> ApiVerdict {
    let not_found = || {
        serde_json::from_str::<ErrorBody>(body)
            .is_ok_and(|b| b.error == "Rejected" && b.cause == Some(RejectCause::NotFound))
    };
    match code {
        200 => ApiVerdict::Answers(code),
        404 if not_found() => ApiVerdict::Answers(code),
        _ => ApiVerdict::Refuses(code, body.to_owned()),
    }
}

/// A ConfigMap named as a runtime snapshot: the write holdfast refuses to anyone but its
/// controller (and Trainer's identity, which the hook is not).
fn probe(namespace: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("holdfast-install-check-runtime-snapshot".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The hold API's CA: the release's mutating webhook configuration's caBundle (every entry
/// carries the same one).
pub async fn ca_bundle(client: &kube::Client, configuration: &str) -> anyhow::Result<Vec<u8>> {
    let config = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(configuration)
        .await
        .with_context(|| format!("reading MutatingWebhookConfiguration {configuration}"))?;
    config
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .find_map(|w| w.client_config.ca_bundle)
        .map(|b| b.0)
        .ok_or_else(|| {
            anyhow!("MutatingWebhookConfiguration {configuration} has no caBundle: the controller has not injected it")
        })
}

/// Runs both checks: `apiserver` and `hold_api` act as the same identity, `hold_api` aimed
/// at the hold API and trusting its CA. Returns what each saw, or the first failure.
pub async fn check(
    args: &CheckArgs,
    apiserver: kube::Client,
    hold_api: kube::Client,
) -> anyhow::Result<Vec<String>> {
    let mut seen = Vec::new();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let outcome = match Api::<ConfigMap>::namespaced(apiserver, &args.namespace)
        .create(&dry, &probe(&args.namespace))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message.clone())),
        Err(e) => return Err(e).context("the dry-run write of a snapshot ConfigMap"),
    };
    match judge_write(outcome, &args.refused_by) {
        WriteVerdict::Protected(message) => {
            seen.push(format!("protects: a snapshot write was refused: {message}"));
        }
        WriteVerdict::LetThrough => bail!(
            "a dry-run create of a snapshot ConfigMap in namespace {} was let through: holdfast's \
             webhook configurations (or its policies) are not registered, not called, or exclude \
             that namespace (webhook.excludeNamespaces); snapshots and holds there are unprotected",
            args.namespace
        ),
        WriteVerdict::RefusedOtherwise(code, message) => bail!(
            "the dry-run snapshot write was refused ({code}), but not by {}: {message}",
            args.refused_by.join(" or ")
        ),
    }

    let path = format!(
        "/v1/namespaces/{}/trainjobs/{}/status",
        args.namespace, args.trainjob
    );
    let request = http::Request::get(&path)
        .body(kube::client::Body::empty())
        .context("building the hold API request")?;
    let response = hold_api
        .send(request)
        .await
        .with_context(|| format!("calling the hold API at {}", args.hold_api))?;
    let code = response.status().as_u16();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .context("reading the hold API's answer")?;
    match judge_answer(code, &String::from_utf8_lossy(&body)) {
        ApiVerdict::Answers(code) => {
            seen.push(format!(
                "serves: the hold API answered GET {path} with {code}"
            ));
            Ok(seen)
        }
        ApiVerdict::Refuses(code, body) => {
            bail!("the hold API answered GET {path} with {code}: {body}")
        }
    }
}

/// The hold API's client: `base`'s identity (its token), aimed at `url`, trusting only `ca`
/// (PEM).
pub fn hold_api_config(base: &kube::Config, url: &str, ca: &[u8]) -> anyhow::Result<kube::Config> {
    let pem = std::str::from_utf8(ca).context("the caBundle is not PEM text")?;
    let roots = holdfast_certs::CertificateInfo::parse_pem_all(pem)
        .context("parsing the caBundle")?
        .iter()
        .map(|c| c.der().to_vec())
        .collect::<Vec<_>>();
    if roots.is_empty() {
        bail!("the caBundle holds no certificate");
    }
    let mut config = base.clone();
    config.cluster_url = url
        .parse()
        .with_context(|| format!("--hold-api {url} is not a URL"))?;
    config.root_cert = Some(roots);
    config.root_cert_file = None;
    config.accept_invalid_certs = false;
    config.tls_server_name = None;
    config.proxy_url = None;
    config.default_retry = false;
    Ok(config)
}

/// `holdfast-controller check-install ...`: runs [`check`] in the pod's identity and prints
/// what it saw; a failure exits non-zero with its cause.
pub fn main(argv: impl IntoIterator<Item = std::ffi::OsString>) -> anyhow::Result<()> {
    let args = CheckArgs::parse_from(argv);
    holdfast_serve::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let base = kube::Config::infer()
            .await
            .context("the pod's Kubernetes credentials")?;
        let apiserver = kube::Client::try_from(base.clone())?;
        let ca = ca_bundle(&apiserver, &args.webhook_configuration).await?;
        let hold_api = kube::Client::try_from(hold_api_config(&base, &args.hold_api, &ca)?)?;
        for line in check(&args, apiserver, hold_api).await? {
            println!("{line}");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec![
            "snapshots.validate.holdfast.dev".into(),
            "hf-holdfast-snapshots".into(),
        ]
    }

    #[test]
    fn a_write_counts_as_protected_only_when_holdfast_refuses_it() {
        let webhook = "admission webhook \"snapshots.validate.holdfast.dev\" denied the request: x is a runtime snapshot";
        assert_eq!(
            judge_write(Err((403, webhook.into())), &names()),
            WriteVerdict::Protected(webhook.into())
        );
        let policy = "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'hf-holdfast-snapshots' with binding 'hf-holdfast-snapshots' denied request: no";
        assert!(matches!(
            judge_write(Err((403, policy.into())), &names()),
            WriteVerdict::Protected(_)
        ));
        assert_eq!(judge_write(Ok(()), &names()), WriteVerdict::LetThrough);
        let rbac = "configmaps is forbidden: User \"system:serviceaccount:a:b\" cannot create resource \"configmaps\"";
        assert!(matches!(
            judge_write(Err((403, rbac.into())), &names()),
            WriteVerdict::RefusedOtherwise(403, _)
        ));
        // Another product's webhook of a similar name does not count.
        let other =
            "admission webhook \"snapshots.validate.holdfast.dev.example\" denied the request";
        assert!(matches!(
            judge_write(Err((403, other.into())), &names()),
            WriteVerdict::RefusedOtherwise(..)
        ));
        // The apiserver's refusal to call a webhook on a dry run names it, but is no denial.
        let no_dry_run =
            "admission webhook \"snapshots.validate.holdfast.dev\" does not support dry run";
        assert!(matches!(
            judge_write(Err((400, no_dry_run.into())), &names()),
            WriteVerdict::RefusedOtherwise(400, _)
        ));
        // A denial's words with another code than a denial's are not one either.
        assert!(matches!(
            judge_write(Err((400, webhook.into())), &names()),
            WriteVerdict::RefusedOtherwise(400, _)
        ));
        // A webhook that failed to answer (failurePolicy Fail) is not a refusal of holdfast's.
        let failed = "Internal error occurred: failed calling webhook \"snapshots.validate.holdfast.dev\": connection refused";
        assert!(matches!(
            judge_write(Err((500, failed.into())), &names()),
            WriteVerdict::RefusedOtherwise(500, _)
        ));
    }

    #[test]
    fn the_hold_api_answers_only_with_the_trainjobs_status_or_its_absence() {
        let absent = r#"{"error":"Rejected","cause":"NotFound","message":"no TrainJob a/b"}"#;
        assert_eq!(judge_answer(404, absent), ApiVerdict::Answers(404));
        assert_eq!(judge_answer(200, "{}"), ApiVerdict::Answers(200));
        for code in [401, 403, 429, 500, 503] {
            assert_eq!(
                judge_answer(code, "no"),
                ApiVerdict::Refuses(code, "no".into())
            );
        }
    }

    #[test]
    fn a_404_counts_only_with_the_hold_apis_own_not_found_body() {
        // axum's 404 for an unknown route (an empty body), another server's page, another
        // cause: none says the TrainJob does not exist.
        for body in [
            "",
            "404 page not found",
            r#"{"error":"Rejected","cause":"StaleHold","message":"x"}"#,
            r#"{"error":"Invalid","message":"x"}"#,
        ] {
            assert_eq!(
                judge_answer(404, body),
                ApiVerdict::Refuses(404, body.into()),
                "{body:?}"
            );
        }
    }
}
