//! What people on call wait for and check: `release --wait` (retrying `PodsRemain` and
//! `Conflict`, a new deadline each try), `hold --wait-stopped` (until the held execution's pods
//! are gone) and `check [--wait]` (does the install protect and serve?). The pure parts are in
//! [`crate::wait`] and [`crate::check`].

use anyhow::anyhow;
use serde_json::Value;

use crate::args::{Cli, Command, Target};
use crate::credentials::KubeSelection;
use crate::hold_api::{Failure, answer, failure, kube_config, print_answer};
use crate::{api, check, discover, exit, output, wait};

/// `release --wait`: the release, tried again after `PodsRemain` or `Conflict` until it is
/// answered otherwise or `wait` runs out, each try with a new deadline (`--deadline-in` from
/// its start, never one that has passed), the pods still there printed on stderr between
/// tries. The last answer is printed, and its exit code returned.
pub(crate) async fn release_waiting(
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
pub(crate) async fn print_remaining_pods(cli: &Cli, selection: &KubeSelection, target: &Target) {
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
pub(crate) async fn hold_then_wait_stopped(
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
pub(crate) async fn check_install(
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
pub(crate) async fn check_round(
    cli: &Cli,
    selection: &KubeSelection,
) -> Result<Vec<check::Verdict>, Failure> {
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
