//! How both binaries log: one format for the product, chosen by the same flag on each.

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
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
