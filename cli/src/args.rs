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
#[command(name = "holdfast", version, after_help = crate::exit::ROOT_HELP)]
pub struct Cli {
    /// The hold API, e.g. https://holdfast-controller.holdfast-system.svc:8443. Without it,
    /// the CLI finds the release's controller in --holdfast-namespace and reaches it through a
    /// port-forward, as `kubectl port-forward` would.
    #[arg(long, env = "HOLDFAST_SERVER", global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Where holdfast's chart is installed (used without --server), e.g. holdfast-system.
    #[arg(
        long,
        env = "HOLDFAST_NAMESPACE",
        global = true,
        default_value = "holdfast-system",
        value_name = "NAMESPACE"
    )]
    pub holdfast_namespace: String,
    /// The chart release to use when --holdfast-namespace has more than one (without
    /// --server), e.g. holdfast.
    #[arg(long, env = "HOLDFAST_RELEASE", global = true, value_name = "NAME")]
    pub release: Option<String>,
    /// A PEM file of the CA that signed the hold API's certificate (else, with --server, the
    /// client's built-in web PKI roots; without it, the caBundle of the release's webhook
    /// configuration), e.g. ./holdfast-ca.crt.
    #[arg(long, env = "HOLDFAST_CA_FILE", global = true, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The kubeconfig to use (else `KUBECONFIG`, a list as kubectl reads it, else
    /// ~/.kube/config, else the pod's ServiceAccount), e.g. ~/.kube/prod.yaml.
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (else its current context), e.g. prod-admin.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig user to use (else the context's), e.g. on-call.
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// The namespace of a TrainJob named without one (NAME rather than NAMESPACE/NAME), of
    /// `status`'s listing and of `check`'s protected write: else the kubeconfig context's
    /// namespace, else `default`. `drift`'s scope: else every namespace. E.g. -n team-a.
    #[arg(long, short = 'n', global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Output format: table (the default for `status`), json (the default for the other
    /// commands: the hold API's answer as it came) or yaml; e.g. -o yaml.
    #[arg(long, short = 'o', global = true, value_enum)]
    pub output: Option<Output>,
    /// A bearer token to use instead of the kubeconfig's, e.g. "$(kubectl create token
    /// dispatch -n team-a)".
    #[arg(
        long,
        env = "HOLDFAST_TOKEN",
        global = true,
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// How long `--wait-stopped` waits when it is given no DURATION.
pub const WAIT_STOPPED_DEFAULT: &str = "5m";
/// How long `check --wait` waits when it is given no DURATION.
pub const CHECK_WAIT_DEFAULT: &str = "2m";

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Place hold INSTANCE on a TrainJob.
    #[command(after_help = "\
Examples:
  holdfast hold team-a/mnist --instance 3 --reason \"node lost\"
  holdfast hold mnist -n team-a --instance 4 --wait-stopped=10m")]
    Hold {
        /// The TrainJob: NAMESPACE/NAME, or NAME in --namespace; e.g. team-a/mnist.
        #[arg(value_parser = parse_target, value_name = "[NAMESPACE/]NAME")]
        target: Target,
        /// The hold's instance: the supervisor's number for this hold, higher than any it
        /// placed on the job before (a lower one is stale); e.g. 3.
        #[arg(long, value_name = "N")]
        instance: u64,
        /// Why the job is held, recorded on the hold and shown by `status`; e.g. "node lost".
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// The call's deadline, from now; e.g. 30s, 500ms, 2m.
        #[arg(long, default_value = "30s", value_parser = duration::parse, value_name = "DURATION")]
        deadline_in: Duration,
        /// Once the hold is placed, wait until the held execution's pods are gone (the
        /// Status call lists none), printing those that remain, for at most DURATION (5m if
        /// none is given); exit 5 if some still remain then. E.g. --wait-stopped=10m.
        #[arg(
            long,
            value_name = "DURATION",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = WAIT_STOPPED_DEFAULT,
            value_parser = duration::parse
        )]
        wait_stopped: Option<Duration>,
    },
    /// Lift hold INSTANCE, if it is the one in force.
    #[command(after_help = "\
Examples:
  holdfast release team-a/mnist --instance 3
  holdfast release team-a/mnist --instance 3 --wait=10m")]
    Release {
        /// The TrainJob: NAMESPACE/NAME, or NAME in --namespace; e.g. team-a/mnist.
        #[arg(value_parser = parse_target, value_name = "[NAMESPACE/]NAME")]
        target: Target,
        /// The instance of the hold to lift (the one in force, as `status` shows it); e.g. 3.
        #[arg(long, value_name = "N")]
        instance: u64,
        /// Each call's deadline, from its start; e.g. 30s, 500ms, 2m.
        #[arg(long, default_value = "30s", value_parser = duration::parse, value_name = "DURATION")]
        deadline_in: Duration,
        /// Retry a PodsRemain or Conflict answer for at most DURATION, each try with a new
        /// deadline (--deadline-in from its start), printing the pods still there; exit 0 once
        /// released, else with the last answer's code. E.g. --wait=10m.
        #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
        wait: Option<Duration>,
    },
    /// Open a TrainJob's start gate.
    #[command(after_help = "\
Examples:
  holdfast open team-a/mnist
  holdfast open mnist -n team-a --deadline-in 1m")]
    Open {
        /// The TrainJob: NAMESPACE/NAME, or NAME in --namespace; e.g. team-a/mnist.
        #[arg(value_parser = parse_target, value_name = "[NAMESPACE/]NAME")]
        target: Target,
        /// The call's deadline, from now; e.g. 30s, 500ms, 2m.
        #[arg(long, default_value = "30s", value_parser = duration::parse, value_name = "DURATION")]
        deadline_in: Duration,
    },
    /// Show the hold in force, the opened mark, A and the TrainJob's state; without TARGET,
    /// every held job in the namespace (or, with -A, in the cluster), read from the TrainJobs
    /// and Workloads themselves with your own kube credentials (the hold API has no list
    /// call).
    #[command(after_help = "\
Examples:
  holdfast status team-a/mnist
  holdfast status -n team-a -o yaml
  holdfast status -A")]
    Status {
        /// The TrainJob: NAMESPACE/NAME, or NAME in --namespace; e.g. team-a/mnist. Without
        /// it, every held job in the namespace.
        #[arg(value_parser = parse_target, value_name = "[NAMESPACE/]NAME")]
        target: Option<Target>,
        /// Every held job in every namespace.
        #[arg(long, short = 'A', conflicts_with_all = ["target", "namespace"])]
        all_namespaces: bool,
    },
    /// Which calls the cluster supports, and the CallBound; dry-runs a hold on TARGET if given.
    #[command(after_help = "\
Examples:
  holdfast preflight
  holdfast preflight team-a/mnist")]
    Preflight {
        /// A TrainJob to dry-run a hold on: NAMESPACE/NAME, or NAME in --namespace; e.g.
        /// team-a/mnist.
        #[arg(value_parser = parse_target, value_name = "[NAMESPACE/]NAME")]
        target: Option<Target>,
    },
    /// The TrainJobs whose snapshot no longer equals their live runtime (in --namespace if
    /// given, else in every namespace).
    #[command(after_help = "\
Examples:
  holdfast drift
  holdfast drift -n team-a")]
    Drift,
    /// Attest that every process on NODE has ended (it is powered off, or has rebooted):
    /// holdfast then lets the node's deleted pods go, which a lost node's kubelet cannot
    /// confirm. Only after fencing the node for real.
    #[command(after_help = "\
Example:
  holdfast fence gpu-7")]
    Fence {
        /// The Node's name; e.g. gpu-7.
        #[arg(value_parser = parse_node)]
        node: String,
    },
    /// Verify the install: the caBundle injected into holdfast's webhook configurations, a
    /// leader holding the controller's Lease, a dry-run protected write (a runtime snapshot
    /// ConfigMap in --namespace) refused by holdfast, and the hold API answering preflight.
    /// Each check is printed with pass or fail and what to do; exit 14 if any fails.
    #[command(after_help = "\
Examples:
  holdfast check -n team-a
  holdfast check --wait=5m        # right after `helm install`")]
    Check {
        /// Repeat the checks until they all pass, for at most DURATION (2m if none is
        /// given); e.g. --wait=5m.
        #[arg(
            long,
            value_name = "DURATION",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = CHECK_WAIT_DEFAULT,
            value_parser = duration::parse
        )]
        wait: Option<Duration>,
    },
    /// Print a shell completion script for bash, zsh or fish.
    #[command(after_help = "\
Examples:
  holdfast completion bash > /etc/bash_completion.d/holdfast
  holdfast completion zsh > \"${fpath[1]}/_holdfast\"
  holdfast completion fish > ~/.config/fish/completions/holdfast.fish")]
    Completion {
        /// The shell; e.g. bash.
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// The shells `completion` writes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
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

/// `NAMESPACE/NAME`, or `NAME` (its namespace then left empty, for [`Cli::resolve`] to fill
/// from --namespace or the kubeconfig context).
pub fn parse_target(s: &str) -> Result<Target, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(Target {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            })
        }
        None if !s.is_empty() => Ok(Target {
            namespace: String::new(),
            name: s.to_owned(),
        }),
        _ => Err(format!("{s:?} is not NAMESPACE/NAME or NAME")),
    }
}

impl Cli {
    /// Whether a namespace must come from the kubeconfig context: none given with -n, and
    /// a TrainJob named without one, or a namespace's listing (`status`, `check`).
    pub fn needs_context_namespace(&self) -> bool {
        if self.namespace.is_some() {
            return false;
        }
        match &self.command {
            Command::Hold { target, .. }
            | Command::Release { target, .. }
            | Command::Open { target, .. } => target.namespace.is_empty(),
            Command::Status {
                target,
                all_namespaces,
            } => target.as_ref().is_none_or(|t| t.namespace.is_empty()) && !all_namespaces,
            Command::Preflight { target } => {
                target.as_ref().is_some_and(|t| t.namespace.is_empty())
            }
            Command::Check { .. } => true,
            Command::Drift | Command::Fence { .. } | Command::Completion { .. } => false,
        }
    }

    /// Fills the namespace of a TrainJob named without one with -n, else `context` (the
    /// kubeconfig context's); refuses -n naming another namespace than NAMESPACE/NAME does.
    pub fn resolve(&mut self, context: Option<&str>) -> Result<(), String> {
        let given = self.namespace.clone();
        let fill = |t: &mut Target| -> Result<(), String> {
            match (&given, t.namespace.is_empty()) {
                (Some(ns), true) => t.namespace = ns.clone(),
                (None, true) => {
                    t.namespace = context
                        .ok_or_else(|| {
                            format!("{}: name its namespace (NAMESPACE/NAME or -n)", t.name)
                        })?
                        .to_owned()
                }
                (Some(ns), false) if *ns != t.namespace => {
                    return Err(format!(
                        "-n {ns} and {}/{} name two namespaces: give one",
                        t.namespace, t.name
                    ));
                }
                _ => {}
            }
            Ok(())
        };
        match &mut self.command {
            Command::Hold { target, .. }
            | Command::Release { target, .. }
            | Command::Open { target, .. }
            | Command::Status {
                target: Some(target),
                ..
            }
            | Command::Preflight {
                target: Some(target),
            } => fill(target)?,
            _ => {}
        }
        if self.namespace.is_none() && self.needs_listing_namespace() {
            self.namespace = context.map(str::to_owned);
        }
        Ok(())
    }

    /// `status` without a TrainJob and without -A, and `check`: a namespace is needed.
    fn needs_listing_namespace(&self) -> bool {
        matches!(
            self.command,
            Command::Status {
                target: None,
                all_namespaces: false
            } | Command::Check { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command, and every argument, of `command` (recursively) that lacks help text;
    /// every command without an example in its after-help; every argument taking a value
    /// whose help gives no example ("e.g.").
    fn undocumented(command: &clap::Command, path: &str) -> Vec<String> {
        let mut missing = Vec::new();
        let text =
            |s: Option<&clap::builder::StyledStr>| s.map(|s| s.to_string()).unwrap_or_default();
        if text(command.get_about()).trim().is_empty()
            && text(command.get_long_about()).trim().is_empty()
        {
            missing.push(format!("command `{path}` has no help"));
        }
        let after = text(command.get_after_help()) + &text(command.get_after_long_help());
        if !after.contains("Example") {
            missing.push(format!("command `{path}` has no example in its after_help"));
        }
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            let help = text(arg.get_help()) + &text(arg.get_long_help());
            let name = arg
                .get_long()
                .map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
            if help.trim().is_empty() {
                missing.push(format!("`{path}` argument {name} has no help"));
            } else if arg.get_action().takes_values() && !help.to_lowercase().contains("e.g.") {
                missing.push(format!(
                    "`{path}` argument {name} has no example (e.g.) in its help"
                ));
            }
        }
        for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
            missing.extend(undocumented(sub, &format!("{path} {}", sub.get_name())));
        }
        missing
    }

    #[test]
    fn every_command_and_argument_has_help_and_an_example() {
        use clap::CommandFactory;
        let mut root = Cli::command();
        root.build();
        let missing = undocumented(&root, "holdfast");
        assert!(missing.is_empty(), "undocumented:\n{}", missing.join("\n"));
        // The walk does see a command without help.
        let bare = clap::Command::new("bare").arg(clap::Arg::new("x").long("x"));
        assert_eq!(
            undocumented(&bare, "bare").len(),
            3,
            "{:?}",
            undocumented(&bare, "bare")
        );
    }

    #[test]
    fn a_trainjob_named_without_namespace_takes_n_else_the_kubeconfig_contexts() {
        let resolved = |args: &[&str], context: Option<&str>| {
            let mut cli = Cli::try_parse_from(args).expect("parse");
            cli.resolve(context).map(|()| match cli.command {
                Command::Release { target, .. } => target.namespace,
                Command::Status { target: None, .. } | Command::Check { .. } => {
                    cli.namespace.unwrap_or_default()
                }
                other => panic!("{other:?}"),
            })
        };
        let release = ["holdfast", "release", "mnist", "--instance", "3"];
        assert_eq!(resolved(&release, Some("team-ctx")), Ok("team-ctx".into()));
        let with_n = [&release[..], &["-n", "team-a"]].concat();
        let cli = Cli::try_parse_from(&with_n).expect("parse");
        assert!(!cli.needs_context_namespace());
        assert_eq!(resolved(&with_n, None), Ok("team-a".into()));
        let full = ["holdfast", "release", "team-b/mnist", "--instance", "3"];
        assert!(
            !Cli::try_parse_from(full)
                .expect("parse")
                .needs_context_namespace()
        );
        assert_eq!(resolved(&full, None), Ok("team-b".into()));
        let both = [&full[..], &["-n", "team-a"]].concat();
        assert!(resolved(&both, None).is_err(), "-n and NAMESPACE/ disagree");
        assert!(resolved(&release, None).is_err(), "no namespace at all");
        let status = ["holdfast", "status"];
        assert!(
            Cli::try_parse_from(status)
                .expect("parse")
                .needs_context_namespace()
        );
        assert_eq!(resolved(&status, Some("team-ctx")), Ok("team-ctx".into()));
        let all = Cli::try_parse_from(["holdfast", "status", "-A"]).expect("parse");
        assert!(!all.needs_context_namespace());
        assert_eq!(
            resolved(&["holdfast", "check"], Some("team-ctx")),
            Ok("team-ctx".into())
        );
    }

    #[test]
    fn wait_flags_take_a_duration_or_their_default() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.command);
        match parse(&[
            "holdfast",
            "hold",
            "a/b",
            "--instance",
            "1",
            "--wait-stopped",
        ]) {
            Ok(Command::Hold { wait_stopped, .. }) => {
                assert_eq!(wait_stopped, Some(Duration::from_secs(300)));
            }
            other => panic!("{other:?}"),
        }
        match parse(&[
            "holdfast",
            "hold",
            "a/b",
            "--instance",
            "1",
            "--wait-stopped=2s",
        ]) {
            Ok(Command::Hold { wait_stopped, .. }) => {
                assert_eq!(wait_stopped, Some(Duration::from_secs(2)));
            }
            other => panic!("{other:?}"),
        }
        match parse(&["holdfast", "release", "a/b", "--instance", "1", "--wait=1m"]) {
            Ok(Command::Release { wait, .. }) => assert_eq!(wait, Some(Duration::from_secs(60))),
            other => panic!("{other:?}"),
        }
        assert!(parse(&["holdfast", "release", "a/b", "--instance", "1", "--wait"]).is_err());
        match parse(&["holdfast", "check", "--wait"]) {
            Ok(Command::Check { wait }) => assert_eq!(wait, Some(Duration::from_secs(120))),
            other => panic!("{other:?}"),
        }
        assert!(parse(&["holdfast", "check", "--wait=soon"]).is_err());
    }

    #[test]
    fn targets_are_namespace_slash_name() {
        assert_eq!(
            parse_target("team-a/mnist"),
            Ok(Target {
                namespace: "team-a".into(),
                name: "mnist".into()
            })
        );
        assert_eq!(
            parse_target("mnist"),
            Ok(Target {
                namespace: String::new(),
                name: "mnist".into()
            })
        );
        for bad in ["", "/mnist", "team-a/", "a/b/c"] {
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
