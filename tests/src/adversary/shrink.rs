//! Shrinking a failing sequence by delta debugging (Zeller's ddmin): sub-sequences are run
//! again, each in a fresh namespace, several at once; one that still breaks the same
//! invariant replaces the sequence. The system is concurrent, so "still breaks" means "broke
//! on this run"; the result is run once more to say how reliably it reproduces.

use super::check::{Invariant, Violation};
use super::ops::Sequence;
use super::run::{Clients, run};
use super::world::World;
use std::time::Instant;

/// How much shrinking may cost.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Runs at most.
    pub runs: usize,
    /// Candidates run at once.
    pub parallel: usize,
    /// Stop starting runs after this.
    pub until: Instant,
}

/// The smallest sequence found.
#[derive(Clone, Debug)]
pub struct Shrunk {
    pub sequence: Sequence,
    pub violation: Violation,
    /// Runs spent.
    pub runs: usize,
    /// Whether a last confirming run broke the invariant again.
    pub confirmed: bool,
}

async fn breaks(
    world: &World,
    clients: &Clients,
    seq: &Sequence,
    target: Invariant,
) -> Option<Violation> {
    match run(world, clients, seq).await {
        Ok(o) => o.violations.into_iter().find(|v| v.invariant == target),
        Err(e) => {
            eprintln!("adversary: a shrinking run failed to run: {e:#}");
            None
        }
    }
}

/// Shrinks `seq`, which broke `violation.invariant`; `first_step` is the step after which
/// the per-step check first saw a violation, if it did.
pub async fn shrink(
    world: &World,
    clients: &Clients,
    seq: &Sequence,
    violation: &Violation,
    first_step: Option<usize>,
    budget: Budget,
) -> Shrunk {
    let target = violation.invariant;
    let mut best = seq.clone();
    let mut best_violation = violation.clone();
    let mut runs = 0;
    let has_budget = |runs: usize| runs < budget.runs && Instant::now() < budget.until;

    // What came after the first violation is rarely needed.
    if let Some(i) = first_step
        && i + 1 < best.ops.len()
        && has_budget(runs)
    {
        let mut cut = best.clone();
        cut.ops.truncate(i + 1);
        runs += 1;
        if let Some(v) = breaks(world, clients, &cut, target).await {
            best = cut;
            best_violation = v;
        }
    }

    let mut n = 2usize;
    while best.ops.len() >= 2 && has_budget(runs) {
        let len = best.ops.len();
        let n_chunks = n.min(len);
        let chunk = len.div_ceil(n_chunks);
        let complements: Vec<Sequence> = (0..n_chunks)
            .map(|k| {
                let mut c = best.clone();
                c.ops = best
                    .ops
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i < k * chunk || *i >= (k + 1) * chunk)
                    .map(|(_, op)| op.clone())
                    .collect();
                c
            })
            .filter(|c| !c.ops.is_empty() && c.ops.len() < len)
            .collect();
        let mut found = None;
        for batch in complements.chunks(budget.parallel.max(1)) {
            if !has_budget(runs) {
                break;
            }
            runs += batch.len();
            let results =
                futures::future::join_all(batch.iter().map(|c| breaks(world, clients, c, target)))
                    .await;
            if let Some((c, v)) = batch
                .iter()
                .zip(results)
                .find_map(|(c, r)| r.map(|v| (c.clone(), v)))
            {
                found = Some((c, v));
                break;
            }
        }
        match found {
            Some((c, v)) => {
                best = c;
                best_violation = v;
                n = n.saturating_sub(1).max(2);
            }
            None if n_chunks >= len => break,
            None => n = (n * 2).min(len),
        }
    }
    let confirmed = breaks(world, clients, &best, target).await;
    runs += 1;
    Shrunk {
        sequence: best,
        violation: confirmed.clone().unwrap_or(best_violation),
        runs,
        confirmed: confirmed.is_some(),
    }
}
