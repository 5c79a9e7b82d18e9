//! The Events written recently, by identity, to count repeats in their series.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pending::Key;

/// One written Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    pub name: String,
    /// Occurrences so far (`series.count`, or 1 without a series).
    pub count: i32,
    /// When it was last written.
    pub at: Instant,
}

/// At most `capacity` Events, each for `window` after its last write.
#[derive(Debug)]
pub(crate) struct SeriesCache {
    entries: HashMap<Arc<Key>, Written>,
    capacity: usize,
    window: Duration,
}

impl SeriesCache {
    pub fn new(capacity: usize, window: Duration) -> Self {
        SeriesCache {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            window,
        }
    }

    /// The Event written for `key` within the window, if any (an older one is forgotten).
    pub fn current(&mut self, key: &Key, now: Instant) -> Option<Written> {
        let w = self.entries.get(key)?;
        if now.saturating_duration_since(w.at) < self.window {
            return Some(w.clone());
        }
        self.entries.remove(key);
        None
    }

    /// Remembers a write; when full, the Event written longest ago is forgotten first.
    pub fn record(&mut self, key: Arc<Key>, written: Written) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, w)| w.at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(key, written);
    }

    pub fn forget(&mut self, key: &Key) {
        self.entries.remove(key);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::notice::{Notice, Regarding};

    fn key(name: &str) -> Arc<Key> {
        Arc::new(Key {
            regarding: Regarding {
                api_version: "v1".into(),
                kind: "Secret".into(),
                namespace: "ns".into(),
                name: name.into(),
                uid: String::new(),
            },
            notice: Notice::normal("R", "A", "n"),
        })
    }

    fn written(name: &str, at: Instant) -> Written {
        Written {
            name: name.into(),
            count: 1,
            at,
        }
    }

    #[test]
    fn an_event_is_continued_within_the_window_only() {
        let now = Instant::now();
        let mut c = SeriesCache::new(8, Duration::from_secs(360));
        c.record(key("a"), written("a.1", now));
        assert_eq!(
            c.current(&key("a"), now + Duration::from_secs(359))
                .map(|w| w.name),
            Some("a.1".into())
        );
        assert_eq!(c.current(&key("a"), now + Duration::from_secs(360)), None);
        assert_eq!(c.len(), 0, "expired entries are removed");
    }

    #[test]
    fn a_full_cache_forgets_the_oldest_write() {
        let now = Instant::now();
        let mut c = SeriesCache::new(2, Duration::from_secs(360));
        c.record(key("old"), written("old.1", now));
        c.record(key("mid"), written("mid.1", now + Duration::from_secs(1)));
        c.record(key("new"), written("new.1", now + Duration::from_secs(2)));
        assert_eq!(c.len(), 2);
        let at = now + Duration::from_secs(3);
        assert_eq!(c.current(&key("old"), at), None);
        assert!(c.current(&key("mid"), at).is_some());
        assert!(c.current(&key("new"), at).is_some());
    }
}
