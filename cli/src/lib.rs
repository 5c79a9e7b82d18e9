//! `holdfast` and `kubectl-holdfast` (one program, two names): the hold API from the command
//! line.
#![forbid(unsafe_code)]

mod api;
mod args;
mod check;
mod completion;
mod credentials;
mod discover;
mod exit;
mod held;
mod kubeconfig_file;
mod oidc;
mod output;
mod wait;

use std::process::ExitCode;

use anyhow::{Context, anyhow};
use clap::Parser;
use serde_json::{Value, json};

use args::{Cli, Command, Output, Target};
use credentials::KubeSelection;

/// The program: parse the command line, run the command, exit with its code.
pub fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: {e}");
            return ExitCode::from(exit::OTHER);
        }
    };
    match rt.block_on(execute(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("holdfast: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

/// Parses a command line as the program does, without running it (`args` starts with the
/// program's name). For checks of the commands the documentation shows
/// (cli/tests/book_cli_lines.rs).
pub fn try_parse_args<I, T>(args: I) -> Result<(), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args).map(|_| ())
}

/// The program's `--help` and each command's, as printed (`(command line, text)`), for the
/// book's CLI reference, which is generated from them (cli/tests/cli_help_reference.rs).
pub fn help_texts() -> Vec<(String, String)> {
    use clap::CommandFactory;
    let mut root = Cli::command().term_width(100);
    root.build();
    let mut out = vec![(
        "holdfast --help".to_owned(),
        root.clone().render_long_help().to_string(),
    )];
    for sub in root.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let mut sub = sub.clone().term_width(100);
        out.push((
            format!("holdfast {} --help", sub.get_name()),
            sub.render_long_help().to_string(),
        ));
    }
    out
}

/// What failed before an answer, and the exit code that says so.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

fn failure<E: Into<anyhow::Error>>(code: u8) -> impl FnOnce(E) -> Failure {
    move |e| Failure {
        code,
        error: e.into(),
    }
}

async fn execute(mut cli: Cli) -> Result<u8, Failure> {
    if let Command::Completion { shell } = cli.command {
        use std::io::Write;
        std::io::stdout()
            .write_all(&completion::script(shell))
            .map_err(failure(exit::OTHER))?;
        return Ok(0);
    }
    let selection = KubeSelection {
        kubeconfig: cli.kubeconfig.clone(),
        context: cli.context.clone(),
        user: cli.user.clone(),
    };
    if cli.needs_context_namespace() {
        // The kubeconfig context's namespace (kube falls back to `default` where the context
        // names none); `default` too where there is no kubeconfig to read (`--server` and
        // `--token` need none).
        let context = credentials::kube_config(&selection)
            .await
            .map_or_else(|_| "default".to_owned(), |c| c.default_namespace);
        cli.resolve(Some(&context))
    } else {
        cli.resolve(None)
    }
    .map_err(|e| failure(exit::USAGE)(anyhow!(e)))?;
    let cli = &cli;
    match &cli.command {
        Command::Check { wait } => check_install(cli, &selection, *wait).await,
        Command::Release {
            target,
            wait: Some(wait),
            ..
        } => release_waiting(cli, &selection, target, *wait).await,
        Command::Hold {
            target,
            wait_stopped: Some(wait),
            ..
        } => hold_then_wait_stopped(cli, &selection, target, *wait).await,
        command => match api::ApiRequest::of(command, cli.namespace.as_deref()) {
            Some(request) => call(cli, &selection, request).await,
            None => list_held(cli, &selection).await,
        },
    }
}

/// The kube configuration, with `--token` in place of the kubeconfig user's credentials (or
/// an oidc auth-provider's id-token, refreshed if it has expired).
async fn kube_config(cli: &Cli, selection: &KubeSelection) -> Result<kube::Config, Failure> {
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

async fn call(
    cli: &Cli,
    selection: &KubeSelection,
    request: api::ApiRequest,
) -> Result<u8, Failure> {
    let (status, body) = answer(cli, selection, &request).await?;
    print_answer(cli, status, &body);
    Ok(exit::of_answer(status, &body))
}

/// One call to the hold API, through `--server` or a port-forward: its answer.
async fn answer(
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

/// `release --wait`: the release, tried again after `PodsRemain` or `Conflict` until it is
/// answered otherwise or `wait` runs out, each try with a new deadline (`--deadline-in` from
/// its start, never one that has passed), the pods still there printed on stderr between
/// tries. The last answer is printed, and its exit code returned.
async fn release_waiting(
    cli: &Cli,
    selection: &KubeSelection,
    target: &Target,
    wait: std::time::Duration,
) -> Result<u8, Failure> {
    let end = tokio::time::Instant::now() + wait;
    let mut backoff = wait::Backoff::default();
    let what = format!("{}/{}", target.namespace, target.name);
    loop {
        let request = api::ApiRequest::of(&cli.command, None)
            .ok_or_else(|| failure(exit::OTHER)(anyhow!("release makes a call")))?;
        let (status, body) = answer(cli, selection, &request).await?;
        if wait::retried(status, &body) {
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            match backoff.pause(left) {
                Some(pause) => {
                    eprintln!(
                        "holdfast: {}; trying again in {pause:.1?}",
                        output::answer_line(&what, status, &body)
                    );
                    if body.get("error").and_then(Value::as_str) == Some("PodsRemain") {
                        print_remaining_pods(cli, selection, target).await;
                    }
                    tokio::time::sleep(pause).await;
                    continue;
                }
                None => eprintln!("holdfast: {what}: --wait ran out; the last answer follows"),
            }
        }
        print_answer(cli, status, &body);
        return Ok(exit::of_answer(status, &body));
    }
}

/// The Status call's `remainingPods`, on stderr (or why they could not be read).
async fn print_remaining_pods(cli: &Cli, selection: &KubeSelection, target: &Target) {
    let what = format!("{}/{}", target.namespace, target.name);
    match answer(cli, selection, &api::ApiRequest::status(target)).await {
        Ok((200, body)) => {
            if let Some(line) = wait::remaining_pods_line(&body) {
                eprintln!("holdfast: {what}: {line}");
            }
        }
        Ok((status, body)) => eprintln!(
            "holdfast: reading status: {}",
            output::answer_line(&what, status, &body)
        ),
        Err(f) => eprintln!("holdfast: reading status: {:#}", f.error),
    }
}

/// `hold --wait-stopped`: the hold, then Status read until it lists no remaining pod of the
/// TrainJob's executions, at most `wait`, printing those that remain on stderr. 0 once they
/// are gone; 5 (PodsRemain) if some remain when `wait` runs out; a failed hold's or status
/// read's own code.
async fn hold_then_wait_stopped(
    cli: &Cli,
    selection: &KubeSelection,
    target: &Target,
    wait: std::time::Duration,
) -> Result<u8, Failure> {
    let request = api::ApiRequest::of(&cli.command, None)
        .ok_or_else(|| failure(exit::OTHER)(anyhow!("hold makes a call")))?;
    let (status, body) = answer(cli, selection, &request).await?;
    print_answer(cli, status, &body);
    let code = exit::of_answer(status, &body);
    if code != 0 {
        return Ok(code);
    }
    let end = tokio::time::Instant::now() + wait;
    let mut backoff = wait::Backoff::default();
    let what = format!("{}/{}", target.namespace, target.name);
    loop {
        let (status, body) = answer(cli, selection, &api::ApiRequest::status(target)).await?;
        if status != 200 {
            eprintln!(
                "holdfast: reading status: {}",
                output::answer_line(&what, status, &body)
            );
            return Ok(exit::of_answer(status, &body));
        }
        match wait::stopped(&body) {
            Some(true) => {
                eprintln!("holdfast: {what}: the held execution's pods are gone");
                return Ok(0);
            }
            None => {
                eprintln!("holdfast: {what}: the status answer lists no remainingPods: {body}");
                return Ok(exit::OTHER);
            }
            Some(false) => {}
        }
        let line = wait::remaining_pods_line(&body).unwrap_or_default();
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        let Some(pause) = backoff.pause(left) else {
            eprintln!("holdfast: {what}: --wait-stopped ran out; {line}");
            return Ok(exit::PODS_REMAIN);
        };
        eprintln!("holdfast: {what}: {line}; reading again in {pause:.1?}");
        tokio::time::sleep(pause).await;
    }
}

/// `check [--wait]`: the install's checks ([`check`]), printed with pass or fail and what to
/// do; with `--wait`, repeated (the failures on stderr) until they all pass or it runs out.
async fn check_install(
    cli: &Cli,
    selection: &KubeSelection,
    wait: Option<std::time::Duration>,
) -> Result<u8, Failure> {
    let end = tokio::time::Instant::now() + wait.unwrap_or_default();
    let mut backoff = wait::Backoff::default();
    loop {
        let verdicts = check_round(cli, selection).await?;
        let passed = verdicts.iter().all(|v| v.pass);
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if !passed && let Some(pause) = backoff.pause(left) {
            for v in verdicts.iter().filter(|v| !v.pass) {
                eprintln!("holdfast: waiting: {}", v.lines().replace('\n', " "));
            }
            tokio::time::sleep(pause).await;
            continue;
        }
        for v in &verdicts {
            println!("{}", v.lines());
        }
        return Ok(if passed { 0 } else { exit::CHECK_FAILED });
    }
}

/// One round of the install's checks; a read that fails is that check's failure.
async fn check_round(cli: &Cli, selection: &KubeSelection) -> Result<Vec<check::Verdict>, Failure> {
    use check::Verdict;
    let config = kube_config(cli, selection).await?;
    let client = kube::Client::try_from(config).map_err(failure(exit::CREDENTIALS))?;
    let release =
        match discover::release(&client, &cli.holdfast_namespace, cli.release.as_deref()).await {
            Ok(r) => r,
            Err(e) => return Ok(vec![Verdict::unread("release", &e)]),
        };
    let namespace = cli.namespace.as_deref().unwrap_or("default");
    let preflight = api::ApiRequest::of(&Command::Preflight { target: None }, None)
        .ok_or_else(|| failure(exit::OTHER)(anyhow!("preflight makes a call")))?;
    let answered = answer(cli, selection, &preflight)
        .await
        .map_err(|f| format!("{:#}", f.error));
    Ok(vec![
        match check::webhook_configurations(&client, &release).await {
            Ok(c) => check::judge_ca_bundles(&c),
            Err(e) => Verdict::unread("caBundle", &e),
        },
        match check::lease(&client, &release).await {
            Ok(l) => check::judge_lease(l.as_ref(), jiff::Timestamp::now()),
            Err(e) => Verdict::unread("leader", &e),
        },
        match check::protected_write(&client, namespace).await {
            Ok(w) => check::judge_protected_write(w, namespace, release.webhook_configuration()),
            Err(e) => Verdict::unread("protects", &e),
        },
        check::judge_preflight(
            answered
                .as_ref()
                .map(|(s, b)| (*s, b))
                .map_err(Clone::clone),
        ),
    ])
}

/// The call through a port-forward to the release's controller (no `--server`): each ready
/// pod in turn, the Lease holder first, while the answer is a standby's `Unavailable`.
async fn call_discovered(
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

async fn bearer_token(config: &kube::Config) -> Result<String, Failure> {
    credentials::bearer_token(config)
        .await
        .map_err(failure(exit::CREDENTIALS))
}

/// One call; a failure to connect means nothing was sent, anything later an unknown outcome.
async fn send(
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
fn http_client(
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

fn print_answer(cli: &Cli, status: u16, body: &Value) {
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

/// `status -A` / `status -n NS`: read from the cluster with the user's own credentials.
async fn list_held(cli: &Cli, selection: &KubeSelection) -> Result<u8, Failure> {
    let Command::Status { all_namespaces, .. } = &cli.command else {
        return Ok(exit::OTHER);
    };
    let namespace = &cli.namespace;
    let config = kube_config(cli, selection).await?;
    let client = kube::Client::try_from(config).map_err(failure(exit::CREDENTIALS))?;
    let scope = if *all_namespaces {
        None
    } else {
        namespace.as_deref()
    };
    let held::Listing { jobs, unread } = held::held_jobs(&client, scope).await.map_err(|e| {
        let code = match &e {
            kube::Error::Api(s) if s.code == 401 || s.code == 403 => exit::FORBIDDEN,
            kube::Error::Api(_) => exit::OTHER,
            _ => exit::TRANSPORT,
        };
        failure(code)(anyhow::Error::new(e).context("listing TrainJobs"))
    })?;
    let statuses: Vec<Value> = jobs.iter().map(|j| j.status.body()).collect();
    match cli.output.unwrap_or(Output::Table) {
        // As kubectl says it: on stderr, with no header.
        Output::Table if jobs.is_empty() => match scope {
            Some(ns) => eprintln!("No held jobs in namespace {ns}."),
            None => eprintln!("No held jobs."),
        },
        Output::Table => {
            let rows: Vec<output::Row<'_>> = jobs
                .iter()
                .zip(&statuses)
                .map(|(j, s)| output::Row {
                    namespace: &j.namespace,
                    name: &j.name,
                    status: s,
                })
                .collect();
            println!("{}", output::status_table(&rows, jiff::Timestamp::now()));
        }
        format => {
            let items: Vec<Value> = jobs
                .iter()
                .zip(statuses)
                .map(|(j, mut s)| {
                    if let Some(o) = s.as_object_mut() {
                        o.remove("result");
                        o.insert("namespace".into(), json!(j.namespace));
                        o.insert("name".into(), json!(j.name));
                    }
                    s
                })
                .collect();
            println!("{}", output::document(&json!({ "items": items }), format));
        }
    }
    if unread.is_empty() {
        return Ok(0);
    }
    for why in &unread {
        eprintln!("holdfast: not listed: {why}");
    }
    Ok(exit::INCOMPLETE)
}
