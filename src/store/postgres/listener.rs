//! The PostgreSQL end of the store's signals (`signals.rs`): one connection per store that
//! `LISTEN`s on one channel (sqlx's `PgListener` over a pool of one connection, its
//! `application_name` `cloudly-signals`) and hands every notification's payload on ([`Heard`]).
//!
//! **It reconnects, and says so.** Notifications sent while no connection listens are lost, so
//! after every reconnect it hands on [`Heard::Reconnected`] (not after the first connect, which
//! follows the first subscription by moments: what was sent before it is as if a node had
//! connected a moment later, and it converges on its next ask). The connection
//! is given up and opened again when the server closes it (a restart, `pg_terminate_backend`), when
//! a read fails, and when it stays quiet for [`QUIET_CHECK`] and then does not answer a `SELECT 1`
//! within [`ANSWER_TIMEOUT`] (a connection lost without a word); reconnects back off from
//! [`RECONNECT_INITIAL`] to [`RECONNECT_MAX`].

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use std::time::Duration;

/// How long the listener waits for a notification before it checks that its connection answers.
pub const QUIET_CHECK: Duration = Duration::from_secs(30);

/// How long that check, and a connect, may take.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The first wait before a reconnect after a failure; it doubles up to [`RECONNECT_MAX`].
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(250);

/// The longest wait between two reconnects.
pub const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// What the listener hands on.
pub(crate) enum Heard<'a> {
    /// A notification's payload.
    Payload(&'a str),
    /// The connection was opened again: notifications sent meanwhile are lost.
    Reconnected,
}

/// Listens on `channel` until the task is aborted (the store closes), handing what it hears to
/// `hand_on` and reconnecting as the module says.
pub(crate) async fn listen(options: PgConnectOptions, channel: &'static str, mut hand_on: impl FnMut(Heard<'_>)) {
    let options = options.application_name("cloudly-signals");
    let mut delay = RECONNECT_INITIAL;
    let mut first = true;
    loop {
        match tokio::time::timeout(ANSWER_TIMEOUT, connect(&options, channel)).await {
            Ok(Ok(mut listener)) => {
                tracing::info!(channel, "listening for signals of other controller processes");
                metrics::gauge!("cloudly_signal_listener_connected").set(1.0);
                delay = RECONNECT_INITIAL;
                if !std::mem::take(&mut first) {
                    hand_on(Heard::Reconnected);
                }
                let reason = follow(&mut listener, &mut hand_on).await;
                metrics::gauge!("cloudly_signal_listener_connected").set(0.0);
                metrics::counter!("cloudly_signal_listener_reconnects_total").increment(1);
                tracing::warn!(%reason, "the signal listener lost its PostgreSQL connection; reconnecting");
            }
            Ok(Err(error)) => tracing::warn!(%error, "the signal listener cannot connect to PostgreSQL"),
            Err(_) => tracing::warn!("the signal listener did not connect to PostgreSQL in time"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RECONNECT_MAX);
    }
}

/// A listener on a connection of its own, listening on the channel.
async fn connect(options: &PgConnectOptions, channel: &str) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(ANSWER_TIMEOUT)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    // A lost connection is reported (`Ok(None)`) and this module opens a new one itself.
    listener.eager_reconnect(false);
    listener.listen(channel).await?;
    Ok(listener)
}

/// Hands notifications to `hand_on` until the connection is lost; answers why.
async fn follow(listener: &mut PgListener, hand_on: &mut impl FnMut(Heard<'_>)) -> String {
    loop {
        // `try_recv` may be cancelled: sqlx reads a whole message or leaves the buffer as it was.
        match tokio::time::timeout(QUIET_CHECK, listener.try_recv()).await {
            Ok(Ok(Some(notification))) => {
                hand_on(Heard::Payload(notification.payload()));
            }
            Ok(Ok(None)) => return "the server closed the connection".to_owned(),
            Ok(Err(error)) => return error.to_string(),
            Err(_) => {
                let answered = tokio::time::timeout(ANSWER_TIMEOUT, sqlx::query("SELECT 1").execute(&mut *listener));
                match answered.await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return error.to_string(),
                    Err(_) => return "the connection did not answer".to_owned(),
                }
            }
        }
    }
}
