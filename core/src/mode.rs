//! The two ways holdfast holds a TrainJob.

use std::{fmt, str::FromStr};

/// `--mode plain|kueue`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The hold is `spec.suspend: true` on the TrainJob.
    #[default]
    Plain,
    /// The hold is `spec.active: false` on the TrainJob's Kueue Workload.
    Kueue,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "plain" => Ok(Mode::Plain),
            "kueue" => Ok(Mode::Kueue),
            other => Err(format!("unknown mode {other:?}: expected plain or kueue")),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Plain => "plain",
            Mode::Kueue => "kueue",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_round_trips() {
        for m in [Mode::Plain, Mode::Kueue] {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
        assert!("Plain".parse::<Mode>().is_err());
    }
}
