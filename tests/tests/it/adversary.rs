//! The adversary (issue #12), against the real apiserver, the real Kueue and holdfast's real
//! webhook, readmission gate and snapshot reconciler: generated sequences in each mode, and
//! every sequence it ever found replayed from `tests/adversary-corpus/`. See
//! `holdfast_tests::adversary` and the README's "The adversary".
//!
//! CI size: `cargo test -p holdfast-tests --test it -- adversary::`. Long run:
//! `HOLDFAST_ADVERSARY_SEQUENCES=10000 cargo test -p holdfast-tests --test it -- adversary::generated --nocapture`
//! (`HOLDFAST_ADVERSARY_SEED` to replay a seed).

use holdfast_core::mode::Mode;
use holdfast_tests::adversary::{self, Config};

async fn generated(mode: Mode) {
    let config = Config::from_env();
    let summary = adversary::campaign(mode, &config).await;
    let found: Vec<String> = summary
        .found
        .iter()
        .map(|f| {
            format!(
                "[{}] {} ({} ops; {})",
                f.entry.invariant,
                f.entry.violation,
                f.entry.sequence.ops.len(),
                f.path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )
        })
        .collect();
    assert!(
        summary.violations() == 0,
        "{}\nshrunk:\n{}",
        summary.line(&format!("{mode} mode, seed {}", config.seed)),
        found.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_sequences_in_plain_mode_break_no_invariant() {
    generated(Mode::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_sequences_in_kueue_mode_break_no_invariant() {
    generated(Mode::Kueue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sequence_the_adversary_ever_found_stays_fixed() {
    let config = Config::from_env();
    let runs = std::env::var("HOLDFAST_ADVERSARY_CORPUS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let (n, failing) = adversary::replay_corpus(config.concurrency, runs).await;
    eprintln!(
        "adversary: corpus: {n} sequences replayed {runs} times each, {} broke an invariant again",
        failing.len()
    );
    assert!(
        failing.is_empty(),
        "{} of {n} corpus sequences broke an invariant again:\n{}",
        failing.len(),
        failing
            .iter()
            .map(|(name, vs)| format!(
                "{name}: {}",
                vs.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
