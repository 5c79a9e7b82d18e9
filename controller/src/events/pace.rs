//! The pace of Event writes: a token bucket.

use std::time::{Duration, Instant};

/// At most `per_second` writes a second on average, `burst` at once.
#[derive(Debug)]
pub(crate) struct Pace {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Pace {
    /// A full bucket at `now`. Zero rates are taken as one.
    pub fn new(per_second: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Pace {
            per_second: f64::from(per_second.max(1)),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one write: how long to wait before sending it (zero if a token is there).
    pub fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_second)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_then_writes_are_spaced_by_the_rate() {
        let start = Instant::now();
        let mut p = Pace::new(10, 3, start);
        for _ in 0..3 {
            assert_eq!(p.take(start), Duration::ZERO);
        }
        let wait = p.take(start);
        assert!(
            (wait.as_secs_f64() - 0.1).abs() < 1e-9,
            "the fourth waits one period: {wait:?}"
        );
        let wait = p.take(start);
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
    }

    #[test]
    fn the_bucket_refills_with_time_up_to_the_burst() {
        let start = Instant::now();
        let mut p = Pace::new(10, 2, start);
        p.take(start);
        p.take(start);
        let later = start + Duration::from_secs(60);
        assert_eq!(p.take(later), Duration::ZERO);
        assert_eq!(p.take(later), Duration::ZERO);
        assert!(
            p.take(later) > Duration::ZERO,
            "no more than the burst saved up"
        );
    }
}
