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
mod hold_api;
mod kubeconfig_file;
mod oidc;
mod on_call;
mod output;
mod wait;

use std::process::ExitCode;

use anyhow::anyhow;
use clap::Parser;
use serde_json::{Value, json};

use args::{Cli, Command, Output};
use credentials::KubeSelection;
use hold_api::{Failure, answer, failure, kube_config, print_answer};

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
        Command::Check { wait } => on_call::check_install(cli, &selection, *wait).await,
        Command::Release {
            target,
            wait: Some(wait),
            ..
        } => on_call::release_waiting(cli, &selection, target, *wait).await,
        Command::Hold {
            target,
            wait_stopped: Some(wait),
            ..
        } => on_call::hold_then_wait_stopped(cli, &selection, target, *wait).await,
        command => match api::ApiRequest::of(command, cli.namespace.as_deref()) {
            Some(request) => call(cli, &selection, request).await,
            None => list_held(cli, &selection).await,
        },
    }
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
