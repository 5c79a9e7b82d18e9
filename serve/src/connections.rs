//! What a TLS server spends on each client connection, and the bounds on it.
//!
//! - [`ConnectionSlots`]: open connections, capped in total and per source address. A
//!   connection over either cap is accepted and closed at once (the client sees a reset; the
//!   kube-apiserver retries a reset admission call), so the listen backlog never fills and
//!   other clients' new connections are still accepted.
//! - [`ConnectionHandle`]: one per connection, put into every request's extensions. It counts
//!   the requests in flight (a connection with none for [`ConnectionLimits::idle_timeout`] is
//!   closed) and lets a handler ask for the connection to be closed after its answer (the
//!   webhook does so when a request body misses its deadline).
//! - [`ConnectionMetrics`]: open connections, and a counter per reason a connection was
//!   refused, failed its handshake or was closed.

use crate::declared::Declared;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The bounds on a server's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections, in all.
    pub max_connections: usize,
    /// Open connections from one source address.
    pub max_connections_per_source: usize,
    /// Longest TLS handshake.
    pub handshake_timeout: Duration,
    /// HTTP/1.1: longest wait for a request's headers, idle keep-alive time included.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/2: GOAWAY).
    pub idle_timeout: Duration,
    /// HTTP/2: streams one connection may have open at once.
    pub max_concurrent_streams: u32,
}

impl ConnectionLimits {
    pub const DEFAULT: ConnectionLimits = ConnectionLimits {
        max_connections: 512,
        max_connections_per_source: 32,
        handshake_timeout: Duration::from_secs(5),
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_concurrent_streams: 100,
    };
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a connection was refused before its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// [`ConnectionLimits::max_connections`] are open.
    Total,
    /// [`ConnectionLimits::max_connections_per_source`] are open from its address.
    PerSource,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Total => "total",
            Refusal::PerSource => "per_source",
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
    /// The server is shutting down.
    Shutdown,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle",
            CloseReason::Requested => "slow_request",
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
    /// | `connections_refused_total` | `reason`: `total`, `per_source` | closed at accept: a connection cap was reached |
    /// | `tls_handshake_failures_total` | `reason`: `timeout`, `error` | handshakes that failed (`error` includes a missing or untrusted client certificate) |
    /// | `connections_closed_total` | `reason`: `idle`, `slow_request`, `shutdown` | connections the server closed |
    pub fn register(registry: &mut Registry) -> Self {
        let m = ConnectionMetrics::default();
        registry.register(
            "connections_open",
            "TCP connections open now",
            m.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept because a connection cap was reached, by cap",
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

/// Open connections, by source address, under the two caps.
#[derive(Debug)]
pub struct ConnectionSlots {
    limits: ConnectionLimits,
    by_source: Mutex<HashMap<IpAddr, usize>>,
    open: AtomicUsize,
    emptied: Notify,
    metrics: ConnectionMetrics,
}

impl ConnectionSlots {
    pub fn new(limits: ConnectionLimits, metrics: ConnectionMetrics) -> Arc<Self> {
        Arc::new(ConnectionSlots {
            limits,
            by_source: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            emptied: Notify::new(),
            metrics,
        })
    }

    /// A slot for a connection from `source`, or why there is none. The slot is given back
    /// when dropped.
    pub fn open(self: &Arc<Self>, source: IpAddr) -> Result<Slot, Refusal> {
        // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d.
        let source = source.to_canonical();
        let mut by_source = self
            .by_source
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let open = self.open.load(Ordering::SeqCst);
        if open >= self.limits.max_connections.max(1) {
            return Err(Refusal::Total);
        }
        let n = by_source.entry(source).or_default();
        if *n >= self.limits.max_connections_per_source.max(1) {
            return Err(Refusal::PerSource);
        }
        *n += 1;
        self.open.fetch_add(1, Ordering::SeqCst);
        self.metrics.open.inc();
        Ok(Slot {
            slots: self.clone(),
            source,
        })
    }

    /// Connections open now.
    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::SeqCst)
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

    fn close(&self, source: IpAddr) {
        let mut by_source = self
            .by_source
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = by_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                by_source.remove(&source);
            }
        }
        let before = self.open.fetch_sub(1, Ordering::SeqCst);
        self.metrics.open.dec();
        if before == 1 {
            self.emptied.notify_waiters();
        }
    }
}

/// One open connection's share of [`ConnectionSlots`].
#[derive(Debug)]
pub struct Slot {
    slots: Arc<ConnectionSlots>,
    source: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.close(self.source);
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
}

impl Default for ConnectionHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl ConnectionHandle {
    pub fn new() -> Self {
        ConnectionHandle(Arc::new(HandleInner {
            in_flight: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            close: CancellationToken::new(),
        }))
    }

    /// Ask for the connection to be closed once the requests in flight on it are answered
    /// (HTTP/2: GOAWAY; HTTP/1.1: no further request is read).
    pub fn close(&self) {
        self.0.close.cancel();
    }

    /// Resolves when [`close`](Self::close) was called.
    pub async fn close_requested(&self) {
        self.0.close.cancelled().await
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
            slots.by_source.lock().expect("lock").is_empty(),
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
}
