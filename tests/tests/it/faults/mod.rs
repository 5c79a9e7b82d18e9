//! Faults: holdfast's real binaries and the control plane under kill -9, stopped apiservers
//! and etcd, compacted watch history, a flood of slow clients, Kueue restarted. Run the group
//! with `cargo test -p holdfast-tests --test it -- faults:: --test-threads 1` (`tests/run.sh`
//! runs it so, after the other topics).

mod admin_flood;
mod compaction;
mod controller;
mod flood;
mod forged_reviews;
mod hold_api_flood;
mod kueue;
mod snapshot_bombs;
mod webhook_server;

/// One fault test at a time, across the group: each owns a control plane (or restarts the
/// Kueue its file shares) and is timed against it, so two never load the machine at once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The sum of every series of `name` in Prometheus text `text` whose labels include `labels`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            let wanted = n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            if wanted {
                value.parse::<f64>().ok()
            } else {
                None
            }
        })
        .sum()
}
