//! `holdfast`: the hold API from the command line.
#![forbid(unsafe_code)]

mod api;
mod args;
mod credentials;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = args::Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok((status, body)) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&body).unwrap_or_else(|_| body.to_string())
            );
            if (200..300).contains(&status) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("holdfast: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: args::Cli) -> anyhow::Result<(u16, serde_json::Value)> {
    let server = cli
        .server
        .clone()
        .context("no hold API: pass --server https://... (or set HOLDFAST_SERVER)")?;
    let token = match &cli.token {
        Some(t) => t.clone(),
        None => credentials::kubeconfig_token(cli.kubeconfig.as_deref())?,
    };
    let mut http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(120));
    if let Some(ca) = &cli.ca_file {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        http = http.add_root_certificate(
            reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("{} is not a PEM certificate", ca.display()))?,
        );
    }
    let http = http.build()?;
    api::ApiRequest::of(&cli.command)
        .send(&http, &server, &token)
        .await
}
