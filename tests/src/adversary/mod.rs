//! The adversary (issue #12): seeded, reproducible sequences of everything an ordinary
//! namespace editor and a pod's ServiceAccount can send, interleaved with dispatch's calls
//! (current, late and stale) and Kueue's own actions, run against the real apiserver, the
//! real Kueue and holdfast's real webhook, readmission gate and snapshot reconciler, with
//! the invariants checked over the whole history after every step. A violation is shrunk
//! to a short sequence, printed as a corpus file, and written under the target directory.
//!
//! - [`ops`]: the vocabulary; [`generate`]: seeded generation;
//! - [`world`]: the shared services and each sequence's namespace;
//! - [`actor`]: the execution actor, standing in for Trainer, JobSet and the kubelet;
//! - [`history`]: every version of every object, from watches; [`check`]: the invariants;
//! - [`run`]: one sequence; [`shrink`]: delta debugging.
//!
//! Knobs (environment): `HOLDFAST_ADVERSARY_SEQUENCES` (per mode), `HOLDFAST_ADVERSARY_SEED`,
//! `HOLDFAST_ADVERSARY_CONCURRENCY`, `HOLDFAST_ADVERSARY_MAX_OPS`,
//! `HOLDFAST_ADVERSARY_SHRINK_RUNS` (0: no shrinking), `HOLDFAST_ADVERSARY_MAX_SHRINKS`,
//! `HOLDFAST_ADVERSARY_FOUND` (where found sequences are written),
//! `HOLDFAST_ADVERSARY_CORPUS` and `HOLDFAST_ADVERSARY_CORPUS_RUNS` (the replayed corpus, and
//! how often each is replayed), `HOLDFAST_ADVERSARY_DUMP` (a directory for failing runs'
//! whole histories), `HOLDFAST_ADVERSARY_VERBOSE` (print every sequence).

pub mod actor;
pub mod check;
pub mod generate;
pub mod history;
pub mod ops;
pub mod run;
pub mod shrink;
pub mod world;

use check::{Invariant, Violation};
use futures::StreamExt;
use holdfast_core::mode::Mode;
use ops::{CorpusEntry, Sequence};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Sequences per mode in CI.
pub const CI_SEQUENCES: u64 = 24;
/// The seed CI uses unless told otherwise.
pub const CI_SEED: u64 = 20_261_129;

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub sequences: u64,
    pub seed: u64,
    pub concurrency: usize,
    pub max_ops: usize,
    pub shrink_runs: usize,
    /// Signatures shrunk at most (each costs up to `shrink_runs` runs).
    pub max_shrinks: usize,
    pub found_dir: PathBuf,
}

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().and_then(|v| v.trim().parse().ok())
}

impl Config {
    /// From the environment; see the module docs. A long run
    /// (`HOLDFAST_ADVERSARY_SEQUENCES` set) without a seed gets a fresh one, printed.
    pub fn from_env() -> Config {
        let sequences = env_u64("HOLDFAST_ADVERSARY_SEQUENCES");
        let seed = env_u64("HOLDFAST_ADVERSARY_SEED").unwrap_or_else(|| {
            if sequences.is_some() {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(CI_SEED)
            } else {
                CI_SEED
            }
        });
        Config {
            sequences: sequences.unwrap_or(CI_SEQUENCES),
            seed,
            concurrency: env_u64("HOLDFAST_ADVERSARY_CONCURRENCY").unwrap_or(3) as usize,
            max_ops: env_u64("HOLDFAST_ADVERSARY_MAX_OPS").unwrap_or(30) as usize,
            shrink_runs: env_u64("HOLDFAST_ADVERSARY_SHRINK_RUNS").unwrap_or(30) as usize,
            max_shrinks: env_u64("HOLDFAST_ADVERSARY_MAX_SHRINKS").unwrap_or(3) as usize,
            found_dir: std::env::var_os("HOLDFAST_ADVERSARY_FOUND")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("..")
                        .join("target")
                        .join("adversary-found")
                }),
        }
    }
}

/// A sequence to shrink: its seed, itself, what it broke, and the step after which it was
/// first seen broken.
type Candidate = (u64, Sequence, Violation, Option<usize>);

/// One sequence that broke an invariant, shrunk.
#[derive(Clone, Debug)]
pub struct Found {
    pub seed: Option<u64>,
    pub entry: CorpusEntry,
    pub path: Option<PathBuf>,
}

/// What a campaign did.
#[derive(Debug, Default)]
pub struct Summary {
    pub sequences: u64,
    pub steps: u64,
    /// Sequences with at least one violation.
    pub failing: u64,
    /// Violations, by invariant.
    pub by_invariant: BTreeMap<String, u64>,
    pub found: Vec<Found>,
    /// Runs whose history was incomplete.
    pub incomplete: u64,
    pub took: Duration,
}

impl Summary {
    pub fn violations(&self) -> u64 {
        self.by_invariant.values().sum()
    }

    pub fn line(&self, what: &str) -> String {
        format!(
            "adversary: {} sequences, {} steps, {} violations ({what}; {} failing sequences{}{}; {:.0?})",
            self.sequences,
            self.steps,
            self.violations(),
            self.failing,
            if self.by_invariant.is_empty() {
                String::new()
            } else {
                format!(
                    "; {}",
                    self.by_invariant
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            if self.incomplete > 0 {
                format!("; {} with an incomplete history", self.incomplete)
            } else {
                String::new()
            },
            self.took
        )
    }
}

fn print_outcome(title: &str, seq: &Sequence, o: &run::Outcome) {
    let mut text = format!(
        "adversary: {title}: {} violation(s) in namespace {} ({} steps, {:.1?}):\n",
        o.violations.len(),
        o.namespace,
        o.steps,
        o.took
    );
    for v in &o.violations {
        text.push_str(&format!("  {v}\n"));
    }
    text.push_str("  steps:\n");
    for l in &o.log {
        text.push_str(&format!("    {l}\n"));
    }
    text.push_str(&format!(
        "  sequence: {}\n",
        serde_json::to_string(seq).unwrap_or_default()
    ));
    eprintln!("{text}");
}

/// Runs `config.sequences` generated sequences in `mode`, shrinks one sequence per broken
/// invariant, writes each shrunk one under `config.found_dir`, and prints the summary line.
pub async fn campaign(mode: Mode, config: &Config) -> Summary {
    let started = Instant::now();
    let world = world::world();
    let clients = run::Clients::new(world)
        .await
        .expect("the adversary's clients");
    eprintln!(
        "adversary: {mode} mode, {} sequences of up to {} ops, seed {}, {} at once",
        config.sequences, config.max_ops, config.seed, config.concurrency
    );
    let seeds: Vec<u64> = (0..config.sequences)
        .map(|i| generate::sequence_seed(config.seed, mode, i))
        .collect();
    let clients_ref = &clients;
    // Judged as they finish, so a long run reports as it goes.
    let mut results = std::pin::pin!(
        futures::stream::iter(seeds.into_iter().map(|seed| async move {
            let seq = generate::generate(mode, seed, config.max_ops);
            let r = run::run(world, clients_ref, &seq).await;
            (seed, seq, r)
        }))
        .buffer_unordered(config.concurrency.max(1))
    );

    let mut summary = Summary::default();
    // Per signature (the invariant, and the kind of op after which it first broke): the
    // shortest sequence that showed it.
    let mut first_of: BTreeMap<(Invariant, String), Candidate> = BTreeMap::new();
    while let Some((seed, seq, r)) = results.next().await {
        let o = match r {
            Ok(o) => o,
            Err(e) => panic!("adversary: sequence of seed {seed} could not run: {e:#}"),
        };
        summary.sequences += 1;
        summary.steps += o.steps as u64;
        eprintln!(
            "adversary: seed {seed}: {} ops, {:.1?}, {} violations ({}/{} done)",
            o.steps,
            o.took,
            o.violations.len(),
            summary.sequences,
            config.sequences
        );
        if !o.gaps.is_empty() {
            summary.incomplete += 1;
            eprintln!("adversary: seed {seed}: incomplete history: {:?}", o.gaps);
        }
        if o.violations.is_empty() {
            if std::env::var_os("HOLDFAST_ADVERSARY_VERBOSE").is_some() {
                print_outcome(&format!("seed {seed}"), &seq, &o);
            }
            continue;
        }
        summary.failing += 1;
        print_outcome(&format!("seed {seed}"), &seq, &o);
        for v in &o.violations {
            *summary.by_invariant.entry(v.invariant.id()).or_default() += 1;
            let step = o.first_steps.get(&v.invariant).copied();
            let after = step
                .and_then(|i| seq.ops.get(i))
                .map(|op| op.signature())
                .unwrap_or_else(|| "the end".into());
            let len = step.map(|i| i + 1).unwrap_or(seq.ops.len());
            let candidate = (seed, seq.clone(), v.clone(), step);
            first_of
                .entry((v.invariant, after))
                .and_modify(|c| {
                    let old = c.3.map(|i| i + 1).unwrap_or(c.1.ops.len());
                    if len < old {
                        *c = candidate.clone();
                    }
                })
                .or_insert(candidate);
        }
    }

    // One shrink per broken invariant.
    if config.shrink_runs > 0 {
        // Every invariant's first signature before any invariant's second.
        let mut order: Vec<((Invariant, String), Candidate)> = Vec::new();
        let mut rest = Vec::new();
        for (key, c) in first_of {
            if order.iter().any(|((i, _), _)| *i == key.0) {
                rest.push((key, c));
            } else {
                order.push((key, c));
            }
        }
        order.extend(rest);
        let mut shrunk_before: Vec<Vec<ops::Op>> = Vec::new();
        for ((inv, after), (seed, seq, v, first_step)) in order.into_iter().take(config.max_shrinks)
        {
            eprintln!("adversary: shrinking seed {seed} for [{inv}] (first seen after {after})");
            let budget = shrink::Budget {
                runs: config.shrink_runs,
                parallel: config.concurrency.max(1),
                until: Instant::now() + Duration::from_secs(180),
            };
            let s = shrink::shrink(world, &clients, &seq, &v, first_step, budget).await;
            if shrunk_before.contains(&s.sequence.ops) {
                eprintln!("adversary: seed {seed} for [{inv}] shrank to a sequence already found");
                continue;
            }
            shrunk_before.push(s.sequence.ops.clone());
            let entry = CorpusEntry {
                title: format!("{mode} mode: {inv}, first seen after {after}"),
                seed: Some(seed),
                invariant: inv.id(),
                violation: s.violation.message.clone(),
                sequence: s.sequence.clone(),
            };
            let path = write_found(&config.found_dir, &entry);
            eprintln!(
                "adversary: shrunk seed {seed} ({} ops) to {} ops in {} runs ({}) for [{inv}]: {}\n{}\n(written to {})",
                seq.ops.len(),
                s.sequence.ops.len(),
                s.runs,
                if s.confirmed {
                    "reproduced again"
                } else {
                    "did not reproduce on the confirming run"
                },
                s.violation.message,
                serde_json::to_string_pretty(&entry).unwrap_or_default(),
                path.as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "nowhere".into())
            );
            summary.found.push(Found {
                seed: Some(seed),
                entry,
                path,
            });
        }
    }
    summary.took = started.elapsed();
    eprintln!(
        "{}",
        summary.line(&format!("{mode} mode, seed {}", config.seed))
    );
    summary
}

fn write_found(dir: &Path, entry: &CorpusEntry) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join(format!(
        "{}-{}-{}.json",
        entry.sequence.mode,
        entry.invariant,
        entry.seed.unwrap_or_default()
    ));
    let text = serde_json::to_string_pretty(entry).ok()?;
    std::fs::write(&path, text + "\n").ok()?;
    Some(path)
}

/// The corpus directory: `tests/adversary-corpus`, or `HOLDFAST_ADVERSARY_CORPUS`.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("HOLDFAST_ADVERSARY_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("adversary-corpus"))
}

/// Every corpus file, by name.
pub fn load_corpus(dir: &Path) -> Vec<(String, CorpusEntry)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for p in paths {
        let text =
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        let entry: CorpusEntry = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a corpus entry: {e}", p.display()));
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((name, entry));
    }
    out
}

/// Replays every corpus sequence `runs` times (several of them are races); returns the
/// ones that broke an invariant again, with what they broke.
pub async fn replay_corpus(
    concurrency: usize,
    runs: usize,
) -> (usize, Vec<(String, Vec<Violation>)>) {
    let world = world::world();
    let clients = run::Clients::new(world)
        .await
        .expect("the adversary's clients");
    let corpus = load_corpus(&corpus_dir());
    let n = corpus.len();
    let corpus: Vec<(String, CorpusEntry)> = corpus
        .into_iter()
        .flat_map(|c| std::iter::repeat_n(c, runs.max(1)))
        .collect();
    let clients_ref = &clients;
    let results: Vec<(String, CorpusEntry, anyhow::Result<run::Outcome>)> =
        futures::stream::iter(corpus.into_iter().map(|(name, entry)| async move {
            let r = run::run(world, clients_ref, &entry.sequence).await;
            (name, entry, r)
        }))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut failing: Vec<(String, Vec<Violation>)> = Vec::new();
    for (name, entry, r) in results {
        let o = r.unwrap_or_else(|e| panic!("corpus {name} could not run: {e:#}"));
        if o.violations.is_empty() && std::env::var_os("HOLDFAST_ADVERSARY_VERBOSE").is_some() {
            print_outcome(&format!("corpus {name}"), &entry.sequence, &o);
        }
        if !o.violations.is_empty() && !failing.iter().any(|(f, _)| *f == name) {
            print_outcome(&format!("corpus {name}"), &entry.sequence, &o);
            failing.push((name, o.violations));
        }
    }
    failing.sort_by(|a, b| a.0.cmp(&b.0));
    (n, failing)
}
