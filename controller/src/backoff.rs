//! Retry delays after failures: the first retry after `min`, doubling per consecutive failure
//! up to `max` (backon's exponential schedule), with ±20 % jitter unless asked otherwise, so
//! that objects failing together (a runtime deleted under a thousand TrainJobs) do not retry
//! together. A success starts the schedule again.
//!
//! [`Backoff`] is one schedule (the certificate loop); [`Backoffs`] keeps one per object, for a
//! kube-runtime `Controller`'s error policy. An object's schedule is forgotten when it
//! succeeds ([`Backoffs::succeeded`]) or is deleted ([`Backoffs::forget`]): a failed object is
//! always requeued by the error policy, so when it is deleted the requeue finds it gone and the
//! Controller yields `ObjectNotFound` for it, which is where its subsystem forgets it. The map
//! so holds only objects that exist and whose last reconcile failed.
//!
//! backon gives the schedule (an iterator of delays); what it does not give is a keyed map, nor
//! a symmetric jitter (its own adds up to 100 %), so both are here.
//!
//! Not here: the pauses inside one hold call (`hold::executor`: a few milliseconds, doubling to
//! 0.5–1 s between retries of a read or write within the call). They are not retries of an
//! object across reconciles but waits inside a call that must end by its deadline, so each is
//! bounded by the call's remaining time (`CallRequests::pause`) rather than by a schedule.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use rand::RngExt;

/// How a schedule runs: from `min`, doubling, up to `max`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Policy {
    min: Duration,
    max: Duration,
    jitter: bool,
}

impl Policy {
    fn schedule(&self) -> <ExponentialBuilder as BackoffBuilder>::Backoff {
        ExponentialBuilder::new()
            .with_min_delay(self.min)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
            .build()
    }

    /// `delay`, jittered by ±20 % when asked, never above `max`.
    fn jittered(&self, delay: Duration) -> Duration {
        if self.jitter {
            delay
                .mul_f64(rand::rng().random_range(0.8..1.2))
                .min(self.max)
        } else {
            delay
        }
    }
}

/// One retry schedule.
pub struct Backoff {
    policy: Policy,
    schedule: <ExponentialBuilder as BackoffBuilder>::Backoff,
    failures: u32,
}

impl Backoff {
    /// From `min`, doubling per failure up to `max` (at least `min`), jittered by ±20 %.
    pub fn new(min: Duration, max: Duration) -> Self {
        let policy = Policy {
            min,
            max: max.max(min),
            jitter: true,
        };
        Backoff {
            policy,
            schedule: policy.schedule(),
            failures: 0,
        }
    }

    /// The same schedule, without jitter.
    pub fn without_jitter(mut self) -> Self {
        self.policy.jitter = false;
        self
    }

    /// The delay before the next retry, counting this failure.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        // Never ends: the schedule has no maximum number of retries.
        let delay = self.schedule.next().unwrap_or(self.policy.max);
        self.policy.jittered(delay)
    }

    /// Starts the schedule again from `min`.
    pub fn succeeded(&mut self) {
        self.schedule = self.policy.schedule();
        self.failures = 0;
    }

    /// The consecutive failures counted since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// One retry schedule per object `K`.
pub struct Backoffs<K> {
    min: Duration,
    max: Duration,
    failing: Mutex<HashMap<K, Backoff>>,
}

impl<K: Hash + Eq + Clone> Backoffs<K> {
    /// Each object's schedule: from `min`, doubling per failure up to `max`, jittered ±20 %.
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoffs {
            min,
            max,
            failing: Mutex::default(),
        }
    }

    /// The delay before the next retry of `key`, counting this failure.
    pub fn failed(&self, key: &K) -> Duration {
        match self.failing.lock() {
            Ok(mut failing) => failing
                .entry(key.clone())
                .or_insert_with(|| Backoff::new(self.min, self.max))
                .failed(),
            // A poisoned map: retry as after a first failure.
            Err(_) => Backoff::new(self.min, self.max).failed(),
        }
    }

    /// `key` succeeded: its next failure is retried after `min` again.
    pub fn succeeded(&self, key: &K) {
        self.forget(key);
    }

    /// `key` is gone: drop its schedule.
    pub fn forget(&self, key: &K) {
        if let Ok(mut failing) = self.failing.lock() {
            failing.remove(key);
        }
    }

    /// The consecutive failures of `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.failing
            .lock()
            .ok()
            .and_then(|f| f.get(key).map(Backoff::failures))
            .unwrap_or(0)
    }

    /// How many objects have a schedule (have failed since their last success).
    pub fn len(&self) -> usize {
        self.failing.lock().map(|f| f.len()).unwrap_or(0)
    }

    /// Whether no object has a schedule.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn within(d: Duration, base: Duration, max: Duration) -> bool {
        let (d, base) = (d.as_secs_f64(), base.as_secs_f64());
        d >= base * 0.8 - 1e-6 && d <= (base * 1.2).min(max.as_secs_f64()) + 1e-6
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let mut b = Backoff::new(secs(1), secs(10)).without_jitter();
        let delays: Vec<Duration> = (0..7).map(|_| b.failed()).collect();
        assert_eq!(
            delays,
            [
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(10),
                secs(10),
                secs(10)
            ]
        );
        assert_eq!(b.failures(), 7);
    }

    #[test]
    fn sub_second_delays_double_too() {
        let mut b = Backoff::new(Duration::from_millis(500), secs(300)).without_jitter();
        let delays: Vec<Duration> = (0..4).map(|_| b.failed()).collect();
        assert_eq!(
            delays,
            [Duration::from_millis(500), secs(1), secs(2), secs(4)]
        );
    }

    #[test]
    fn jitter_stays_within_a_fifth_and_under_the_cap() {
        for _ in 0..50 {
            let mut b = Backoff::new(secs(1), secs(10));
            for base in [1, 2, 4, 8, 10, 10] {
                let d = b.failed();
                assert!(within(d, secs(base), secs(10)), "{d:?} for {base}s");
            }
        }
    }

    #[test]
    fn a_cap_below_the_minimum_is_the_minimum() {
        let mut b = Backoff::new(secs(5), secs(1)).without_jitter();
        assert_eq!(b.failed(), secs(5));
        assert_eq!(b.failed(), secs(5));
    }

    #[test]
    fn success_starts_again_from_the_minimum() {
        let mut b = Backoff::new(secs(1), secs(10)).without_jitter();
        b.failed();
        b.failed();
        b.failed();
        b.succeeded();
        assert_eq!(b.failures(), 0);
        assert_eq!(b.failed(), secs(1));
    }

    #[test]
    fn each_object_has_its_own_schedule() {
        let b = Backoffs::new(secs(1), secs(10));
        for base in [1, 2, 4, 8, 10, 10] {
            let d = b.failed(&"a");
            assert!(within(d, secs(base), secs(10)), "{d:?} for {base}s");
        }
        assert_eq!(b.failures(&"a"), 6);
        assert!(within(b.failed(&"b"), secs(1), secs(10)));
        assert_eq!(b.failures(&"b"), 1);
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn success_resets_and_forgets_the_object() {
        let b = Backoffs::new(secs(1), secs(10));
        b.failed(&"a");
        b.failed(&"a");
        b.succeeded(&"a");
        assert_eq!(b.failures(&"a"), 0);
        assert!(b.is_empty());
        assert!(within(b.failed(&"a"), secs(1), secs(10)));
    }

    #[test]
    fn deleted_objects_are_forgotten() {
        let b = Backoffs::new(secs(1), secs(10));
        for key in 0..100 {
            b.failed(&key);
        }
        assert_eq!(b.len(), 100);
        for key in 0..100 {
            b.forget(&key);
        }
        assert!(b.is_empty());
        // Forgetting an object never seen is harmless.
        b.forget(&7);
        assert!(b.is_empty());
    }
}
