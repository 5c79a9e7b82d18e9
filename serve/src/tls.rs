//! An axum router served over rustls (TLS 1.2 and 1.3, h2 and http/1.1), optionally requiring
//! client certificates, with every connection bounded (see [`crate::connections`]): caps on
//! open connections in total and per source address, a handshake timeout, a header-read
//! timeout, an idle timeout, a cap on HTTP/2 streams per connection, and graceful drain on
//! shutdown.
//!
//! What the server does *not* bound is the time a handler takes to read a request body: that
//! is the handler's (the webhook reads its body under a deadline of its own, and closes the
//! connection through [`ConnectionHandle::close`] when it is missed).

use crate::client_ca::ClientCa;
use crate::connections::{
    CloseReason, ConnectionHandle, ConnectionLimits, ConnectionMetrics, ConnectionSlots,
};
use crate::reload::{CertFiles, ReloadingResolver};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long a client may take to send its request headers (HTTP/1.1), by default.
pub const HEADER_READ_TIMEOUT: Duration = ConnectionLimits::DEFAULT.header_read_timeout;
/// How long in-flight connections get to finish after shutdown begins.
pub const DRAIN: Duration = Duration::from_secs(15);
/// How often the certificate files (and the client CA file) are re-read.
pub const RELOAD_EVERY: Duration = Duration::from_secs(5);
/// How long a connection asked to close (idle, slow, shutdown) may take to finish the
/// requests in flight on it before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How a [`TlsServer`] treats its clients.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    pub limits: ConnectionLimits,
    /// When set, clients must present a certificate signed by a CA in this PEM file
    /// (re-read every [`RELOAD_EVERY`]).
    pub client_ca: Option<PathBuf>,
    pub metrics: ConnectionMetrics,
}

/// The TLS configuration in force, rebuilt when the client CA file changes (the serving
/// certificate is swapped inside the resolver, which every configuration shares).
struct Configs {
    resolver: Arc<ReloadingResolver>,
    client_ca: RwLock<Option<ClientCa>>,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl Configs {
    fn build(
        resolver: &Arc<ReloadingResolver>,
        ca: Option<&ClientCa>,
    ) -> Arc<rustls::ServerConfig> {
        let builder = rustls::ServerConfig::builder_with_protocol_versions(&[
            &rustls::version::TLS13,
            &rustls::version::TLS12,
        ]);
        let builder = match ca {
            Some(ca) => builder.with_client_cert_verifier(ca.verifier()),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }

    fn current(&self) -> Arc<rustls::ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Re-read the client CA file; swap the configuration if it changed and parses.
    fn reload_client_ca(&self) {
        let loaded = self
            .client_ca
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(ca) = loaded else { return };
        match ca.reload() {
            Ok(None) => {}
            Ok(Some(new)) => {
                let config = Self::build(&self.resolver, Some(&new));
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = config;
                *self
                    .client_ca
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Some(new);
                tracing::info!(file = %ca.path.display(), "client CA reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %e, "client CA not reloaded; keeping the current one")
            }
        }
    }
}

/// A bound TLS listener, ready to serve.
pub struct TlsServer {
    listener: TcpListener,
    resolver: Arc<ReloadingResolver>,
    configs: Arc<Configs>,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
}

impl TlsServer {
    /// Bind `addr` and load the certificate (an error if it cannot be read or does not
    /// match), with the default limits and no client authentication.
    pub async fn bind(addr: SocketAddr, files: CertFiles) -> anyhow::Result<Self> {
        Self::bind_with(addr, files, TlsOptions::default()).await
    }

    /// Bind `addr`, load the certificate and, if asked, the client CA (an error if either
    /// cannot be read or parsed).
    pub async fn bind_with(
        addr: SocketAddr,
        files: CertFiles,
        options: TlsOptions,
    ) -> anyhow::Result<Self> {
        crate::crypto::install_crypto_provider();
        let resolver = Arc::new(ReloadingResolver::load(files)?);
        let client_ca = match &options.client_ca {
            Some(path) => Some(ClientCa::load(path)?),
            None => None,
        };
        let config = Configs::build(&resolver, client_ca.as_ref());
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            resolver: resolver.clone(),
            configs: Arc::new(Configs {
                resolver,
                client_ca: RwLock::new(client_ca),
                current: RwLock::new(config),
            }),
            limits: options.limits,
            metrics: options.metrics,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn resolver(&self) -> Arc<ReloadingResolver> {
        self.resolver.clone()
    }

    /// Serve until `shutdown` is cancelled, then drain for at most [`DRAIN`].
    pub async fn serve(self, router: Router, shutdown: CancellationToken) -> anyhow::Result<()> {
        tokio::spawn(self.resolver.clone().watch(RELOAD_EVERY, shutdown.clone()));
        {
            let configs = self.configs.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(RELOAD_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => configs.reload_client_ca(),
                    }
                }
            });
        }
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.limits.max_concurrent_streams);
        let builder = Arc::new(builder);
        let configs = self.configs.clone();
        accept_bounded(
            &self.listener,
            self.limits,
            &self.metrics,
            &shutdown,
            |tcp, peer, handle| {
                let acceptor = tokio_rustls::TlsAcceptor::from(configs.current());
                let connection = Connection {
                    router: router.clone(),
                    builder: builder.clone(),
                    limits: self.limits,
                    metrics: self.metrics.clone(),
                    shutdown: shutdown.clone(),
                };
                async move { connection.run_tls(acceptor, tcp, peer, handle).await }
            },
        )
        .await;
        Ok(())
    }
}

/// A bound plain-HTTP listener (the admin port: probes and metrics), with the same bounds on
/// its connections as a [`TlsServer`] but the handshake: caps on open connections in total
/// and per source address (more are accepted and closed at once, and counted), a header-read
/// timeout from the moment a connection is accepted (HTTP/1.1 only: a client that sends
/// nothing, or trickles its headers, is closed once it passes), an idle timeout, and graceful
/// drain on shutdown.
pub struct PlainServer {
    listener: TcpListener,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
}

impl PlainServer {
    /// Serve on `listener` (already bound) under `limits`, counting in `metrics`.
    pub fn new(
        listener: TcpListener,
        limits: ConnectionLimits,
        metrics: ConnectionMetrics,
    ) -> Self {
        PlainServer {
            listener,
            limits,
            metrics,
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` is cancelled, then drain for at most [`DRAIN`].
    pub async fn serve(self, router: Router, shutdown: CancellationToken) -> anyhow::Result<()> {
        // HTTP/1.1 only (kubelet's probes and Prometheus' scrapes): the header-read timeout
        // then runs from the first byte not yet sent, with no protocol detection before it.
        let mut builder = Builder::new(TokioExecutor::new()).http1_only();
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout);
        let builder = Arc::new(builder);
        accept_bounded(
            &self.listener,
            self.limits,
            &self.metrics,
            &shutdown,
            |tcp, peer, handle| {
                let connection = Connection {
                    router: router.clone(),
                    builder: builder.clone(),
                    limits: self.limits,
                    metrics: self.metrics.clone(),
                    shutdown: shutdown.clone(),
                };
                async move { connection.serve_http(tcp, peer, handle).await }
            },
        )
        .await;
        Ok(())
    }
}

/// Accepts connections on `listener` until `shutdown` is cancelled, each under the caps of
/// `limits` (one over a cap is closed at once and counted in `metrics`); each accepted one is
/// served by the future `serve` makes of it, holding its slot until that future ends. Then
/// waits for the open connections to close, at most [`DRAIN`].
async fn accept_bounded<F, Fut>(
    listener: &TcpListener,
    limits: ConnectionLimits,
    metrics: &ConnectionMetrics,
    shutdown: &CancellationToken,
    mut serve: F,
) where
    F: FnMut(tokio::net::TcpStream, SocketAddr, ConnectionHandle) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let slots = ConnectionSlots::new(limits, metrics.clone());
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, most often: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match slots.open(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                metrics.refused(why);
                tracing::debug!(%peer, cap = why.as_str(), "connection refused: cap reached");
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let handle = slot.handle();
        let served = serve(tcp, peer, handle.clone());
        tokio::spawn(async move {
            let _slot = slot;
            // An evicted connection (provisional, no request in flight) is dropped at once,
            // handshaking or not.
            tokio::select! {
                () = served => {}
                () = handle.evicted() => {
                    tracing::debug!(%peer, "provisional connection evicted to make room");
                }
            }
        });
    }
    if tokio::time::timeout(DRAIN, slots.emptied()).await.is_err() {
        tracing::warn!(
            open = slots.open_now(),
            "connections still open after the drain period; closing"
        );
    }
}

/// What serving one connection needs.
struct Connection {
    router: Router,
    builder: Arc<Builder<TokioExecutor>>,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    shutdown: CancellationToken,
}

impl Connection {
    async fn run_tls(
        self,
        acceptor: tokio_rustls::TlsAcceptor,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        handle: ConnectionHandle,
    ) {
        let tls =
            match tokio::time::timeout(self.limits.handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    self.metrics.handshake_failed(false);
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    self.metrics.handshake_failed(true);
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
        self.serve_http(tls, peer, handle).await
    }

    /// Serves HTTP on `io` until the client or the server ends the connection.
    async fn serve_http<I>(self, io: I, peer: SocketAddr, handle: ConnectionHandle)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router;
        let svc = {
            let handle = handle.clone();
            hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(handle.clone());
                let in_flight = handle.begin();
                let answer = router.clone().oneshot(req.map(axum::body::Body::new));
                async move {
                    let answer = answer.await;
                    drop(in_flight);
                    answer
                }
            })
        };
        let conn = self.builder.serve_connection(TokioIo::new(io), svc);
        let mut conn = std::pin::pin!(conn);
        let check_every = (self.limits.idle_timeout / 4).max(Duration::from_millis(100));
        let mut idle_check = tokio::time::interval(check_every);
        idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing: Option<tokio::time::Instant> = None;
        loop {
            let give_up = closing.map(|since| since + CLOSE_GRACE);
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    // A handler asked for the close and the answer said `Connection: close`:
                    // hyper may end the connection before the branch below sees the request.
                    if let (None, Some(reason)) = (closing, handle.close_reason()) {
                        self.metrics.closed(reason);
                    }
                    return;
                }
                _ = self.shutdown.cancelled(), if closing.is_none() => {
                    self.metrics.closed(CloseReason::Shutdown);
                    conn.as_mut().graceful_shutdown();
                    closing = Some(tokio::time::Instant::now());
                }
                reason = handle.close_requested(), if closing.is_none() => {
                    self.metrics.closed(reason);
                    tracing::debug!(%peer, reason = reason.as_str(), "closing the connection, as a handler asked");
                    conn.as_mut().graceful_shutdown();
                    closing = Some(tokio::time::Instant::now());
                }
                _ = idle_check.tick(), if closing.is_none() => {
                    if handle.idle_for() >= self.limits.idle_timeout {
                        self.metrics.closed(CloseReason::Idle);
                        tracing::debug!(%peer, "closing an idle connection");
                        conn.as_mut().graceful_shutdown();
                        closing = Some(tokio::time::Instant::now());
                    }
                }
                _ = sleep_until_opt(give_up) => {
                    tracing::debug!(%peer, "connection did not finish after being asked to close; dropping it");
                    return;
                }
            }
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::ADMIN_LIMITS;
    use prometheus_client::registry::Registry;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A handler that refuses its caller asks for the connection to be closed, and its answer
    /// says `Connection: close`; hyper may then end the connection before the close request is
    /// seen. Every such connection is still counted as closed after a refusal.
    #[tokio::test]
    async fn every_connection_closed_after_a_refusal_is_counted() {
        const CALLS: usize = 20;
        let mut registry = Registry::default();
        let metrics = ConnectionMetrics::register(registry.sub_registry_with_prefix("t"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = Router::new().route(
            "/",
            axum::routing::get(|handle: axum::Extension<ConnectionHandle>| async move {
                handle.close_because(CloseReason::Refused);
                (
                    http::StatusCode::UNAUTHORIZED,
                    [(http::header::CONNECTION, "close")],
                    "refused",
                )
            }),
        );
        let stop = CancellationToken::new();
        let server = tokio::spawn(
            PlainServer::new(listener, ADMIN_LIMITS, metrics).serve(router, stop.clone()),
        );
        for _ in 0..CALLS {
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .expect("write");
            let mut out = String::new();
            tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
                .await
                .expect("the server closes the connection")
                .expect("read");
            assert!(out.starts_with("HTTP/1.1 401"), "{out}");
            assert!(
                out.to_ascii_lowercase().contains("connection: close"),
                "{out}"
            );
        }
        let want = format!("t_connections_closed_total{{reason=\"refused_caller\"}} {CALLS}");
        let mut text = String::new();
        // The count is made as each connection's task ends, just after the client saw EOF.
        for _ in 0..100 {
            text.clear();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
            if text.contains(&want) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(text.contains(&want), "{want} in:\n{text}");
        stop.cancel();
        server.await.expect("joined").expect("served");
    }
}
