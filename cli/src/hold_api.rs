//! Calling the hold API: the kube configuration and bearer token, the hold API found (through
//! `--server`, or a port-forward to the release's controller) and called over HTTPS, and the
//! answer printed; what fails before an answer is a [`Failure`] with its exit code.

use anyhow::{Context, anyhow};
use serde_json::Value;

use crate::args::{Cli, Command, Output};
use crate::credentials::{self, KubeSelection};
use crate::{api, discover, exit, output};

/// What failed before an answer, and the exit code that says so.
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) error: anyhow::Error,
}

pub(crate) fn failure<E: Into<anyhow::Error>>(code: u8) -> impl FnOnce(E) -> Failure {
    move |e| Failure {
        code,
        error: e.into(),
    }
}

/// The kube configuration, with `--token` in place of the kubeconfig user's credentials (or
/// an oidc auth-provider's id-token, refreshed if it has expired).
pub(crate) async fn kube_config(
    cli: &Cli,
    selection: &KubeSelection,
) -> Result<kube::Config, Failure> {
    let mut config = credentials::kube_config(selection)
        .await
        .map_err(failure(exit::CREDENTIALS))?;
    match &cli.token {
        Some(token) => {
            config.auth_info = kube::config::AuthInfo {
                token: Some(token.clone().into()),
                ..Default::default()
            };
        }
        None => credentials::with_oidc_id_token(&mut config, selection)
            .await
            .map_err(failure(exit::CREDENTIALS))?,
    }
    Ok(config)
}

/// One call to the hold API, through `--server` or a port-forward: its answer.
pub(crate) async fn answer(
    cli: &Cli,
    selection: &KubeSelection,
    request: &api::ApiRequest,
) -> Result<(u16, Value), Failure> {
    // The bearer token is the caller's Kubernetes credential: it goes over TLS or not at all.
    if let Some(server) = &cli.server
        && !server.starts_with("https://")
    {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow!(
                "--server {server}: the hold API is called over https:// only (the bearer token sent is your Kubernetes credential)"
            ),
        });
    }
    match &cli.server {
        Some(server) => {
            // With --token no kubeconfig is needed at all (a pod without one, say).
            let token = match &cli.token {
                Some(t) => t.clone(),
                None => bearer_token(&kube_config(cli, selection).await?).await?,
            };
            let http = http_client(cli, None).map_err(failure(exit::USAGE))?;
            send(request, &http, server, &token).await
        }
        None => {
            // `--token`, when given, is already the configuration's credential.
            let config = kube_config(cli, selection).await?;
            let token = bearer_token(&config).await?;
            call_discovered(cli, config, request, &token).await
        }
    }
}

/// The call through a port-forward to the release's controller (no `--server`): each ready
/// pod in turn, the Lease holder first, while the answer is a standby's `Unavailable`.
pub(crate) async fn call_discovered(
    cli: &Cli,
    config: kube::Config,
    request: &api::ApiRequest,
    token: &str,
) -> Result<(u16, Value), Failure> {
    let unreachable = |e: anyhow::Error| {
        let forbidden = e.chain().any(|c| {
            matches!(c.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 401 || s.code == 403)
        });
        Failure {
            code: if forbidden {
                exit::FORBIDDEN
            } else {
                exit::TRANSPORT
            },
            error: e.context("finding the hold API (nothing was sent to it)"),
        }
    };
    let client = kube::Client::try_from(config).map_err(failure(exit::CREDENTIALS))?;
    let release = discover::release(&client, &cli.holdfast_namespace, cli.release.as_deref())
        .await
        .map_err(unreachable)?;
    let ca = match &cli.ca_file {
        Some(_) => None,
        None => Some(
            discover::ca_bundle(&client, &release)
                .await
                .map_err(|e| unreachable(e.context("pass --ca-file to name the CA yourself")))?,
        ),
    };
    let pods = discover::pods(&client, &release)
        .await
        .map_err(unreachable)?;
    let mut last = None;
    let tries = pods.len();
    for (i, (pod, port)) in pods.into_iter().enumerate() {
        let local = discover::forward(&client, &release.namespace, &pod, port)
            .await
            .map_err(unreachable)?;
        let http = http_client(cli, Some((&release.host, local, ca.as_deref())))
            .map_err(failure(exit::USAGE))?;
        let server = format!("https://{}:{}", release.host, local.port());
        let more = i + 1 < tries;
        match send(request, &http, &server, token).await {
            // A pod the port-forward could not reach (gone, not ready after all): nothing was
            // sent, so the next one may be tried.
            Err(f) if f.code == exit::TRANSPORT && more => {
                eprintln!("holdfast: pod {pod}: {:#}; trying the next one", f.error);
                last = Some(Err(f));
            }
            Err(f) => return Err(f),
            Ok((status, body)) => {
                let standby = status == 503
                    && body.get("error").and_then(Value::as_str) == Some("Unavailable");
                last = Some(Ok((status, body)));
                if !(standby && more) {
                    break;
                }
            }
        }
    }
    last.unwrap_or_else(|| Err(unreachable(anyhow!("no pod to call"))))
}

pub(crate) async fn bearer_token(config: &kube::Config) -> Result<String, Failure> {
    credentials::bearer_token(config)
        .await
        .map_err(failure(exit::CREDENTIALS))
}

/// One call; a failure to connect means nothing was sent, anything later an unknown outcome.
pub(crate) async fn send(
    request: &api::ApiRequest,
    http: &reqwest::Client,
    server: &str,
    token: &str,
) -> Result<(u16, Value), Failure> {
    request.send(http, server, token).await.map_err(|e| {
        // Only a failure to connect proves nothing was sent; after that the call may have
        // been made, and its outcome is unknown until `status` is read.
        let connect = e
            .downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_connect);
        if connect {
            failure(exit::TRANSPORT)(e)
        } else {
            failure(exit::UNKNOWN)(e.context(
                "the call was sent but its answer did not come back: its outcome is unknown; read `status` after the call's deadline",
            ))
        }
    })
}

/// The HTTPS client: trusting `--ca-file` if given; through a port-forward (`forwarded`:
/// the certificate's host name, the local end, the discovered CA), `host` resolves to the
/// local end and the discovered CA is the only root.
pub(crate) fn http_client(
    cli: &Cli,
    forwarded: Option<(&str, std::net::SocketAddr, Option<&[u8]>)>,
) -> anyhow::Result<reqwest::Client> {
    let mut http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(120));
    let pem = match (&cli.ca_file, forwarded.and_then(|f| f.2)) {
        (Some(ca), _) => Some((
            std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?,
            ca.display().to_string(),
        )),
        (None, Some(bundle)) => Some((
            bundle.to_vec(),
            "the webhook configuration's caBundle".to_owned(),
        )),
        (None, None) => None,
    };
    if let Some((pem, from)) = pem {
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("{from} is not PEM certificates"))?;
        if certificates.is_empty() {
            anyhow::bail!("{from} holds no certificate");
        }
        if forwarded.is_some() {
            // Only the release's CA: a port-forward is no place for the web PKI.
            http = http.tls_built_in_root_certs(false);
        }
        for c in certificates {
            http = http.add_root_certificate(c);
        }
    }
    if let Some((host, local, _)) = forwarded {
        // The local end of the port-forward, never a proxy from the environment.
        http = http.resolve(host, local).no_proxy();
    }
    Ok(http.build()?)
}

pub(crate) fn print_answer(cli: &Cli, status: u16, body: &Value) {
    let default = match cli.command {
        Command::Status { .. } => Output::Table,
        _ => Output::Json,
    };
    let format = cli.output.unwrap_or(default);
    let ok = (200..300).contains(&status);
    let target = match &cli.command {
        Command::Hold { target, .. }
        | Command::Release { target, .. }
        | Command::Open { target, .. }
        | Command::Status {
            target: Some(target),
            ..
        } => Some(target),
        _ => None,
    };
    match (format, target) {
        (Output::Table, Some(t)) if ok && matches!(cli.command, Command::Status { .. }) => {
            let row = output::Row {
                namespace: &t.namespace,
                name: &t.name,
                status: body,
            };
            println!("{}", output::status_table(&[row], jiff::Timestamp::now()));
            if let Some(pods) = output::remaining_pods_table(body) {
                println!("\n{pods}");
            }
        }
        (Output::Table, Some(t)) => {
            let line = output::answer_line(&format!("{}/{}", t.namespace, t.name), status, body);
            if ok {
                println!("{line}");
            } else {
                eprintln!("{line}");
            }
        }
        // Preflight and drift have no table: JSON.
        (format, _) => println!("{}", output::document(body, format)),
    }
}
