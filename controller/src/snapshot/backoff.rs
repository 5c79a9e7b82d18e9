//! Per-TrainJob exponential backoff for failed reconciliations: the first retry after `min`,
//! doubling up to `max`, with ±20 % jitter so that jobs failing together (a runtime deleted
//! under a thousand of them) do not retry together. A success resets the TrainJob's count.

use super::trainjobs::JobRef;
use rand::RngExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub struct Backoffs {
    min: Duration,
    max: Duration,
    failures: Mutex<HashMap<JobRef, u32>>,
}

impl Backoffs {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoffs {
            min,
            max: max.max(min),
            failures: Mutex::default(),
        }
    }

    /// The delay before the next retry of `job`, counting this failure.
    pub fn next(&self, job: &JobRef) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(job.clone()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        let exponent = (n - 1).min(30);
        let base = self.min.saturating_mul(1u32 << exponent).min(self.max);
        let jitter = rand::rng().random_range(0.8..1.2);
        base.mul_f64(jitter).min(self.max)
    }

    /// Forgets `job`'s failures.
    pub fn reset(&self, job: &JobRef) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(job);
        }
    }

    /// The number of consecutive failures of `job`.
    #[cfg(test)]
    pub fn failures(&self, job: &JobRef) -> u32 {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(job).copied())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::trainjobs::trainjob_ref;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let b = Backoffs::new(Duration::from_secs(1), Duration::from_secs(10));
        let job = trainjob_ref("ns", "a");
        let delays: Vec<Duration> = (0..6).map(|_| b.next(&job)).collect();
        let within = |d: Duration, secs: f64| {
            d.as_secs_f64() >= secs * 0.8 - 1e-9 && d.as_secs_f64() <= (secs * 1.2).min(10.0) + 1e-9
        };
        assert!(within(delays[0], 1.0), "{delays:?}");
        assert!(within(delays[1], 2.0), "{delays:?}");
        assert!(within(delays[2], 4.0), "{delays:?}");
        assert!(within(delays[3], 8.0), "{delays:?}");
        assert!(delays[4] <= Duration::from_secs(10), "{delays:?}");
        assert_eq!(b.failures(&job), 6);
        b.reset(&job);
        assert_eq!(b.failures(&job), 0);
        assert!(within(b.next(&job), 1.0));
        // Another job has its own count.
        assert!(within(b.next(&trainjob_ref("ns", "b")), 1.0));
    }
}
