//! What a TLS server spends on each client connection, and the bounds on it.
//!
//! - [`ConnectionSlots`]: open connections, capped in total and per source address. A
//!   connection over either cap is accepted and closed at once (the client sees a reset; the
//!   kube-apiserver retries a reset admission call), so the listen backlog never fills and
//!   other clients' new connections are still accepted.
//! - With [`Admission`] (the hold API), a connection is *provisional* until a request on it
//!   is allowed ([`ConnectionHandle::admit`]); then it counts against its caller's user name
//!   instead of its source address. Provisional connections have a cap of their own, below
//!   the total, so admitted callers always have room; and when a provisional cap is reached
//!   a new connection is not refused: the oldest provisional connection with no request in
//!   flight is closed to make room for it (*evicted*). Whoever floods the port with
//!   connections that never send an allowed request only churns their own.
//! - [`ConnectionHandle`]: one per connection, put into every request's extensions. It counts
//!   the requests in flight (a connection with none for [`ConnectionLimits::idle_timeout`] is
//!   closed), names the connection's source, and lets a handler ask for the connection to be
//!   closed after its answer (the webhook does so when a request body misses its deadline;
//!   the hold API after refusing a caller).
//! - [`ConnectionMetrics`]: open connections, and a counter per reason a connection was
//!   refused, failed its handshake or was closed.

use crate::declared::Declared;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The bounds on a server's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections, in all.
    pub max_connections: usize,
    /// Open connections from one source address (with [`Admission`]: provisional ones).
    pub max_connections_per_source: usize,
    /// Longest TLS handshake.
    pub handshake_timeout: Duration,
    /// HTTP/1.1: longest wait for a request's headers, idle keep-alive time included.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/2: GOAWAY).
    pub idle_timeout: Duration,
    /// HTTP/2: streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// `None`: a connection counts against its source address until it closes, and one over
    /// a cap is refused (the webhook, the admin ports). `Some`: connections are provisional
    /// until admitted (the hold API; see the module's documentation).
    pub admission: Option<Admission>,
}

/// The bounds of a server whose handlers admit connections ([`ConnectionHandle::admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Provisional connections (no request on them allowed yet), in all; at most
    /// [`ConnectionLimits::max_connections`], whose rest is kept for admitted ones.
    pub max_provisional: usize,
    /// Admitted connections of one user name.
    pub max_connections_per_user: usize,
}

impl ConnectionLimits {
    pub const DEFAULT: ConnectionLimits = ConnectionLimits {
        max_connections: 512,
        max_connections_per_source: 32,
        handshake_timeout: Duration::from_secs(5),
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_concurrent_streams: 100,
        admission: None,
    };
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a connection was refused (at accept, or when admitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// [`ConnectionLimits::max_connections`] are open (with [`Admission`]: or the provisional
    /// cap is reached, and every provisional connection has a request in flight).
    Total,
    /// [`ConnectionLimits::max_connections_per_source`] are open from its address (with
    /// [`Admission`]: provisional, each with a request in flight).
    PerSource,
    /// [`Admission::max_connections_per_user`] connections of the caller are admitted.
    PerUser,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Total => "total",
            Refusal::PerSource => "per_source",
            Refusal::PerUser => "per_user",
        }
    }
}

/// Why a connection was closed by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// No request in flight for the idle timeout.
    Idle,
    /// A handler asked for it (e.g. a request body missed its deadline).
    Requested,
    /// A handler refused the caller (401, 403): no keep-alive for a refused caller.
    Refused,
    /// A provisional connection with no request in flight, closed to make room for a new one.
    Evicted,
    /// The server is shutting down.
    Shutdown,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle",
            CloseReason::Requested => "slow_request",
            CloseReason::Refused => "refused_caller",
            CloseReason::Evicted => "evicted",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The connection metrics; cheap to clone. Unregistered ones count for nobody.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    open: Gauge,
    provisional: Gauge,
    refused: Family<ReasonLabels, Counter>,
    handshake_failures: Family<ReasonLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
}

impl ConnectionMetrics {
    /// Register under `registry` (give it a sub-registry with the binary's prefix):
    ///
    /// | metric | labels | what |
    /// | --- | --- | --- |
    /// | `connections_open` | | TCP connections open now (handshaking or serving) |
    /// | `connections_provisional` | | of those, not yet admitted (servers with [`Admission`]; else all) |
    /// | `connections_refused_total` | `reason`: `total`, `per_source`, `per_user` | closed at accept (or at admission, `per_user`): a connection cap was reached |
    /// | `tls_handshake_failures_total` | `reason`: `timeout`, `error` | handshakes that failed (`error` includes a missing or untrusted client certificate) |
    /// | `connections_closed_total` | `reason`: `idle`, `slow_request`, `refused_caller`, `evicted`, `shutdown` | connections the server closed |
    pub fn register(registry: &mut Registry) -> Self {
        let m = ConnectionMetrics::default();
        registry.register(
            "connections_open",
            "TCP connections open now",
            m.open.clone(),
        );
        registry.register(
            "connections_provisional",
            "Open connections no request of which has been allowed yet",
            m.provisional.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept (or at admission) because a connection cap was reached, by cap",
            Declared(m.refused.clone()),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed or timed out",
            Declared(m.handshake_failures.clone()),
        );
        registry.register(
            "connections_closed",
            "Connections closed by the server, by reason",
            Declared(m.closed.clone()),
        );
        m
    }

    pub fn refused(&self, why: Refusal) {
        self.refused
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc();
    }

    pub fn handshake_failed(&self, timed_out: bool) {
        let reason = if timed_out { "timeout" } else { "error" };
        self.handshake_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn closed(&self, why: CloseReason) {
        self.closed
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc();
    }
}

/// One open connection, as the slots know it.
#[derive(Debug)]
struct Entry {
    source: IpAddr,
    /// `Some`: admitted, as this user.
    user: Option<String>,
    handle: Weak<HandleInner>,
}

/// What [`ConnectionSlots`] keeps under its lock.
#[derive(Debug, Default)]
struct Books {
    /// Open connections by id (ids rise with accept order: the first is the oldest).
    entries: BTreeMap<u64, Entry>,
    /// Provisional connections by source address.
    by_source: HashMap<IpAddr, usize>,
    /// Admitted connections by user name.
    by_user: HashMap<String, usize>,
    provisional: usize,
    next_id: u64,
}

impl Books {
    /// Forget connection `id`; true if it was still counted.
    fn remove(&mut self, id: u64) -> bool {
        let Some(entry) = self.entries.remove(&id) else {
            return false;
        };
        match entry.user {
            Some(user) => decrement(&mut self.by_user, &user),
            None => {
                decrement(&mut self.by_source, &entry.source);
                self.provisional = self.provisional.saturating_sub(1);
            }
        }
        true
    }

    /// The oldest provisional connection with no request in flight (from `source`, when
    /// given).
    fn evictable(&self, source: Option<IpAddr>) -> Option<u64> {
        self.entries
            .iter()
            .filter(|(_, e)| e.user.is_none() && source.is_none_or(|s| s == e.source))
            .find(|(_, e)| {
                e.handle
                    .upgrade()
                    .is_none_or(|h| h.in_flight.load(Ordering::SeqCst) == 0)
            })
            .map(|(id, _)| *id)
    }
}

fn decrement<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// Open connections, by source address (and, once admitted, by user), under the caps.
#[derive(Debug)]
pub struct ConnectionSlots {
    limits: ConnectionLimits,
    books: Mutex<Books>,
    open: AtomicUsize,
    emptied: Notify,
    metrics: ConnectionMetrics,
}

impl ConnectionSlots {
    pub fn new(limits: ConnectionLimits, metrics: ConnectionMetrics) -> Arc<Self> {
        Arc::new(ConnectionSlots {
            limits,
            books: Mutex::new(Books::default()),
            open: AtomicUsize::new(0),
            emptied: Notify::new(),
            metrics,
        })
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a connection from `source`, or why there is none. The slot is given back
    /// when dropped. With [`Admission`], a provisional connection with no request in flight
    /// may be evicted to make room (the source's own oldest for its cap, the oldest of all
    /// for the others).
    pub fn open(self: &Arc<Self>, source: IpAddr) -> Result<Slot, Refusal> {
        // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d.
        let source = source.to_canonical();
        let per_source = self.limits.max_connections_per_source.max(1);
        let total = self.limits.max_connections.max(1);
        let mut books = self.books();
        let mut evicted = Vec::new();
        match self.limits.admission {
            None => {
                if books.entries.len() >= total {
                    return Err(Refusal::Total);
                }
                if books.by_source.get(&source).copied().unwrap_or(0) >= per_source {
                    return Err(Refusal::PerSource);
                }
            }
            Some(admission) => {
                let provisional_cap = admission.max_provisional.clamp(1, total);
                if books.by_source.get(&source).copied().unwrap_or(0) >= per_source {
                    let id = books.evictable(Some(source)).ok_or(Refusal::PerSource)?;
                    evicted.push(self.evict(&mut books, id));
                }
                while books.entries.len() >= total || books.provisional >= provisional_cap {
                    let id = books.evictable(None).ok_or(Refusal::Total)?;
                    evicted.push(self.evict(&mut books, id));
                }
            }
        }
        let id = books.next_id;
        books.next_id += 1;
        let handle = ConnectionHandle::with_slots(source, id, Arc::downgrade(self));
        books.entries.insert(
            id,
            Entry {
                source,
                user: None,
                handle: Arc::downgrade(&handle.0),
            },
        );
        *books.by_source.entry(source).or_default() += 1;
        books.provisional += 1;
        drop(books);
        for victim in evicted.into_iter().flatten() {
            victim.evict.cancel();
        }
        self.open.fetch_add(1, Ordering::SeqCst);
        self.metrics.open.inc();
        self.metrics.provisional.inc();
        Ok(Slot {
            slots: self.clone(),
            handle,
        })
    }

    /// Stop counting connection `id` and return its handle, to be told to close once the
    /// lock is released.
    fn evict(&self, books: &mut Books, id: u64) -> Option<Arc<HandleInner>> {
        let handle = books.entries.get(&id).and_then(|e| e.handle.upgrade());
        if books.remove(id) {
            self.released(true);
            self.metrics.closed(CloseReason::Evicted);
        }
        handle
    }

    /// Count one connection fewer (`provisional`: it was).
    fn released(&self, provisional: bool) {
        let before = self.open.fetch_sub(1, Ordering::SeqCst);
        self.metrics.open.dec();
        if provisional {
            self.metrics.provisional.dec();
        }
        if before == 1 {
            self.emptied.notify_waiters();
        }
    }

    /// Connections open now.
    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Provisional connections open now.
    pub fn provisional_now(&self) -> usize {
        self.books().provisional
    }

    /// Resolves once no connection is open.
    pub async fn emptied(&self) {
        loop {
            let notified = self.emptied.notified();
            if self.open_now() == 0 {
                return;
            }
            notified.await;
        }
    }

    fn close(&self, id: u64) {
        let mut books = self.books();
        let provisional = books.entries.get(&id).map(|e| e.user.is_none());
        if books.remove(id) {
            drop(books);
            self.released(provisional.unwrap_or(false));
        }
    }

    /// Count connection `id` against `user` instead of its source.
    fn admit(&self, id: u64, user: &str) -> Result<(), Refusal> {
        let Some(admission) = self.limits.admission else {
            return Ok(());
        };
        let mut books = self.books();
        let Some(entry) = books.entries.get(&id) else {
            // Evicted meanwhile: it is closing anyway.
            return Ok(());
        };
        if entry.user.is_some() {
            return Ok(());
        }
        let source = entry.source;
        if books.by_user.get(user).copied().unwrap_or(0)
            >= admission.max_connections_per_user.max(1)
        {
            drop(books);
            self.metrics.refused(Refusal::PerUser);
            return Err(Refusal::PerUser);
        }
        if let Some(entry) = books.entries.get_mut(&id) {
            entry.user = Some(user.to_owned());
        }
        decrement(&mut books.by_source, &source);
        books.provisional = books.provisional.saturating_sub(1);
        *books.by_user.entry(user.to_owned()).or_default() += 1;
        drop(books);
        self.metrics.provisional.dec();
        Ok(())
    }
}

/// One open connection's share of [`ConnectionSlots`].
#[derive(Debug)]
pub struct Slot {
    slots: Arc<ConnectionSlots>,
    handle: ConnectionHandle,
}

impl Slot {
    /// The connection's handle, for its requests.
    pub fn handle(&self) -> ConnectionHandle {
        self.handle.clone()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(id) = self.handle.0.id {
            self.slots.close(id);
        }
    }
}

/// One connection, as its requests see it (in their extensions).
#[derive(Clone, Debug)]
pub struct ConnectionHandle(Arc<HandleInner>);

#[derive(Debug)]
struct HandleInner {
    in_flight: AtomicUsize,
    last_active: Mutex<Instant>,
    close: CancellationToken,
    close_reason: Mutex<CloseReason>,
    /// Cancelled when the connection was evicted: drop it now.
    evict: CancellationToken,
    source: IpAddr,
    id: Option<u64>,
    slots: Weak<ConnectionSlots>,
}

impl Default for ConnectionHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl ConnectionHandle {
    /// A handle counted in no [`ConnectionSlots`] (from 0.0.0.0).
    pub fn new() -> Self {
        Self::inner(IpAddr::V4(Ipv4Addr::UNSPECIFIED), None, Weak::new())
    }

    fn with_slots(source: IpAddr, id: u64, slots: Weak<ConnectionSlots>) -> Self {
        Self::inner(source, Some(id), slots)
    }

    fn inner(source: IpAddr, id: Option<u64>, slots: Weak<ConnectionSlots>) -> Self {
        ConnectionHandle(Arc::new(HandleInner {
            in_flight: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            close: CancellationToken::new(),
            close_reason: Mutex::new(CloseReason::Requested),
            evict: CancellationToken::new(),
            source,
            id,
            slots,
        }))
    }

    /// The connection's source address (IPv4-mapped addresses as IPv4).
    pub fn source(&self) -> IpAddr {
        self.0.source
    }

    /// A request of `user` on this connection was allowed: the connection stops being
    /// provisional and counts against `user` (a connection counts for the first user it
    /// admits). `Err`: `user` has [`Admission::max_connections_per_user`] connections
    /// already; answer the request with 429 and close this one.
    pub fn admit(&self, user: &str) -> Result<(), Refusal> {
        match (self.0.id, self.0.slots.upgrade()) {
            (Some(id), Some(slots)) => slots.admit(id, user),
            _ => Ok(()),
        }
    }

    /// Ask for the connection to be closed once the requests in flight on it are answered
    /// (HTTP/2: GOAWAY; HTTP/1.1: no further request is read).
    pub fn close(&self) {
        self.close_because(CloseReason::Requested);
    }

    /// [`close`](Self::close), counted as `reason`.
    pub fn close_because(&self, reason: CloseReason) {
        if !self.0.close.is_cancelled() {
            *self
                .0
                .close_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = reason;
        }
        self.0.close.cancel();
    }

    /// Resolves when [`close`](Self::close) was called, with the reason given.
    pub async fn close_requested(&self) -> CloseReason {
        self.0.close.cancelled().await;
        *self
            .0
            .close_reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The reason given if [`close`](Self::close) was called, else `None`.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.0.close.is_cancelled().then(|| {
            *self
                .0
                .close_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        })
    }

    /// Resolves when the connection was evicted to make room for another: drop it.
    pub async fn evicted(&self) {
        self.0.evict.cancelled().await
    }

    /// Counts a request in flight until the guard is dropped.
    pub fn begin(&self) -> InFlightRequest {
        self.0.in_flight.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InFlightRequest(self.clone())
    }

    /// How long the connection has had no request in flight (zero while one is).
    pub fn idle_for(&self) -> Duration {
        if self.0.in_flight.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        self.0
            .last_active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }

    fn touch(&self) {
        *self
            .0
            .last_active
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }
}

/// A request in flight on a connection; see [`ConnectionHandle::begin`].
#[derive(Debug)]
pub struct InFlightRequest(ConnectionHandle);

impl Drop for InFlightRequest {
    fn drop(&mut self) {
        self.0.touch();
        self.0.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_source: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: total,
            max_connections_per_source: per_source,
            ..ConnectionLimits::DEFAULT
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn one_source_gets_at_most_its_share_and_others_still_get_in() {
        let slots = ConnectionSlots::new(limits(10, 3), ConnectionMetrics::default());
        let a: Vec<Slot> = (0..3)
            .map(|_| slots.open(ip("10.0.0.1")).expect("slot"))
            .collect();
        assert_eq!(slots.open(ip("10.0.0.1")).err(), Some(Refusal::PerSource));
        // The same address written as an IPv4-mapped IPv6 address is the same source.
        assert_eq!(
            slots.open(ip("::ffff:10.0.0.1")).err(),
            Some(Refusal::PerSource)
        );
        let b = slots.open(ip("10.0.0.2")).expect("another source");
        assert_eq!(slots.open_now(), 4);
        drop(a);
        assert_eq!(slots.open_now(), 1);
        let again = slots
            .open(ip("10.0.0.1"))
            .expect("room again after closing");
        drop((b, again));
        assert_eq!(slots.open_now(), 0);
        assert!(
            slots.books().by_source.is_empty(),
            "no entry is kept for a source with no connection"
        );
    }

    #[test]
    fn the_total_cap_holds_across_sources() {
        let slots = ConnectionSlots::new(limits(4, 3), ConnectionMetrics::default());
        let held: Vec<Slot> = (0..4)
            .map(|i| slots.open(ip(&format!("10.0.0.{i}"))).expect("slot"))
            .collect();
        assert_eq!(slots.open(ip("10.0.0.9")).err(), Some(Refusal::Total));
        drop(held);
        assert!(slots.open(ip("10.0.0.9")).is_ok());
    }

    #[test]
    fn a_connection_is_idle_only_without_requests_in_flight() {
        let h = ConnectionHandle::new();
        let req = h.begin();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(h.idle_for(), Duration::ZERO);
        drop(req);
        std::thread::sleep(Duration::from_millis(20));
        assert!(h.idle_for() >= Duration::from_millis(20));
    }

    #[tokio::test]
    async fn emptied_resolves_when_the_last_connection_closes() {
        let slots = ConnectionSlots::new(limits(4, 4), ConnectionMetrics::default());
        let s = slots.open(ip("127.0.0.1")).expect("slot");
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.emptied().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(s);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("emptied within 5 s")
            .expect("join");
    }

    fn admitting(
        total: usize,
        per_source: usize,
        provisional: usize,
        per_user: usize,
    ) -> ConnectionLimits {
        ConnectionLimits {
            admission: Some(Admission {
                max_provisional: provisional,
                max_connections_per_user: per_user,
            }),
            ..limits(total, per_source)
        }
    }

    fn evicted(slot: &Slot) -> bool {
        slot.handle.0.evict.is_cancelled()
    }

    #[test]
    fn a_flood_of_provisional_connections_evicts_its_own_oldest_and_never_an_admitted_one() {
        let slots = ConnectionSlots::new(admitting(6, 3, 4, 2), ConnectionMetrics::default());
        // The holder's connection, admitted.
        let holder = slots.open(ip("10.0.0.9")).expect("slot");
        holder.handle().admit("dispatch").expect("admitted");
        assert_eq!(slots.provisional_now(), 0);
        // An attacker fills its source's share, then goes on: its own oldest is evicted.
        let a: Vec<Slot> = (0..3)
            .map(|_| slots.open(ip("10.0.0.1")).expect("slot"))
            .collect();
        let a4 = slots.open(ip("10.0.0.1")).expect("room made by eviction");
        assert!(evicted(&a[0]) && !evicted(&a[1]) && !evicted(&a4));
        // Another attacker source: once the provisional cap (4) is reached, the oldest goes.
        let b = slots.open(ip("10.0.0.2")).expect("room left");
        let b2 = slots.open(ip("10.0.0.2")).expect("room made by eviction");
        assert!(evicted(&a[1]) && !evicted(&a[2]) && !evicted(&b));
        assert_eq!(slots.provisional_now(), 4);
        assert_eq!(slots.open_now(), 5, "4 provisional and the holder's");
        // A new caller still gets in, and the holder's admitted connection is never evicted.
        let holder2 = slots
            .open(ip("10.0.0.9"))
            .expect("the holder's second connection");
        assert!(!evicted(&holder) && evicted(&a[2]));
        holder2
            .handle()
            .admit("dispatch")
            .expect("second connection of the user");
        // A provisional connection with a request in flight is not evicted: with every
        // provisional one busy, a new one is refused.
        let busy: Vec<_> = [&a4, &b, &b2].iter().map(|s| s.handle().begin()).collect();
        let c = slots.open(ip("10.0.0.3")).expect("room left");
        assert!(!evicted(&a4) && !evicted(&b) && !evicted(&b2));
        let _c_busy = c.handle().begin();
        assert_eq!(slots.open(ip("10.0.0.4")).err(), Some(Refusal::Total));
        drop(busy);
        drop((a, a4, b, b2, c, holder, holder2));
        assert_eq!(slots.open_now(), 0);
        let books = slots.books();
        assert!(books.by_source.is_empty() && books.by_user.is_empty() && books.entries.is_empty());
    }

    #[test]
    fn admitted_connections_count_per_user_not_per_source() {
        let slots = ConnectionSlots::new(admitting(16, 2, 8, 2), ConnectionMetrics::default());
        // Port-forwarded callers all arrive from 127.0.0.1.
        let alice: Vec<Slot> = (0..2)
            .map(|_| slots.open(ip("127.0.0.1")).expect("slot"))
            .collect();
        for s in &alice {
            s.handle().admit("alice").expect("admitted");
        }
        let bob: Vec<Slot> = (0..2)
            .map(|_| slots.open(ip("127.0.0.1")).expect("bob's room"))
            .collect();
        assert!(alice.iter().chain(&bob).all(|s| !evicted(s)));
        for s in &bob {
            s.handle().admit("bob").expect("admitted");
        }
        // Alice's third connection is over her cap: refused when admitted.
        let third = slots.open(ip("127.0.0.1")).expect("slot");
        assert_eq!(third.handle().admit("alice"), Err(Refusal::PerUser));
        // A connection already admitted stays with its first user.
        assert_eq!(alice[0].handle().admit("bob"), Ok(()));
        drop(alice);
        third.handle().admit("alice").expect("room again");
    }
}
