//! Connections: who may hold one, for how long, and who leaves when the server is full.
//!
//! - At most [`Limits::max_connections`] HTTP connections are open at once, and at most
//!   [`Limits::max_connections_per_peer`] from one peer address. At its address's cap a new
//!   connection takes the place of that address's oldest connection that may be shed (below), once
//!   that one has been open a second ([`OWN_SHED_MIN_AGE`]); otherwise it is answered 503
//!   `overloaded` (where the socket takes the answer at once) and closed.
//! - A new connection sends its first request head within [`Limits::first_head_timeout`], or it
//!   is closed; later heads, and the idle time between keep-alive requests, have
//!   [`Limits::header_read_timeout`].
//! - At the global cap a new connection is served in place of one that may be shed, taken from
//!   the peer address holding the most such connections: its oldest that has sent no request
//!   head, else its oldest whose body is still arriving, else its oldest whose requests were all
//!   answered without proving a principal (an idle keep-alive connection of `/healthz` probes,
//!   say). The shed connection hands its place to the newcomer at once. A connection is never
//!   shed while a whole request on it is being answered, nor ever once a request on it proved a
//!   principal (an administrator's identity, a relay's token or bearer, a console session:
//!   [`Connection::trusted`]); when every open connection is one of those, new ones wait in the
//!   listen queue until one closes.
//! - A WebSocket leaves the count when it upgrades ([`Limits::max_sockets`] bounds sockets).
//!   Every connection reads through its [`ReadLimit`], which the socket bounds until its node
//!   session opens (`api::socket`).
//!
//! So a client that opens connections and proves no principal holds at most its peer's cap, and
//! at the global cap its connections are the ones that make room: an administrator's fresh
//! connection is served at once however many half-open or idle ones an unauthenticated client
//! keeps from a few addresses. (Thousands of addresses with one connection each shed one
//! another's connections and a newcomer's alike; that flood is for a proxy in front.)
//!
//! The loop is this module's own (hyper's HTTP/1.1 builder with upgrades and a header read
//! timeout, graceful shutdown as axum's `serve` does it) because `axum::serve` gives no hand on a
//! connection before its first request: no per-address cap, no first-head deadline, no shedding.

use super::limits::{Limits, OVERLOADED_RETRY_AFTER_MS, OVERLOADED_RETRY_AFTER_SECONDS};
use axum::Router;
use axum::extract::Request;
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt as _;

/// How long a connection without a whole request stays before a newcomer of its own address may
/// take its place at the address's cap: a browser's unused preconnect makes way, while an address
/// re-opening connections as fast as it can is answered 503 (cheap) rather than shedding its own
/// (a connection task per attempt).
const OWN_SHED_MIN_AGE: Duration = Duration::from_secs(1);

/// Where a connection stands with its requests, in the order connections are shed: the stages
/// before [`Stage::Busy`] may be shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Stage {
    /// No request head yet: shed first.
    Silent = 0,
    /// A head arrived, its request is not yet whole (its body is arriving): shed next.
    Receiving = 1,
    /// Its requests were answered and none of them proved a principal: shed last.
    Idle = 2,
    /// A whole request arrived and is being answered: not shed.
    Busy = 3,
    /// A request on it proved a principal ([`Connection::trusted`]): never shed again.
    Trusted = 4,
}

impl Stage {
    fn sheddable(self) -> bool {
        self < Stage::Busy
    }
}

/// One open connection, as the registry and its requests see it.
pub(crate) struct Connection {
    id: u64,
    peer: IpAddr,
    opened: Instant,
    stage: AtomicU8,
    /// Its place among [`Limits::max_connections`]; taken by the newcomer it is shed for.
    place: Mutex<Option<OwnedSemaphorePermit>>,
    /// Woken when the connection is shed.
    shed: Notify,
    registry: Arc<Registry>,
}

impl Connection {
    fn stage(&self) -> Stage {
        match self.stage.load(Ordering::Acquire) {
            0 => Stage::Silent,
            1 => Stage::Receiving,
            2 => Stage::Idle,
            3 => Stage::Busy,
            _ => Stage::Trusted,
        }
    }

    /// A request head arrived.
    fn head_arrived(self: &Arc<Self>) {
        self.registry.move_to(self, Stage::Receiving);
    }

    /// A whole request arrived: the connection is not shed while it is answered.
    pub(crate) fn delivered(self: &Arc<Self>) {
        self.registry.move_to(self, Stage::Busy);
    }

    /// Its request was answered: the connection may be shed again, after every connection that
    /// has not delivered a request, unless a request on it proved a principal.
    fn answered(self: &Arc<Self>) {
        self.registry.move_to(self, Stage::Idle);
    }

    /// A request on it proved a principal (an identity, a relay token, a node bearer or a console
    /// session): the connection is never shed again.
    pub(crate) fn trusted(self: &Arc<Self>) {
        self.registry.move_to(self, Stage::Trusted);
    }

    fn holds_place(&self) -> bool {
        self.place.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some()
    }

    /// The peer address of the connection.
    pub(crate) fn peer(&self) -> IpAddr {
        self.peer
    }

    fn take_place(&self) -> Option<OwnedSemaphorePermit> {
        self.place.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

/// A request's mark of its connection (a request extension), so a handler that has read the whole
/// body ([`Connection::delivered`]) or proved a principal ([`Connection::trusted`]) can say so.
#[derive(Clone)]
pub(crate) struct ConnectionMark(pub(crate) Arc<Connection>);

/// How many bytes a connection may read before its reader takes a whole message (a request
/// extension, so the socket a connection upgrades to can set it): unbounded until
/// [`ReadLimit::bound`]. A read past the bound fails with [`OverReadLimit`], so a peer cannot make
/// the server buffer more than the bound (and one read) of a message it has not finished.
#[derive(Clone)]
pub(crate) struct ReadLimit(Arc<ReadCounts>);

struct ReadCounts {
    /// The bound; `usize::MAX` for none.
    bound: AtomicUsize,
    /// Bytes read since the bound was set or the reader last took a message.
    read: AtomicUsize,
}

impl ReadLimit {
    fn new() -> Self {
        ReadLimit(Arc::new(ReadCounts { bound: AtomicUsize::new(usize::MAX), read: AtomicUsize::new(0) }))
    }

    /// From now on at most `bytes` (and one read) are read before the reader takes a message.
    pub(crate) fn bound(&self, bytes: usize) {
        self.0.read.store(0, Ordering::SeqCst);
        self.0.bound.store(bytes, Ordering::SeqCst);
    }

    /// From now on reads are unbounded.
    pub(crate) fn lift(&self) {
        self.0.bound.store(usize::MAX, Ordering::SeqCst);
    }

    /// The reader took a whole message: the count starts again.
    pub(crate) fn took_message(&self) {
        self.0.read.store(0, Ordering::SeqCst);
    }
}

/// The error of a read past a [`ReadLimit`]'s bound.
#[derive(Debug)]
pub(crate) struct OverReadLimit;

impl std::fmt::Display for OverReadLimit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a message over the connection's read bound")
    }
}

impl std::error::Error for OverReadLimit {}

/// A TCP stream read within a [`ReadLimit`].
struct LimitedStream {
    stream: TcpStream,
    limit: ReadLimit,
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let counts = &this.limit.0;
        if counts.read.load(Ordering::SeqCst) >= counts.bound.load(Ordering::SeqCst) {
            return Poll::Ready(Err(std::io::Error::other(OverReadLimit)));
        }
        let before = buffer.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(context, buffer);
        counts.read.fetch_add(buffer.filled().len() - before, Ordering::SeqCst);
        polled
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(context, bytes)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(context)
    }
}

/// The open connections by peer address: how many each holds, and which may be shed.
#[derive(Default)]
struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    peers: HashMap<IpAddr, Peer>,
    /// Every peer with a connection that may be shed, by how many it has.
    by_sheddable: BTreeSet<(usize, IpAddr)>,
}

#[derive(Default)]
struct Peer {
    open: usize,
    /// Its connections that may be shed ([`Stage::sheddable`]), by stage and then age.
    sheddable: BTreeMap<(Stage, u64), Arc<Connection>>,
}

impl Inner {
    /// Changes `peer`'s sheddable connections by `change`, keeping [`Inner::by_sheddable`].
    fn change_sheddable(&mut self, peer: IpAddr, change: impl FnOnce(&mut BTreeMap<(Stage, u64), Arc<Connection>>)) {
        let Some(entry) = self.peers.get_mut(&peer) else {
            return;
        };
        let before = entry.sheddable.len();
        change(&mut entry.sheddable);
        let after = entry.sheddable.len();
        if before != after {
            self.by_sheddable.remove(&(before, peer));
            if after > 0 {
                self.by_sheddable.insert((after, peer));
            }
        }
    }
}

impl Inner {
    /// One connection of `peer` is no longer counted.
    fn leave(&mut self, peer: IpAddr) {
        if let Some(entry) = self.peers.get_mut(&peer) {
            entry.open -= 1;
            if entry.open == 0 {
                self.peers.remove(&peer);
            }
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `peer` holds fewer than `cap` connections.
    fn has_room(&self, peer: IpAddr, cap: usize) -> bool {
        self.lock().peers.get(&peer).is_none_or(|held| held.open < cap)
    }

    /// A new connection of `peer` holding `place`.
    fn open(self: &Arc<Self>, peer: IpAddr, place: OwnedSemaphorePermit) -> Arc<Connection> {
        self.open_at(peer, place, Instant::now())
    }

    fn open_at(self: &Arc<Self>, peer: IpAddr, place: OwnedSemaphorePermit, opened: Instant) -> Arc<Connection> {
        let mut inner = self.lock();
        inner.next_id += 1;
        let connection = Arc::new(Connection {
            id: inner.next_id,
            peer,
            opened,
            stage: AtomicU8::new(Stage::Silent as u8),
            place: Mutex::new(Some(place)),
            shed: Notify::new(),
            registry: self.clone(),
        });
        inner.peers.entry(peer).or_default().open += 1;
        let entry = connection.clone();
        inner.change_sheddable(peer, |sheddable| {
            sheddable.insert((Stage::Silent, entry.id), entry);
        });
        connection
    }

    /// Moves `connection` to `stage`; a trusted connection stays trusted, and a shed one (no
    /// longer counted) stays out of the registry.
    fn move_to(&self, connection: &Arc<Connection>, stage: Stage) {
        let mut inner = self.lock();
        let was = connection.stage();
        if was == stage || was == Stage::Trusted || !connection.holds_place() {
            return;
        }
        connection.stage.store(stage as u8, Ordering::Release);
        inner.change_sheddable(connection.peer, |sheddable| {
            sheddable.remove(&(was, connection.id));
            if stage.sheddable() {
                sheddable.insert((stage, connection.id), connection.clone());
            }
        });
    }

    /// Sheds a connection that may be shed — the oldest silent one, else the oldest still
    /// receiving, else the oldest idle one, of the peer with the most such connections — and
    /// answers its place.
    fn shed_one(&self) -> Option<OwnedSemaphorePermit> {
        let mut inner = self.lock();
        let &(_, peer) = inner.by_sheddable.last()?;
        Self::shed_from(&mut inner, peer)
    }

    /// Sheds `peer`'s oldest connection that has not delivered a request (silent before
    /// receiving), if it has one open for [`OWN_SHED_MIN_AGE`], and answers its place.
    fn shed_of(&self, peer: IpAddr) -> Option<OwnedSemaphorePermit> {
        let mut inner = self.lock();
        let (_, oldest) = inner.peers.get(&peer)?.sheddable.first_key_value()?;
        if oldest.opened.elapsed() < OWN_SHED_MIN_AGE {
            return None;
        }
        Self::shed_from(&mut inner, peer)
    }

    /// The shed connection leaves its peer's count at once; its task ends as soon as it runs.
    fn shed_from(inner: &mut Inner, peer: IpAddr) -> Option<OwnedSemaphorePermit> {
        let mut shed = None;
        inner.change_sheddable(peer, |sheddable| shed = sheddable.pop_first().map(|(_, entry)| entry));
        let shed = shed?;
        shed.shed.notify_one();
        let place = shed.take_place()?;
        inner.leave(peer);
        Some(place)
    }

    /// `connection` has ended.
    fn close(&self, connection: &Connection) {
        let mut inner = self.lock();
        inner.change_sheddable(connection.peer, |sheddable| {
            sheddable.remove(&(connection.stage(), connection.id));
        });
        // A shed connection gave its place away and left its peer's count then.
        if connection.take_place().is_some() {
            inner.leave(connection.peer);
        }
    }
}

/// Why the server closed a connection to protect the others (`cloudly_http_connections_closed_total`).
fn count_closed(reason: &'static str) {
    metrics::counter!("cloudly_http_connections_closed_total", "reason" => reason).increment(1);
}

/// Answers a connection over its peer's cap 503 `overloaded`, if its socket takes the answer at
/// once (it is never waited for), and closes it.
fn refuse_over_peer_cap(stream: TcpStream, peer: IpAddr, cap: usize) {
    count_closed("peer-cap");
    tracing::debug!(%peer, cap, "connection refused: its peer holds its cap");
    let _ = stream.try_write(OVER_PEER_CAP_ANSWER.as_bytes());
}

/// The whole answer of a connection over its address's cap, built once: an address re-opening
/// connections as fast as it can meets it thousands of times a second.
static OVER_PEER_CAP_ANSWER: LazyLock<String> = LazyLock::new(|| {
    let body = format!(
        r#"{{"error":{{"text":"too many connections from this address","data":{{"code":"overloaded","retryAfterMs":{OVERLOADED_RETRY_AFTER_MS}}}}}}}"#
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {OVERLOADED_RETRY_AFTER_SECONDS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
});

/// Serves `app` over HTTP/1.1 (with WebSocket upgrades) on `listener` within the connection limits
/// of this module. When `shutdown` resolves, stops accepting, lets every connection finish its
/// in-flight request and waits for all of them (the structure of axum's
/// `serve(..).with_graceful_shutdown(..)`, which exposes none of these bounds).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let places = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let open = Arc::new(Semaphore::new(places as usize));
    let registry = Arc::new(Registry::default());
    let (stop_sender, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_sender.send(true);
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = stopped(stop.clone()) => break,
        };
        let peer = peer.ip();
        let place = if registry.has_room(peer, limits.max_connections_per_peer) {
            None
        } else if let Some(place) = registry.shed_of(peer) {
            // At its address's cap the newcomer takes the place of that address's own oldest
            // connection without a whole request.
            count_closed("shed");
            Some(place)
        } else {
            refuse_over_peer_cap(stream, peer, limits.max_connections_per_peer);
            continue;
        };
        let place = match place.map_or_else(|| open.clone().try_acquire_owned(), Ok) {
            Ok(place) => place,
            Err(_) => match registry.shed_one() {
                Some(place) => {
                    count_closed("shed");
                    place
                }
                // Every open connection has delivered a request: wait for one to end.
                None => tokio::select! {
                    place = open.clone().acquire_owned() => place.expect("the connection semaphore is never closed"),
                    () = stopped(stop.clone()) => break,
                },
            },
        };
        // Only this loop opens connections, so the peer still has room.
        let connection = Open::new(registry.open(peer, place));
        let _ = stream.set_nodelay(true);
        let (app, builder, stop) = (app.clone(), builder.clone(), stop.clone());
        tokio::spawn(async move {
            serve_connection(stream, &connection.0, app, &builder, limits.first_head_timeout, stop).await;
        });
    }
    drop(listener);
    // Every connection holds a place until it ends (a shed one hands its place to the newcomer at
    // once): all places free means all connections ended.
    let _ = open.acquire_many(places).await;
    Ok(())
}

/// An open connection's hold on the registry and the open-connections gauge, given back when it
/// drops — also when its task unwinds from a panic, so no place or address count is lost (the
/// registry and the connection refer to each other until then).
struct Open(Arc<Connection>);

impl Open {
    fn new(connection: Arc<Connection>) -> Self {
        metrics::gauge!("cloudly_http_connections_open").increment(1.0);
        Open(connection)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.registry.close(&self.0);
        metrics::gauge!("cloudly_http_connections_open").decrement(1.0);
    }
}

/// Resolves when the server is told to stop.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Serves one connection until it ends, is shed, sends no request head within `first_head`, or
/// the server stops (then its in-flight request finishes first).
async fn serve_connection(
    stream: TcpStream,
    connection: &Arc<Connection>,
    app: Router,
    builder: &hyper::server::conn::http1::Builder,
    first_head: Duration,
    stop: watch::Receiver<bool>,
) {
    let marked = connection.clone();
    let limit = ReadLimit::new();
    let stream = LimitedStream { stream, limit: limit.clone() };
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        // A request without a body is whole with its head.
        if request.body().is_end_stream() {
            marked.delivered();
        } else {
            marked.head_arrived();
        }
        request.extensions_mut().insert(ConnectionMark(marked.clone()));
        request.extensions_mut().insert(limit.clone());
        let (answer, marked) = (app.clone().oneshot(request), marked.clone());
        async move {
            let response = answer.await;
            // An upgrade leaves the count once hyper hands its socket over; until then it is busy.
            if response.as_ref().is_ok_and(|response| response.status() != hyper::StatusCode::SWITCHING_PROTOCOLS) {
                marked.answered();
            }
            response
        }
    });
    let served = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
    let mut served = std::pin::pin!(served);
    let first_head_late = async {
        tokio::time::sleep(first_head).await;
        if connection.stage() != Stage::Silent {
            std::future::pending::<()>().await;
        }
    };
    let outcome = tokio::select! {
        outcome = served.as_mut() => outcome,
        () = stopped(stop) => {
            served.as_mut().graceful_shutdown();
            served.await
        }
        () = connection.shed.notified() => {
            tracing::debug!(peer = %connection.peer, "connection shed at the connection cap");
            Ok(())
        }
        () = first_head_late => {
            count_closed("first-head-timeout");
            tracing::debug!(peer = %connection.peer, "connection sent no request head in time");
            Ok(())
        }
    };
    if let Err(error) = outcome {
        tracing::debug!(%error, "connection ended");
    }
}

/// After a failed accept: the peer's own failures are skipped at once; anything else (out of
/// file descriptors) waits a moment before the next accept, as axum's `serve` does.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(error.kind(), ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset)
    {
        return;
    }
    tracing::error!(%error, "accept failed; retrying in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn place() -> OwnedSemaphorePermit {
        Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap()
    }

    fn holds_place(connection: &Connection) -> bool {
        connection.place.lock().unwrap().is_some()
    }

    #[test]
    fn a_peer_has_room_below_its_cap_and_again_when_one_closes() {
        let registry = Arc::new(Registry::default());
        let first = registry.open(peer(2), place());
        let _second = registry.open(peer(2), place());
        assert!(!registry.has_room(peer(2), 2), "at the cap");
        assert!(registry.has_room(peer(3), 2), "another peer has its own cap");
        registry.close(&first);
        assert!(registry.has_room(peer(2), 2), "room after a close");
    }

    #[test]
    fn the_peer_with_most_sheddable_connections_is_shed_first_silent_then_receiving_then_idle() {
        let registry = Arc::new(Registry::default());
        let idle = registry.open(peer(2), place());
        let busy = registry.open(peer(2), place());
        let trusted = registry.open(peer(2), place());
        let receiving = registry.open(peer(2), place());
        let silent = registry.open(peer(2), place());
        let newer_silent = registry.open(peer(2), place());
        let administrator = registry.open(peer(1), place());
        idle.head_arrived();
        idle.delivered();
        idle.answered();
        busy.head_arrived();
        busy.delivered();
        trusted.delivered();
        trusted.trusted();
        trusted.answered();
        receiving.head_arrived();
        let mut shed = Vec::new();
        while let Some(place) = registry.shed_one() {
            shed.push(place);
        }
        assert_eq!(shed.len(), 5, "every connection not busy and not trusted");
        assert!(
            [&administrator, &silent, &newer_silent, &receiving, &idle]
                .iter()
                .all(|connection| !holds_place(connection))
        );
        assert!(holds_place(&busy), "a connection answering a request keeps its place");
        assert!(holds_place(&trusted), "a trusted connection keeps its place, answered or not");
        // The busy one may be shed again once answered; the trusted one never.
        busy.answered();
        assert!(registry.shed_one().is_some());
        assert!(!holds_place(&busy));
        assert!(registry.shed_one().is_none());
        // The shed left their peer's count at once; closing them later counts nothing twice.
        assert_eq!(registry.lock().peers[&peer(2)].open, 1);
        registry.close(&silent);
        registry.close(&trusted);
        assert!(registry.lock().peers.is_empty());
        assert!(registry.lock().by_sheddable.is_empty());
    }

    #[test]
    fn silent_connections_are_shed_before_receiving_ones_and_those_before_idle_ones() {
        let registry = Arc::new(Registry::default());
        let idle = registry.open(peer(2), place());
        idle.delivered();
        idle.answered();
        let receiving = registry.open(peer(2), place());
        receiving.head_arrived();
        let silent = registry.open(peer(2), place());
        for expected in [&silent, &receiving, &idle] {
            assert!(registry.shed_one().is_some());
            assert!(!holds_place(expected));
        }
    }

    #[test]
    fn a_connection_whose_task_panics_gives_its_place_and_count_back() {
        let registry = Arc::new(Registry::default());
        let places = Arc::new(Semaphore::new(1));
        let open = Open::new(registry.open(peer(2), places.clone().try_acquire_owned().unwrap()));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = open;
            panic!("a handler panicked");
        }));
        assert!(unwound.is_err());
        assert_eq!(places.available_permits(), 1, "the place came back");
        assert!(registry.lock().peers.is_empty(), "the address count came back");
    }

    #[test]
    fn shedding_takes_from_the_peer_with_most_first() {
        let registry = Arc::new(Registry::default());
        let administrator = registry.open(peer(1), place());
        let attackers: Vec<_> = (0..3).map(|_| registry.open(peer(2), place())).collect();
        for _ in 0..2 {
            assert!(registry.shed_one().is_some());
        }
        assert!(holds_place(&administrator), "the address with one connection keeps it");
        assert_eq!(attackers.iter().filter(|connection| holds_place(connection)).count(), 1);
        assert!(registry.has_room(peer(2), 2), "the shed left their address's count");
        let own = registry.open(peer(2), place());
        assert!(registry.shed_of(peer(2)).is_none(), "a young connection is not shed for its own address");
        registry.close(&own);
        let _aged = registry.open_at(peer(3), place(), Instant::now() - OWN_SHED_MIN_AGE);
        assert!(registry.shed_of(peer(3)).is_some(), "an address at its cap sheds its own once it is old enough");
        assert!(holds_place(&administrator));
    }
}
