//! The hold API's memory of recent TokenReview and SubjectAccessReview answers, so that a
//! caller's next call within a few seconds costs no review: only the apiserver's answers
//! are kept (accepted for [`ACCEPTED_TTL`], refused for [`REFUSED_TTL`]), never a failure to
//! ask. Tokens are keyed by their SHA-256, never kept. Pure: time is passed in.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How long an accepted token or an allowed call is remembered: the longest a revoked token
/// or a removed RoleBinding goes on working through the hold API.
pub const ACCEPTED_TTL: Duration = Duration::from_secs(10);
/// How long a refused token or call is remembered: bounds the reviews a caller retrying with
/// a bad token costs, and the wait after a RoleBinding is granted.
pub const REFUSED_TTL: Duration = Duration::from_secs(2);
/// Entries kept at most (per cache); the expired, then the soonest to expire, go first.
pub const CAPACITY: usize = 4096;

/// A token's cache key.
pub fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Answers kept until they expire, at most `capacity` of them.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: HashMap<K, (Instant, V)>,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            capacity,
        }
    }

    /// The answer for `key` unless it has expired by `now`.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((expires, v)) if *expires > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `key` for `ttl` from `now`; when full, drops the expired entries,
    /// then the one that expires soonest.
    pub fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if self.capacity == 0 || ttl.is_zero() {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (expires, _)| *expires > now);
            if self.entries.len() >= self.capacity {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (expires, _))| *expires)
                    .map(|(k, _)| k.clone());
                if let Some(k) = soonest {
                    self.entries.remove(&k);
                }
            }
        }
        self.entries.insert(key, (now + ttl, value));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_kept_until_its_ttl_and_not_a_moment_longer() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(8);
        c.insert("a", 1, Duration::from_secs(10), t0);
        assert_eq!(c.get(&"a", t0), Some(1));
        assert_eq!(c.get(&"a", t0 + Duration::from_millis(9_999)), Some(1));
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(10)), None);
        assert!(c.is_empty(), "an expired entry is dropped when read");
    }

    #[test]
    fn a_zero_ttl_or_capacity_keeps_nothing() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(8);
        c.insert("a", 1, Duration::ZERO, t0);
        assert_eq!(c.get(&"a", t0), None);
        let mut c = TtlCache::new(0);
        c.insert("a", 1, Duration::from_secs(1), t0);
        assert_eq!(c.get(&"a", t0), None);
    }

    #[test]
    fn a_full_cache_drops_the_expired_then_the_soonest_to_expire() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut c = TtlCache::new(3);
        c.insert("short", 1, s(1), t0);
        c.insert("mid", 2, s(5), t0);
        c.insert("long", 3, s(9), t0);
        // At t0+2 "short" has expired: it goes, the others stay.
        c.insert("new", 4, s(9), t0 + s(2));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&"mid", t0 + s(2)), Some(2));
        assert_eq!(c.get(&"long", t0 + s(2)), Some(3));
        // Nothing expired: the soonest to expire ("mid") goes.
        c.insert("newer", 5, s(9), t0 + s(2));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&"mid", t0 + s(2)), None);
        assert_eq!(c.get(&"newer", t0 + s(2)), Some(5));
        // Replacing a key never evicts another.
        c.insert("newer", 6, s(9), t0 + s(2));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&"newer", t0 + s(2)), Some(6));
    }

    #[test]
    fn tokens_are_keyed_by_their_digest() {
        assert_eq!(token_key("abc"), token_key("abc"));
        assert_ne!(token_key("abc"), token_key("abd"));
    }
}
