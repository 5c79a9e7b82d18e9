//! How both binaries log: one format for the product, chosen by the same flag on each.

/// Added to the log filter (`RUST_LOG`, default `info`) unless it names `kube_client`
/// itself. On a response it cannot decode (a runtime nested deeper than serde_json's 128
/// levels, in a list of every runtime of its kind) kube's client logs the whole response
/// body at `warn`, again on every retry: megabytes per line. The failure is still logged,
/// bounded, by whoever made the request (the runtime watch: "watch failed; retrying with
/// backoff").
pub const KUBE_CLIENT_DIRECTIVE: &str = "kube_client::client=error";

/// The filter for a `RUST_LOG` value (`None`: unset).
pub fn filter_spec(rust_log: Option<&str>) -> String {
    let base = rust_log.filter(|s| !s.trim().is_empty()).unwrap_or("info");
    if base.contains("kube_client") {
        base.to_owned()
    } else {
        format!("{base},{KUBE_CLIENT_DIRECTIVE}")
    }
}

/// The log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (the default: what log pipelines parse).
    #[default]
    Json,
    /// Human-readable text.
    Plain,
}

/// The logging flags, flattened into each binary's `Args`.
#[derive(clap::Args, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogArgs {
    /// Log format: json (one object per line) or plain. The level is set by `RUST_LOG`
    /// (default `info`).
    #[arg(long, env = "HOLDFAST_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// Logs to stderr in the chosen format, filtered by `RUST_LOG` (default `info`).
    /// A second call does nothing.
    pub fn init(&self) {
        let rust_log = std::env::var("RUST_LOG").ok();
        let filter = tracing_subscriber::EnvFilter::try_new(filter_spec(rust_log.as_deref()))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter_spec(None)));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        let _ = match self.log_format {
            LogFormat::Json => builder.json().try_init(),
            LogFormat::Plain => builder.try_init(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn kubes_whole_body_warning_is_off_unless_asked_for() {
        assert_eq!(filter_spec(None), "info,kube_client::client=error");
        assert_eq!(
            filter_spec(Some("debug")),
            "debug,kube_client::client=error"
        );
        assert_eq!(
            filter_spec(Some("info,kube_client=debug")),
            "info,kube_client=debug"
        );
        assert!(tracing_subscriber::EnvFilter::try_new(filter_spec(Some("warn"))).is_ok());
    }

    #[test]
    fn json_by_default_and_plain_on_request() {
        let parse = |args: &[&str]| Flags::try_parse_from(args).map(|f| f.log.log_format);
        assert_eq!(parse(&["x"]).ok(), Some(LogFormat::Json));
        assert_eq!(
            parse(&["x", "--log-format", "plain"]).ok(),
            Some(LogFormat::Plain)
        );
        assert!(parse(&["x", "--log-format", "xml"]).is_err());
    }
}
