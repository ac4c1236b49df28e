//! The accept loop: plain HTTP/1.1 or TLS, a connection cap with eviction
//! of idle connections (see [`super::slots`]), timeouts for clients that
//! connect and then say nothing, and graceful shutdown.

use super::Shared;
use super::slots::{Busy, Evicted, Slots, Ticket};
use axum::Router;
use axum::body::Body;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// Default of `--web.max-connections`: far more than the few scrapers an
/// exporter has, far fewer than the file descriptors cgperf keeps.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// A client must send a complete request head within this time of
/// connecting (or of its previous response); then the connection is closed.
/// Prometheus sends its request at once, and its keep-alive connections
/// simply reconnect.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The TLS handshake must be done within this time of connecting.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request in progress for this long (a client that stopped reading its
/// response) may lose its connection to a new one when all slots are taken.
pub const STALE_REQUEST: Duration = Duration::from_secs(60);
/// On SIGTERM, requests in progress get this long to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// How much of a plain HTTP request head is read before answering it.
const MAX_PLAIN_HEAD: usize = 16 * 1024;
/// The answer to plain HTTP on the TLS port, as Go servers give it, so
/// that `curl http://` says what is wrong instead of failing obscurely.
const PLAIN_HTTP_ON_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Serves `router` on `listener` until `shutdown` resolves, then lets
/// requests in progress finish (for at most [`SHUTDOWN_GRACE`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    web: Shared,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Slots::new(max_connections, STALE_REQUEST);
    let (stop, stopping) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(&e, &slots).await;
                    continue;
                }
            },
        };
        let (ticket, evicted) = tokio::select! {
            () = &mut shutdown => break,
            admitted = slots.admit() => admitted,
        };
        while tasks.try_join_next().is_some() {}
        // Small responses must not wait for the client's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let tls = web.borrow().tls.clone().map(TlsAcceptor::from);
        tasks.spawn(connection(
            tcp,
            tls,
            router.clone(),
            (ticket, evicted),
            stopping.clone(),
        ));
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "{} connection(s) still busy {SHUTDOWN_GRACE:?} after shutdown: closing them",
            tasks.len()
        );
        tasks.abort_all();
    }
}

/// Errors of `accept` that concern one connection are skipped. Out of file
/// descriptors (`EMFILE`, `ENFILE`), the oldest idle connection is closed
/// to free one and `accept` retried at once, so that idle connections
/// cannot keep a scrape waiting; with none to close, and for other errors,
/// it is logged and retried after a pause, so as not to spin.
async fn accept_failed(e: &std::io::Error, slots: &Slots) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
    if out_of_fds && slots.evict_one() {
        // Its task closes the socket when it next runs.
        tokio::time::sleep(EVICTED_CLOSE).await;
        return;
    }
    tracing::error!("accepting a connection failed: {e}; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// How long `accept` waits after closing an idle connection for want of
/// descriptors: time for its task to drop the socket.
const EVICTED_CLOSE: Duration = Duration::from_millis(5);

/// One connection: the TLS handshake if TLS is on, then HTTP/1.1 until the
/// client leaves, times out, is evicted, or cgperf stops.
async fn connection(
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    router: Router,
    (ticket, mut evicted): (Ticket, Evicted),
    mut stopping: watch::Receiver<bool>,
) {
    let Some(acceptor) = tls else {
        return http(tcp, router, (ticket, evicted), stopping).await;
    };
    let handshake = async {
        if !starts_with_tls(&tcp).await? {
            refuse_plain_http(tcp).await?;
            return Ok(None);
        }
        acceptor.accept(tcp).await.map(Some)
    };
    let stream = tokio::select! {
        done = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake) => match done {
            Ok(Ok(Some(stream))) => stream,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!("TLS handshake not done within {TLS_HANDSHAKE_TIMEOUT:?}");
                return;
            }
        },
        _ = &mut evicted => return,
        () = stopped(&mut stopping) => return,
    };
    http(stream, router, (ticket, evicted), stopping).await;
}

/// Resolves when cgperf is stopping.
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    // An error means the loop is gone: stopping too.
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// Answers plain HTTP on the TLS port with a 400 saying so. The request
/// head is read first: closing a socket with unread data would reset the
/// connection, and the client could lose the answer.
async fn refuse_plain_http(mut tcp: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_PLAIN_HEAD {
        match tcp.read(&mut buf).await? {
            0 => break,
            n => head.extend_from_slice(&buf[..n]),
        }
    }
    tcp.write_all(PLAIN_HTTP_ON_TLS).await?;
    tcp.shutdown().await
}

/// Whether the client's first byte opens a TLS handshake (false at EOF).
async fn starts_with_tls(tcp: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0; 1];
    let n = tcp.peek(&mut first).await?;
    Ok(n == 1 && first[0] == TLS_HANDSHAKE_RECORD)
}

async fn http<S>(
    io: S,
    router: Router,
    (ticket, mut evicted): (Ticket, Evicted),
    mut stopping: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ticket = &ticket;
    let service = hyper::service::service_fn(|request: hyper::Request<Incoming>| {
        let busy = ticket.busy();
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| BusyBody { body, _busy: busy }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => {
            if let Err(e) = served {
                tracing::debug!("HTTP connection ended: {e}");
            }
        }
        // Dropping the connection closes it.
        _ = &mut evicted => {}
        () = stopped(&mut stopping) => {
            // Closes at once when idle, after the response otherwise.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// A response body that keeps its connection marked busy until hyper has
/// taken all of it (and drops it).
struct BusyBody {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for BusyBody {
    type Data = <Body as http_body::Body>::Data;
    type Error = <Body as http_body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
