//! Environment variables a release renamed. One left set after an upgrade is refused at start,
//! naming its replacement, rather than silently ignored (its flag would fall back to the
//! default: a Lease duration or a request timeout the operator did not choose).

/// `(retired name, what replaced it)`, for each binary's own list.
pub type Retired = &'static [(&'static str, &'static str)];

/// The retired variables among the names set, each with the message that explains the fix.
pub fn set_in(names: impl IntoIterator<Item = String>, retired: Retired) -> Vec<String> {
    let mut found: Vec<String> = names
        .into_iter()
        .filter_map(|name| {
            retired
                .iter()
                .find(|(old, _)| *old == name)
                .map(|(old, new)| format!("{old} is no longer read: use {new}"))
        })
        .collect();
    found.sort();
    found
}

/// Refuses to start when any retired variable of `retired` is set in this process.
pub fn refuse(retired: Retired) -> anyhow::Result<()> {
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    let found = set_in(names, retired);
    if found.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "renamed environment variables are set (durations now take a unit, e.g. 15s): {}",
            found.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETIRED: Retired = &[
        (
            "HOLDFAST_LEASE_DURATION_SECS",
            "HOLDFAST_LEASE_DURATION (e.g. 15s)",
        ),
        (
            "HOLDFAST_IDLE_TIMEOUT_MS",
            "HOLDFAST_IDLE_TIMEOUT (e.g. 60s)",
        ),
    ];

    fn vars(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_retired_variable_is_named_with_its_replacement() {
        assert_eq!(
            set_in(vars(&["PATH", "HOLDFAST_LEASE_DURATION_SECS"]), RETIRED),
            [
                "HOLDFAST_LEASE_DURATION_SECS is no longer read: use HOLDFAST_LEASE_DURATION (e.g. 15s)"
            ]
        );
    }

    #[test]
    fn current_names_and_strangers_pass() {
        assert!(
            set_in(
                vars(&[
                    "HOLDFAST_LEASE_DURATION",
                    "HOLDFAST_LEASE_DURATION_SECSX",
                    "HOME"
                ]),
                RETIRED
            )
            .is_empty()
        );
    }
}
