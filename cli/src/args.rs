//! The command line.

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};

/// Call holdfast's hold API: place, lift and inspect holds on Kubeflow TrainJobs.
#[derive(Parser, Debug)]
#[command(name = "holdfast", version)]
pub struct Cli {
    /// The hold API, e.g. https://holdfast-controller.holdfast-system.svc:8443.
    #[arg(long, env = "HOLDFAST_SERVER", global = true)]
    pub server: Option<String>,
    /// A PEM file of the CA that signed the hold API's certificate (else the system roots).
    #[arg(long, env = "HOLDFAST_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// The kubeconfig whose current user's bearer token authenticates the calls.
    #[arg(long, env = "KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// A bearer token to use instead of the kubeconfig's.
    #[arg(long, env = "HOLDFAST_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Place hold INSTANCE on a TrainJob.
    Hold {
        /// NAMESPACE/NAME of the TrainJob.
        #[arg(value_parser = parse_target)]
        target: Target,
        #[arg(long)]
        instance: u64,
        #[arg(long)]
        reason: Option<String>,
        /// The call's deadline, from now (e.g. 30s, 500ms, 2m).
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        deadline_in: Duration,
    },
    /// Lift hold INSTANCE, if it is the one in force.
    Release {
        #[arg(value_parser = parse_target)]
        target: Target,
        #[arg(long)]
        instance: u64,
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        deadline_in: Duration,
    },
    /// Open a TrainJob's start gate.
    Open {
        #[arg(value_parser = parse_target)]
        target: Target,
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        deadline_in: Duration,
    },
    /// Show the hold in force, the opened mark, A and the TrainJob's state.
    Status {
        #[arg(value_parser = parse_target)]
        target: Target,
    },
    /// Which calls the cluster supports, and the CallBound; dry-runs a hold on TARGET if given.
    Preflight {
        #[arg(value_parser = parse_target)]
        target: Option<Target>,
    },
    /// The TrainJobs whose snapshot no longer equals their live runtime (in NAMESPACE, or
    /// in every namespace).
    Drift {
        #[arg(long, short = 'n')]
        namespace: Option<String>,
    },
}

/// `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
}

pub fn parse_target(s: &str) -> Result<Target, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(Target {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
    }
}

/// `500ms`, `30s`, `2m`, `1h`, or several run together (`1m30s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration like 30s, 500ms, 2m or 1m30s");
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(unit);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_namespace_slash_name() {
        assert_eq!(
            parse_target("team-a/mnist"),
            Ok(Target {
                namespace: "team-a".into(),
                name: "mnist".into()
            })
        );
        for bad in ["mnist", "/mnist", "team-a/", "a/b/c"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_have_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        for bad in ["", "30", "s", "3x", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_command_line_parses() {
        let cli = Cli::try_parse_from([
            "holdfast",
            "hold",
            "team-a/mnist",
            "--instance",
            "3",
            "--reason",
            "node lost",
            "--server",
            "https://127.0.0.1:8443",
        ])
        .expect("parse");
        assert_eq!(cli.server.as_deref(), Some("https://127.0.0.1:8443"));
        match cli.command {
            Command::Hold {
                instance,
                deadline_in,
                reason,
                ..
            } => {
                assert_eq!(instance, 3);
                assert_eq!(deadline_in, Duration::from_secs(30));
                assert_eq!(reason.as_deref(), Some("node lost"));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["holdfast", "release", "team-a/mnist"]).is_err());
    }
}
