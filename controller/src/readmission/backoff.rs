//! Per-TrainJob exponential backoff for failed reconciles: the first retry after `min`,
//! doubling up to `max`, with ±20 % jitter. A success resets the TrainJob's count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use rand::RngExt;

pub(crate) struct Backoffs {
    min: Duration,
    max: Duration,
    failures: Mutex<HashMap<ObjectRef<DynamicObject>, u32>>,
}

impl Backoffs {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoffs {
            min,
            max: max.max(min),
            failures: Mutex::default(),
        }
    }

    /// The delay before the next retry of `key`, counting this failure.
    pub(crate) fn next(&self, key: &ObjectRef<DynamicObject>) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        let base = self
            .min
            .saturating_mul(1u32 << (n - 1).min(30))
            .min(self.max);
        base.mul_f64(rand::rng().random_range(0.8..1.2))
            .min(self.max)
    }

    /// Forgets `key`'s failures.
    pub(crate) fn reset(&self, key: &ObjectRef<DynamicObject>) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::resources;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let b = Backoffs::new(Duration::from_secs(1), Duration::from_secs(5));
        let key = ObjectRef::new_with("job", resources::trainjob()).within("ns");
        let d: Vec<f64> = (0..5).map(|_| b.next(&key).as_secs_f64()).collect();
        assert!((0.8..=1.2).contains(&d[0]), "{d:?}");
        assert!((1.6..=2.4).contains(&d[1]), "{d:?}");
        assert!(d[4] <= 5.0, "{d:?}");
        b.reset(&key);
        assert!(b.next(&key).as_secs_f64() <= 1.2);
    }
}
