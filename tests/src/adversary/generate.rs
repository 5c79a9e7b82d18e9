//! Seeded generation of sequences: the same mode, seed and length bound give the same
//! sequence (`rand`'s `SmallRng`, seeded explicitly; reproducible with the locked `rand`).

use super::ops::*;
use holdfast_core::mode::Mode;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// The seed of sequence `index` of a run seeded `base` in `mode`: each sequence can be
/// regenerated on its own from the seed the run prints.
pub fn sequence_seed(base: u64, mode: Mode, index: u64) -> u64 {
    // splitmix64 of the three, so neighbouring indices give unrelated seeds.
    let mut z = base
        .wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(match mode {
            Mode::Plain => 0x1111,
            Mode::Kueue => 0x2222,
        });
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `holdfast.dev/` annotations an editor may try to write.
pub const HOLDFAST_ANNOTATIONS: [&str; 8] = [
    "holdfast.dev/hold-instance",
    "holdfast.dev/hold-reason",
    "holdfast.dev/hold-placed-at",
    "holdfast.dev/hold-found",
    "holdfast.dev/hold-transfer-to",
    "holdfast.dev/opened",
    "holdfast.dev/attempt",
    "holdfast.dev/admitted-runtime-resource-version",
];

/// Finalizers an editor may add or remove.
pub const FINALIZERS: [&str; 3] = [
    "holdfast.dev/hold",
    "example.com/keep",
    "kueue.x-k8s.io/resource-in-use",
];

struct Gen {
    rng: SmallRng,
    mode: Mode,
    /// The newest hold instance dispatch has issued.
    current: u64,
}

/// Picks an index by weight.
fn pick(rng: &mut SmallRng, weights: &[u32]) -> usize {
    let total: u32 = weights.iter().sum();
    let mut x = rng.random_range(0..total.max(1));
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len().saturating_sub(1)
}

impl Gen {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn actor(&mut self) -> Actor {
        if self.chance(0.3) {
            Actor::ServiceAccount
        } else {
            Actor::User
        }
    }

    fn how(&mut self) -> PatchKind {
        const KINDS: [PatchKind; 6] = [
            PatchKind::Merge,
            PatchKind::Json,
            PatchKind::Strategic,
            PatchKind::Apply,
            PatchKind::ApplyForce,
            PatchKind::Replace,
        ];
        KINDS[pick(&mut self.rng, &[30, 20, 4, 14, 16, 16])]
    }

    /// How a pod is edited: apply is left out (it cannot remove a field another manager
    /// owns, so it would send nothing).
    fn pod_how(&mut self) -> PatchKind {
        const KINDS: [PatchKind; 4] = [
            PatchKind::Merge,
            PatchKind::Json,
            PatchKind::Strategic,
            PatchKind::Replace,
        ];
        KINDS[pick(&mut self.rng, &[35, 25, 20, 20])]
    }

    fn pod_choice(&mut self) -> PodChoice {
        PodChoice {
            previous: self.chance(0.25),
            index: self.rng.random_range(0..2),
        }
    }

    fn queue(&mut self) -> QueueChoice {
        const Q: [QueueChoice; 5] = [
            QueueChoice::Remove,
            QueueChoice::Main,
            QueueChoice::Other,
            QueueChoice::Nowhere,
            QueueChoice::Empty,
        ];
        Q[pick(&mut self.rng, &[45, 15, 20, 8, 12])]
    }

    fn owner(&mut self) -> OwnerChoice {
        const O: [OwnerChoice; 4] = [
            OwnerChoice::Clear,
            OwnerChoice::UserConfigMap,
            OwnerChoice::Dangling,
            OwnerChoice::TrainJob,
        ];
        O[pick(&mut self.rng, &[30, 30, 15, 25])]
    }

    fn annotation(&mut self) -> (String, Option<String>) {
        let key = HOLDFAST_ANNOTATIONS[self.rng.random_range(0..HOLDFAST_ANNOTATIONS.len())];
        let value = if self.chance(0.4) {
            None
        } else {
            Some(match key {
                "holdfast.dev/hold-instance" | "holdfast.dev/attempt" => {
                    self.rng.random_range(0..=self.current + 2).to_string()
                }
                "holdfast.dev/opened" => "true".to_owned(),
                _ => "forged".to_owned(),
            })
        };
        (key.to_owned(), value)
    }

    fn finalizer(&mut self) -> (String, bool) {
        let name = FINALIZERS[pick(&mut self.rng, &[45, 45, 10])];
        (name.to_owned(), self.chance(0.5))
    }

    fn timing(&mut self) -> CallTiming {
        let deadline_ms = match pick(&mut self.rng, &[72, 14, 14]) {
            0 => 10_000,
            1 => self.rng.random_range(1..=80),
            _ => -1_000,
        };
        let delay_ms = if self.chance(0.2) {
            self.rng.random_range(50..=1500)
        } else {
            0
        };
        let background = if delay_ms > 0 {
            self.chance(0.7)
        } else {
            self.chance(0.08)
        };
        CallTiming {
            deadline_ms,
            delay_ms,
            background,
        }
    }

    fn normal_timing() -> CallTiming {
        CallTiming {
            deadline_ms: 10_000,
            delay_ms: 0,
            background: false,
        }
    }

    fn settle(&mut self) -> Op {
        const MS: [u32; 5] = [200, 500, 1000, 2000, 3500];
        Op::Settle {
            ms: MS[pick(&mut self.rng, &[25, 25, 25, 15, 10])],
        }
    }

    fn hold_instance(&mut self) -> u64 {
        match pick(&mut self.rng, &[55, 20, 12, 13]) {
            0 => {
                self.current += 1;
                self.current
            }
            1 => self.current.max(1),
            2 => self.current.saturating_sub(1),
            _ => self.rng.random_range(0..=self.current),
        }
    }

    fn release_instance(&mut self) -> u64 {
        match pick(&mut self.rng, &[62, 13, 10, 15]) {
            0 => self.current,
            1 => self.current.saturating_sub(1),
            2 => self.current + 1,
            _ => self.rng.random_range(0..=self.current),
        }
    }

    fn create(&mut self) -> Op {
        let managed = self.chance(0.6);
        let queue = match self.mode {
            Mode::Plain => None,
            Mode::Kueue => match pick(&mut self.rng, &[50, 25, 10, 5, 10]) {
                0 => Some(QueueChoice::Main),
                1 => None,
                2 => Some(QueueChoice::Other),
                3 => Some(QueueChoice::Nowhere),
                _ => Some(QueueChoice::Empty),
            },
        };
        let suspend = match pick(&mut self.rng, &[40, 40, 20]) {
            0 => None,
            1 => Some(false),
            _ => Some(true),
        };
        Op::CreateTrainJob {
            by: self.actor(),
            managed,
            queue,
            suspend,
        }
    }

    fn edit_trainjob(&mut self) -> Op {
        let kueue = self.mode == Mode::Kueue;
        let field = match pick(
            &mut self.rng,
            &[
                24,
                if kueue { 8 } else { 16 },
                14,
                4,
                3,
                if kueue { 18 } else { 0 },
                8,
                5,
                4,
                3,
                3,
            ],
        ) {
            0 => TrainJobField::Suspend(false),
            1 => TrainJobField::Suspend(true),
            2 => TrainJobField::Managed(None),
            3 => TrainJobField::Managed(Some("false".into())),
            4 => TrainJobField::Managed(Some("true".into())),
            5 => TrainJobField::Queue(self.queue()),
            6 => {
                let (key, value) = self.annotation();
                TrainJobField::Annotation { key, value }
            }
            7 => {
                let (name, add) = self.finalizer();
                TrainJobField::Finalizer { name, add }
            }
            8 => TrainJobField::OwnerRef(match self.owner() {
                OwnerChoice::TrainJob => OwnerChoice::Clear,
                o => o,
            }),
            9 => TrainJobField::RuntimeRef(match pick(&mut self.rng, &[30, 50, 20]) {
                0 => RuntimeChoice::Main,
                1 => RuntimeChoice::Second,
                _ => RuntimeChoice::Missing,
            }),
            _ => TrainJobField::Unrelated(format!("t{}", self.rng.random_range(0..5))),
        };
        Op::EditTrainJob {
            by: self.actor(),
            how: self.how(),
            field,
        }
    }

    fn edit_workload(&mut self) -> Op {
        let field = match pick(&mut self.rng, &[34, 14, 16, 12, 10, 8, 8]) {
            0 => WorkloadField::Active(true),
            1 => WorkloadField::Active(false),
            2 => WorkloadField::QueueName(self.queue()),
            3 => {
                let (key, value) = self.annotation();
                WorkloadField::Annotation { key, value }
            }
            4 => {
                let (name, add) = self.finalizer();
                WorkloadField::Finalizer { name, add }
            }
            5 => WorkloadField::OwnerRef(self.owner()),
            _ => WorkloadField::JobUidLabel(if self.chance(0.6) {
                None
            } else {
                Some("4a6f6e65-0000-4000-8000-00000000dead".into())
            }),
        };
        Op::EditWorkload {
            which: self.rng.random_range(0..2),
            how: self.how(),
            field,
        }
    }

    fn edit_snapshot(&mut self) -> Op {
        let field = match pick(&mut self.rng, &[25, 20, 20, 25, 10]) {
            0 => ConfigMapField::Data("kind: Forged\n".into()),
            1 => ConfigMapField::Label {
                key: "holdfast.dev/runtime-snapshot".into(),
                value: if self.chance(0.5) {
                    None
                } else {
                    Some("false".into())
                },
            },
            2 => {
                let (key, value) = self.annotation();
                ConfigMapField::Annotation { key, value }
            }
            3 => ConfigMapField::OwnerRef(self.owner()),
            _ => {
                let (name, add) = self.finalizer();
                ConfigMapField::Finalizer { name, add }
            }
        };
        Op::EditSnapshot {
            by: self.actor(),
            how: self.how(),
            field,
        }
    }

    fn op(&mut self) -> Op {
        let kueue = self.mode == Mode::Kueue;
        let k = |w: u32| if kueue { w } else { 0 };
        match pick(
            &mut self.rng,
            &[
                12,   // 0 settle
                12,   // 1 hold
                9,    // 2 release
                5,    // 3 open
                3,    // 4 status
                28,   // 5 edit trainjob
                3,    // 6 replace dropping holdfast annotations
                2,    // 7 delete trainjob
                1,    // 8 deletecollection trainjobs
                3,    // 9 create trainjob
                k(9), // 10 edit workload
                k(2), // 11 delete workload
                k(2), // 12 decoy workload
                1,    // 13 create snapshot
                3,    // 14 edit snapshot
                1,    // 15 delete snapshot
                1,    // 16 deletecollection snapshots
                2,    // 17 edit runtime
                k(2), // 18 Kueue deactivates for its own reason
                4,    // 19 force-delete a pod of an execution
                2,    // 20 relabel such a pod
                2,    // 21 re-own such a pod
                1,    // 22 a decoy pod
                k(2), // 23 the batch-admin swaps LocalQueue main
                2,    // 24 a second caller releases or replaces the hold in force
            ],
        ) {
            0 => self.settle(),
            1 => Op::Hold {
                instance: self.hold_instance(),
                timing: self.timing(),
            },
            2 => Op::Release {
                instance: self.release_instance(),
                timing: self.timing(),
            },
            3 => Op::Open {
                timing: self.timing(),
            },
            4 => Op::Status,
            5 => self.edit_trainjob(),
            6 => Op::ReplaceTrainJobDroppingHoldfast { by: self.actor() },
            7 => Op::DeleteTrainJob {
                by: self.actor(),
                propagation: [
                    Propagation::Background,
                    Propagation::Foreground,
                    Propagation::Orphan,
                ][self.rng.random_range(0..3)],
            },
            8 => Op::DeleteAllTrainJobs { by: self.actor() },
            9 => self.create(),
            10 => self.edit_workload(),
            11 => Op::DeleteWorkload {
                which: self.rng.random_range(0..2),
            },
            12 => Op::CreateDecoyWorkload {
                owner_ref: self.chance(0.5),
                active: self.chance(0.7),
            },
            13 => Op::CreateSnapshot {
                by: self.actor(),
                owner_ref: self.chance(0.6),
            },
            14 => self.edit_snapshot(),
            15 => Op::DeleteSnapshot { by: self.actor() },
            16 => Op::DeleteAllSnapshots { by: self.actor() },
            17 => Op::EditRuntime {
                cpu: ["2", "500m", "1"][self.rng.random_range(0..3)].to_owned(),
            },
            18 => Op::KueueDeactivate {
                reason: ["RequeuingLimitExceeded", "MaximumExecutionTimeExceeded"]
                    [self.rng.random_range(0..2)]
                .to_owned(),
            },
            19 => Op::ForceDeletePod {
                by: self.actor(),
                pod: self.pod_choice(),
            },
            20 => Op::RelabelPod {
                by: self.actor(),
                how: self.pod_how(),
                pod: self.pod_choice(),
            },
            21 => Op::ReownPod {
                by: self.actor(),
                how: self.pod_how(),
                pod: self.pod_choice(),
            },
            22 => Op::CreateDecoyPod {
                by: self.actor(),
                bound: self.chance(0.5),
            },
            23 => Op::SwapLocalQueue {
                gated: self.chance(0.3),
            },
            _ => Op::SecondCaller {
                replace: self.chance(0.5),
            },
        }
    }
}

/// The sequence of `seed` in `mode`: the TrainJob's creation, often an early Open so that
/// holds meet a running job, then up to `max_ops` operations drawn by weight.
pub fn generate(mode: Mode, seed: u64, max_ops: usize) -> Sequence {
    let mut g = Gen {
        rng: SmallRng::seed_from_u64(seed),
        mode,
        current: 0,
    };
    let linger_ms = [300, 1200, 2500, 4000][g.rng.random_range(0..4)];
    let mut ops = vec![Op::CreateTrainJob {
        by: if g.chance(0.85) {
            Actor::User
        } else {
            Actor::ServiceAccount
        },
        managed: g.chance(0.9),
        queue: (mode == Mode::Kueue).then_some(if g.chance(0.92) {
            QueueChoice::Main
        } else {
            QueueChoice::Other
        }),
        suspend: None,
    }];
    if g.chance(0.6) {
        ops.push(Op::Settle { ms: 500 });
        ops.push(Op::Open {
            timing: Gen::normal_timing(),
        });
        ops.push(Op::Settle {
            ms: [500, 1500, 3000][g.rng.random_range(0..3)],
        });
    }
    let n = g.rng.random_range(max_ops.min(6)..=max_ops.max(1));
    while ops.len() < n {
        // Dispatch's ordinary cycle, now and then: hold a new instance, wait, release it.
        if g.chance(0.07) {
            g.current += 1;
            let instance = g.current;
            ops.push(Op::Hold {
                instance,
                timing: Gen::normal_timing(),
            });
            ops.push(Op::Settle {
                ms: [1500, 3000, 5000][g.rng.random_range(0..3)],
            });
            ops.push(Op::Release {
                instance,
                timing: Gen::normal_timing(),
            });
            continue;
        }
        let op = g.op();
        // Dispatch retries a Release refused for pods that remain: later, the same call.
        let retry = match &op {
            Op::Release { instance, .. } if g.chance(0.35) => Some(*instance),
            _ => None,
        };
        ops.push(op);
        if let Some(instance) = retry {
            ops.push(Op::Settle {
                ms: [1000, 2500, 4500][g.rng.random_range(0..3)],
            });
            ops.push(Op::Release {
                instance,
                timing: Gen::normal_timing(),
            });
        }
    }
    Sequence {
        mode,
        linger_ms,
        ops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        for mode in [Mode::Plain, Mode::Kueue] {
            for i in 0..20 {
                let seed = sequence_seed(42, mode, i);
                assert_eq!(generate(mode, seed, 30), generate(mode, seed, 30));
            }
        }
        assert_ne!(
            generate(Mode::Kueue, 1, 30),
            generate(Mode::Kueue, 2, 30),
            "different seeds differ"
        );
    }

    #[test]
    fn sequences_round_trip_through_json() {
        let s = generate(Mode::Kueue, 7, 40);
        let text = serde_json::to_string(&s).expect("json");
        let back: Sequence = serde_json::from_str(&text).expect("parse");
        assert_eq!(s, back);
    }

    #[test]
    fn both_modes_draw_the_pod_attacks() {
        for mode in [Mode::Plain, Mode::Kueue] {
            let ops: Vec<Op> = (0..60)
                .flat_map(|i| generate(mode, sequence_seed(5, mode, i), 30).ops)
                .collect();
            for (what, found) in [
                (
                    "force-delete",
                    ops.iter().any(|o| matches!(o, Op::ForceDeletePod { .. })),
                ),
                (
                    "relabel",
                    ops.iter().any(|o| matches!(o, Op::RelabelPod { .. })),
                ),
                (
                    "re-own",
                    ops.iter().any(|o| matches!(o, Op::ReownPod { .. })),
                ),
                (
                    "decoy pod",
                    ops.iter().any(|o| matches!(o, Op::CreateDecoyPod { .. })),
                ),
            ] {
                assert!(found, "{mode}: no {what} in 60 sequences");
            }
        }
    }

    #[test]
    fn kueue_sequences_draw_the_local_queue_swap_both_ways() {
        let ops: Vec<Op> = (0..60)
            .flat_map(|i| generate(Mode::Kueue, sequence_seed(5, Mode::Kueue, i), 30).ops)
            .collect();
        for gated in [false, true] {
            assert!(
                ops.contains(&Op::SwapLocalQueue { gated }),
                "no swap to gated={gated} in 60 sequences"
            );
        }
    }

    #[test]
    fn sequences_draw_a_second_callers_release_and_replacement_in_both_modes() {
        for mode in [Mode::Plain, Mode::Kueue] {
            let ops: Vec<Op> = (0..60)
                .flat_map(|i| generate(mode, sequence_seed(7, mode, i), 30).ops)
                .collect();
            for replace in [false, true] {
                assert!(
                    ops.contains(&Op::SecondCaller { replace }),
                    "{mode}: no second caller with replace={replace} in 60 sequences"
                );
            }
        }
    }

    #[test]
    fn plain_sequences_have_no_kueue_operations() {
        for i in 0..50 {
            let s = generate(Mode::Plain, sequence_seed(3, Mode::Plain, i), 40);
            for op in &s.ops {
                assert!(
                    !matches!(
                        op,
                        Op::EditWorkload { .. }
                            | Op::DeleteWorkload { .. }
                            | Op::CreateDecoyWorkload { .. }
                            | Op::KueueDeactivate { .. }
                            | Op::SwapLocalQueue { .. }
                            | Op::EditTrainJob {
                                field: TrainJobField::Queue(_),
                                ..
                            }
                    ),
                    "{op:?}"
                );
            }
        }
    }
}
