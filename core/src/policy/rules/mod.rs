//! The validating webhook's rules the apiserver can judge itself, each in one place: its Rust
//! half, which the webhook runs, and its CEL row beside it; and the names ([`Rule`]) of every
//! rule, those that need a lookup (written in [`validate`](super::validate)) included.
//!
//! - [`rule`]: the names ([`Rule`]) and what a row is; [`cel`]: the CEL building blocks;
//! - one file per policy, each rule's Rust half followed by its row: `snapshots.rs`, `held.rs`
//!   (what TrainJobs and Workloads share), `trainjobs.rs`, `workloads.rs`;
//! - [`conditions`]: which requests either engine judges at all (the match conditions).
//!
//! Each file calls its Rust halves in the order its `rows()` lists them, and
//! [`validate`](super::validate) calls the files' in the order [`validations`] lists the rows
//! (the held kinds' shared rules first); it also answers the rules that need a lookup. The chart's `templates/admissionpolicies.yaml`
//! and `templates/_rule_conditions.tpl` are generated from the rows, and `templates/_cel.tpl`
//! from the building blocks the chart's hand-written CEL shares with them ([`chart`]; a test
//! diffs each, `HOLDFAST_BLESS=1` rewrites them), and a test evaluates the CEL with a CEL
//! interpreter over the Rust rules' case table, comparing the rule that refuses
//! (`parity_tests`). The apiserver oracle (`tests/tests/it/validation_engines.rs`) stays the
//! final word.
//!
//! A rule changed (what it refuses, whom it exempts, what it says) is changed in its file, in
//! both halves; `cargo test -p holdfast-core
//! policy::rules` says within seconds whether the two still agree, rule by rule.
//!
//! Placeholders in the CEL text are the chart's (values it renders from `identities`):
//! `{{ $controllers }}`, `{{ $kueueUsers }}`, `{{ $deletersProper }}` (CEL lists),
//! `{{ $ctlDesc }}`, `{{ $kueueDesc }}`, `{{ $creatorsDesc }}`, `{{ $deletersDesc }}` (words
//! for messages), `{{ $unheldInPlainMode }}` ([`unheld_in_plain_mode`] in plain mode, nothing
//! in kueue mode), and in the match conditions `{{ $creators }}`, `{{ $deleters }}`,
//! `{{ $kueue }}`.

pub mod cel;
pub mod chart;
pub mod conditions;
pub(crate) mod held;
mod refusal;
pub mod rule;
pub(crate) mod snapshots;
pub(crate) mod trainjobs;
pub(crate) mod workloads;

#[cfg(test)]
mod parity_tests;

pub use cel::unheld_in_plain_mode;
pub(crate) use refusal::{malformed, malformed_update};
pub use rule::{Modes, Policy, Rule, Validation, Variable};

use cel::USER;

/// The variables a policy's rules read, in order: the identities, then the policy's own.
pub fn variables(policy: Policy) -> Vec<Variable> {
    let identity = |name, list: &str| Variable {
        name,
        note: "",
        expression: format!("{USER} in {{{{ ${list} }}}}"),
    };
    let mut out = vec![identity("controller", "controllers")];
    if policy != Policy::Snapshots {
        out.push(identity("kueue", "kueueUsers"));
    }
    out.push(identity("deleter", "deletersProper"));
    match policy {
        Policy::Snapshots => out.extend(snapshots::variables()),
        Policy::TrainJobs => {
            out.extend(held::variables(policy));
            out.extend(trainjobs::variables());
        }
        Policy::Workloads => {
            out.extend(held::variables(policy));
            out.extend(workloads::variables());
        }
    }
    out
}

/// Every validating rule with a CEL half, in the order the webhook checks them.
pub fn validations() -> Vec<Validation> {
    let mut out = snapshots::rows();
    for policy in [Policy::TrainJobs, Policy::Workloads] {
        out.push(held::annotation_added_row(policy));
        out.push(held::annotation_changed_row(policy));
        if policy == Policy::TrainJobs {
            // kueue mode: checked before the finalizer, as the webhook does.
            out.push(trainjobs::kueue_plain_hold_unsuspend_row());
        }
        out.push(held::hold_finalizer_row(policy));
    }
    out.extend(trainjobs::rows());
    out.extend(workloads::rows());
    out
}
