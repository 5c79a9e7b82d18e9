//! The command line.

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};
use holdfast_core::duration;

/// Call holdfast's hold API: place, lift and inspect holds on Kubeflow TrainJobs.
///
/// Installed as `kubectl-holdfast` it is `kubectl holdfast ...`. It authenticates as kubectl
/// does: the kubeconfig's (or, in a pod, the ServiceAccount's) bearer token, from a static
/// token, a token file, an exec credential plugin (EKS, GKE, AKS, OIDC login helpers) or an
/// `auth-provider: oidc` id-token (refreshed with its refresh-token when it has expired, and
/// written back to the kubeconfig, as kubectl does). The hold API accepts bearer tokens only.
#[derive(Parser, Debug)]
#[command(name = "holdfast", version, after_help = crate::exit::HELP)]
pub struct Cli {
    /// The hold API, e.g. https://holdfast-controller.holdfast-system.svc:8443. Without it,
    /// the CLI finds the release's controller in --holdfast-namespace and reaches it through a
    /// port-forward, as `kubectl port-forward` would.
    #[arg(long, env = "HOLDFAST_SERVER", global = true)]
    pub server: Option<String>,
    /// Where holdfast's chart is installed (used without --server).
    #[arg(
        long,
        env = "HOLDFAST_NAMESPACE",
        global = true,
        default_value = "holdfast-system"
    )]
    pub holdfast_namespace: String,
    /// The chart release to use when --holdfast-namespace has more than one (without --server).
    #[arg(long, env = "HOLDFAST_RELEASE", global = true)]
    pub release: Option<String>,
    /// A PEM file of the CA that signed the hold API's certificate (else, with --server, the
    /// client's built-in web PKI roots; without it, the caBundle of the release's webhook
    /// configuration).
    #[arg(long, env = "HOLDFAST_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// The kubeconfig to use (else `KUBECONFIG`, a list as kubectl reads it, else
    /// ~/.kube/config, else the pod's ServiceAccount).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (else its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig user to use (else the context's).
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Output format: table (the default for `status`), json (the default for the other
    /// commands: the hold API's answer as it came) or yaml.
    #[arg(long, short = 'o', global = true, value_enum)]
    pub output: Option<Output>,
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
        #[arg(long, default_value = "30s", value_parser = duration::parse)]
        deadline_in: Duration,
    },
    /// Lift hold INSTANCE, if it is the one in force.
    Release {
        #[arg(value_parser = parse_target)]
        target: Target,
        #[arg(long)]
        instance: u64,
        #[arg(long, default_value = "30s", value_parser = duration::parse)]
        deadline_in: Duration,
    },
    /// Open a TrainJob's start gate.
    Open {
        #[arg(value_parser = parse_target)]
        target: Target,
        #[arg(long, default_value = "30s", value_parser = duration::parse)]
        deadline_in: Duration,
    },
    /// Show the hold in force, the opened mark, A and the TrainJob's state; without TARGET,
    /// every held job in NAMESPACE (or, with -A, in the cluster), read from the TrainJobs and
    /// Workloads themselves with your own kube credentials (the hold API has no list call).
    Status {
        #[arg(value_parser = parse_target, required_unless_present_any = ["all_namespaces", "namespace"])]
        target: Option<Target>,
        /// Every held job in every namespace.
        #[arg(long, short = 'A', conflicts_with_all = ["target", "namespace"])]
        all_namespaces: bool,
        /// Every held job in NAMESPACE.
        #[arg(long, short = 'n', conflicts_with = "target")]
        namespace: Option<String>,
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
    /// Attest that every process on NODE has ended (it is powered off, or has rebooted):
    /// holdfast then lets the node's deleted pods go, which a lost node's kubelet cannot
    /// confirm. Only after fencing the node for real.
    Fence {
        /// The Node's name.
        #[arg(value_parser = parse_node)]
        node: String,
    },
}

/// How answers are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
}

/// A Node's name: a DNS-1123 subdomain (so it cannot reach another path of the API).
pub fn parse_node(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?} is not a Node's name (a DNS-1123 subdomain)"))
    }
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
    fn a_fence_names_a_node_and_nothing_else() {
        assert_eq!(parse_node("gpu-7.rack-2"), Ok("gpu-7.rack-2".into()));
        for bad in [
            "",
            "a/../b",
            "Gpu7",
            "-a",
            "a..b",
            "a%2Fb",
            &"x".repeat(254),
        ] {
            assert!(parse_node(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["holdfast", "fence", "gpu-7"]).expect("parse");
        assert!(matches!(cli.command, Command::Fence { ref node } if node == "gpu-7"));
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
        let open = |deadline: &str| {
            Cli::try_parse_from([
                "holdfast",
                "open",
                "team-a/mnist",
                "--deadline-in",
                deadline,
            ])
            .map(|cli| match cli.command {
                Command::Open { deadline_in, .. } => deadline_in,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(open("1m30s").ok(), Some(Duration::from_secs(90)));
        assert_eq!(open("500ms").ok(), Some(Duration::from_millis(500)));
        assert!(open("30").is_err());
    }
}
