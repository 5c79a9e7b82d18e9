//! What the benchmarks share.

use std::time::Duration;

/// The `p`th percentile (0–100) of `samples`, nearest rank; zero when there are none.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// One measured operation's latencies, by name.
pub struct Series {
    pub name: &'static str,
    pub samples: Vec<Duration>,
}

impl Series {
    pub fn new(name: &'static str) -> Self {
        Series {
            name,
            samples: Vec::new(),
        }
    }

    /// The `p`th percentile of the samples ([`percentile`]).
    pub fn p(&self, p: f64) -> Duration {
        percentile(&self.samples, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_of_the_sorted_samples() {
        let ms = |v: u64| Duration::from_millis(v);
        let samples: Vec<Duration> = [5, 1, 4, 2, 3].map(ms).to_vec();
        assert_eq!(percentile(&samples, 0.0), ms(1));
        assert_eq!(percentile(&samples, 50.0), ms(3));
        assert_eq!(percentile(&samples, 100.0), ms(5));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
