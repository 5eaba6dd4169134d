//! How the store runs SQL on either backend: the pool of a backend ([`Pool`]), a connection
//! checked out of it ([`Connection`]) or a transaction on one ([`Transaction`]), a statement with
//! its typed arguments ([`Statement`]) and a row it answers ([`Row`]) with typed accessors. Every
//! statement is written once as `&'static str` (or, where the dialect differs, composed with a
//! hook of [`Backend`]) and runs on both backends; each record's reader is written once, next to
//! the feature that owns the record, against [`Row`] and its typed accessors. A whole-cluster read brings each head's record by one
//! primary-key probe ([`head_record`]).

use super::codec::{counter_from_sql, hash_from_sql, read_signed};
use super::dialect::Backend;
use super::postgres::pool::{self, PooledConnection, note_statement_failure};
use super::{PoolStatus, StoreError};
use crate::contract::signing::Signed;
use crate::contract::{DigestedRecord, Id, NodeId, Protocol, Sha256Digest};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Database, Decode, Encode, Postgres, Row as _, Sqlite, Type};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The connection pool of a store's backend.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    /// PostgreSQL: `deadpool` over sqlx connections (`postgres/pool.rs`).
    Postgres(pool::Pool),
    /// SQLite: sqlx's own pool, and the database file it opened (`None` in memory).
    Sqlite(SqlitePool, Option<Arc<DatabaseFile>>),
}

/// Counts a task waiting for a pool connection (gauge `cloudly_store_pool_waiting`) while it is
/// alive, so a wait cut off by a request timeout is uncounted too.
struct Waiting;

impl Waiting {
    fn begin() -> Waiting {
        metrics::gauge!("cloudly_store_pool_waiting").increment(1.0);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        metrics::gauge!("cloudly_store_pool_waiting").decrement(1.0);
    }
}

/// Awaits `acquire` (a connection from a pool) as one waiting task; a failure to get one is
/// counted (`cloudly_store_pool_acquire_failures_total`) when `failed` says it was the pool's.
async fn acquire<T, E: Into<StoreError>>(
    acquire: impl Future<Output = Result<T, E>>,
    failed: impl Fn(&E) -> bool,
) -> Result<T, StoreError> {
    let waiting = Waiting::begin();
    let acquired = acquire.await;
    drop(waiting);
    acquired.map_err(|error| {
        if failed(&error) {
            metrics::counter!("cloudly_store_pool_acquire_failures_total").increment(1);
        }
        error.into()
    })
}

/// The database file this process opened: its path and the file system's identity of the file
/// (device and inode) when it was opened.
#[derive(Debug)]
pub(crate) struct DatabaseFile {
    path: PathBuf,
    identity: (u64, u64),
}

impl DatabaseFile {
    pub(crate) fn opened(path: &Path) -> Result<DatabaseFile, StoreError> {
        let metadata = std::fs::metadata(path)
            .map_err(|error| StoreError::Unavailable(format!("cannot read the SQLite database file: {error}")))?;
        Ok(DatabaseFile { path: path.to_owned(), identity: file_identity(&metadata) })
    }

    /// `Ok` while the path still names the file this process opened; else why not.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        let path = self.path.display();
        match std::fs::metadata(&self.path) {
            Ok(metadata) if file_identity(&metadata) == self.identity => Ok(()),
            Ok(_) => Err(StoreError::Unavailable(format!(
                "the SQLite database file {path} was replaced by another file after this process opened it; \
                 restart the controller to use the new file"
            ))),
            Err(error) => Err(StoreError::Unavailable(format!(
                "the SQLite database file {path} is gone ({error}); this process refuses every statement, since \
                 its writes would reach no file a restart reads: put the file back or restart the controller"
            ))),
        }
    }
}

#[cfg(unix)]
fn file_identity(metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

#[cfg(not(unix))]
fn file_identity(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

/// Refuses a SQLite connection once the database file it opened is gone or replaced
/// ([`DatabaseFile`]).
fn check_file(file: Option<&DatabaseFile>) -> Result<(), StoreError> {
    file.map_or(Ok(()), DatabaseFile::check)
}

/// Whether a SQLite pool error is the pool's (no connection in time, or closed).
fn sqlite_pool_failed(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed)
}

impl Pool {
    /// What the pool holds now.
    pub(crate) fn status(&self) -> PoolStatus {
        match self {
            Pool::Postgres(pool) => pool.status(),
            Pool::Sqlite(pool, _) => {
                let (size, idle) = (pool.size() as usize, pool.num_idle());
                let max = pool.options().get_max_connections() as usize;
                PoolStatus { in_use: size.saturating_sub(idle), idle, max }
            }
        }
    }

    /// The backend, and so the dialect, of this pool.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Pool::Postgres(_) => Backend::Postgres,
            Pool::Sqlite(..) => Backend::Sqlite,
        }
    }

    /// A connection for statements outside a transaction (each statement is atomic on its own).
    pub(crate) async fn connection(&self) -> Result<Connection, StoreError> {
        Ok(match self {
            Pool::Postgres(pool) => Connection::Postgres(acquire(pool.acquire(), |_| true).await?),
            Pool::Sqlite(pool, file) => {
                check_file(file.as_deref())?;
                Connection::Sqlite(acquire(pool.acquire(), sqlite_pool_failed).await?)
            }
        })
    }

    /// A write transaction ([`Backend::begin_write`]) on a connection of its own.
    pub(crate) async fn begin_write(&self) -> Result<Transaction, StoreError> {
        self.begin(self.backend().begin_write()).await
    }

    /// A read-only transaction whose statements see one snapshot ([`Backend::begin_snapshot`]).
    pub(crate) async fn begin_snapshot(&self) -> Result<Transaction, StoreError> {
        self.begin(self.backend().begin_snapshot()).await
    }

    async fn begin(&self, statement: &'static str) -> Result<Transaction, StoreError> {
        Ok(match self {
            Pool::Postgres(pool) => {
                let mut connection = acquire(pool.acquire(), |_| true).await?;
                connection.begin(statement).await?;
                Transaction::Postgres(connection)
            }
            Pool::Sqlite(pool, file) => {
                check_file(file.as_deref())?;
                Transaction::Sqlite(acquire(pool.begin_with(statement), sqlite_pool_failed).await?)
            }
        })
    }

    /// Closes the pool: idle connections now, connections in use when they are returned.
    pub(crate) async fn close(&self) {
        match self {
            Pool::Postgres(pool) => pool.close().await,
            Pool::Sqlite(pool, _) => pool.close().await,
        }
    }
}

/// A connection checked out of a [`Pool`]; returned to it when dropped.
pub(crate) enum Connection {
    /// A PostgreSQL connection.
    Postgres(PooledConnection),
    /// A SQLite connection.
    Sqlite(sqlx::pool::PoolConnection<Sqlite>),
}

/// A transaction on a connection checked out for it. It ends with [`Transaction::commit`] or
/// [`Transaction::rollback`]; dropped before either, it is rolled back — on PostgreSQL by closing
/// the connection, so a cancelled request never leaves its row locks on a pooled connection
/// (`postgres/pool.rs`), on SQLite by sqlx's own rollback of a dropped transaction.
pub(crate) enum Transaction {
    /// A PostgreSQL connection inside the transaction it began.
    Postgres(PooledConnection),
    /// A SQLite transaction owning its pooled connection.
    Sqlite(sqlx::Transaction<'static, Sqlite>),
}

impl Transaction {
    /// Commits.
    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        match self {
            Transaction::Postgres(mut connection) => connection.commit().await?,
            Transaction::Sqlite(transaction) => transaction.commit().await?,
        }
        Ok(())
    }

    /// Rolls back.
    pub(crate) async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Transaction::Postgres(mut connection) => connection.rollback().await?,
            Transaction::Sqlite(transaction) => transaction.rollback().await?,
        }
        Ok(())
    }
}

/// The backend connection a statement runs on.
pub(crate) enum ConnectionRef<'c> {
    /// PostgreSQL.
    Postgres(&'c mut PgConnection),
    /// SQLite.
    Sqlite(&'c mut SqliteConnection),
}

/// The end of a write that holds a cluster's lock ([`super::LockedAssignments`],
/// [`super::LockedDesignation`], [`super::LockedNetwork`], [`super::projections::LockedProjections`]):
/// commit its writes, or roll them back; either lets go of the lock.
#[async_trait::async_trait]
pub trait LockedWrite: Send {
    /// Commits the writes.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;

    /// Rolls back and lets go of the lock.
    async fn rollback(self: Box<Self>) -> Result<(), StoreError>;
}

/// A locked write whose writes all went to one [`Transaction`]: it ends as that transaction does.
pub(crate) trait InTransaction: Send {
    /// The transaction, for its end.
    fn into_transaction(self: Box<Self>) -> Transaction;
}

#[async_trait::async_trait]
impl<Locked: InTransaction> LockedWrite for Locked {
    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.into_transaction().commit().await
    }

    async fn rollback(self: Box<Self>) -> Result<(), StoreError> {
        self.into_transaction().rollback().await
    }
}

/// What statements run on: a [`Connection`] or a [`Transaction`].
pub(crate) trait HoldsConnection: Send {
    /// The connection, for one statement.
    fn connection(&mut self) -> ConnectionRef<'_>;
}

/// The backend of a connection or transaction.
pub(crate) fn backend_of(on: &mut impl HoldsConnection) -> Backend {
    match on.connection() {
        ConnectionRef::Postgres(_) => Backend::Postgres,
        ConnectionRef::Sqlite(_) => Backend::Sqlite,
    }
}

impl HoldsConnection for Connection {
    fn connection(&mut self) -> ConnectionRef<'_> {
        match self {
            Connection::Postgres(connection) => ConnectionRef::Postgres(connection),
            Connection::Sqlite(connection) => ConnectionRef::Sqlite(connection),
        }
    }
}

impl HoldsConnection for Transaction {
    fn connection(&mut self) -> ConnectionRef<'_> {
        match self {
            Transaction::Postgres(connection) => ConnectionRef::Postgres(connection),
            Transaction::Sqlite(transaction) => ConnectionRef::Sqlite(transaction),
        }
    }
}

/// One typed argument of a [`Statement`].
enum Argument<'a> {
    Text(Option<&'a str>),
    Integer(Option<i64>),
    Boolean(bool),
    Bytes(&'a [u8]),
}

/// One SQL statement with its arguments (`$1`, `$2`, … in the order they are added).
pub(crate) struct Statement<'a> {
    sql: Sql,
    arguments: Vec<Argument<'a>>,
}

/// The text of a statement: written once, or composed with a dialect hook.
enum Sql {
    Written(&'static str),
    Composed(String),
}

impl<'a> Statement<'a> {
    /// A statement whose text is the same on both backends.
    pub(crate) fn new(sql: &'static str) -> Self {
        Statement { sql: Sql::Written(sql), arguments: Vec::new() }
    }

    /// A statement whose text was composed with a dialect hook of [`Backend`].
    pub(crate) fn composed(sql: String) -> Self {
        Statement { sql: Sql::Composed(sql), arguments: Vec::new() }
    }

    /// Adds a text argument.
    pub(crate) fn text(self, value: &'a str) -> Self {
        self.optional_text(Some(value))
    }

    /// Adds a text argument that may be NULL.
    pub(crate) fn optional_text(mut self, value: Option<&'a str>) -> Self {
        self.arguments.push(Argument::Text(value));
        self
    }

    /// Adds an integer argument.
    pub(crate) fn integer(self, value: i64) -> Self {
        self.optional_integer(Some(value))
    }

    /// Adds an integer argument that may be NULL.
    pub(crate) fn optional_integer(mut self, value: Option<i64>) -> Self {
        self.arguments.push(Argument::Integer(value));
        self
    }

    /// Adds a boolean argument.
    pub(crate) fn boolean(mut self, value: bool) -> Self {
        self.arguments.push(Argument::Boolean(value));
        self
    }

    /// Adds a byte string argument.
    pub(crate) fn bytes(mut self, value: &'a [u8]) -> Self {
        self.arguments.push(Argument::Bytes(value));
        self
    }

    /// The statement as an sqlx query of database `DB`, every argument bound.
    fn query<DB: Database>(self) -> sqlx::query::Query<'static, DB, <DB as Database>::Arguments>
    where
        for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
        for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
        for<'t> bool: Encode<'t, DB> + Type<DB>,
        for<'t> &'t [u8]: Encode<'t, DB> + Type<DB>,
    {
        let mut query = match self.sql {
            Sql::Written(sql) => sqlx::query(sql),
            Sql::Composed(sql) => sqlx::query(AssertSqlSafe(sql)),
        };
        for argument in self.arguments {
            query = match argument {
                Argument::Text(value) => query.bind(value),
                Argument::Integer(value) => query.bind(value),
                Argument::Boolean(value) => query.bind(value),
                Argument::Bytes(value) => query.bind(value),
            };
        }
        query
    }

    /// Runs the statement; answers how many rows it changed.
    pub(crate) async fn execute(self, on: &mut impl HoldsConnection) -> Result<u64, StoreError> {
        let _timed = StatementTimer::start(&self.sql);
        Ok(match on.connection() {
            ConnectionRef::Postgres(connection) => {
                self.query::<Postgres>().execute(connection).await.inspect_err(note_statement_failure)?.rows_affected()
            }
            ConnectionRef::Sqlite(connection) => self.query::<Sqlite>().execute(connection).await?.rows_affected(),
        })
    }

    /// Runs a write that the lock its caller holds makes sure changes exactly one row; any other
    /// count means that row moved under the lock: [`StoreError::Unavailable`] with `moved`.
    pub(crate) async fn execute_one(self, on: &mut impl HoldsConnection, moved: &str) -> Result<(), StoreError> {
        match self.execute(on).await? {
            1 => Ok(()),
            _ => Err(StoreError::Unavailable(moved.into())),
        }
    }

    /// Runs the statement; answers its first row, if any.
    ///
    /// On SQLite the statement is stepped to its end (sqlx's `fetch_optional` stops after the
    /// first row and resets the statement, ignoring what the reset answers): an autocommitted
    /// `INSERT … RETURNING` commits only at its end, so a commit that fails — a full or read-only
    /// disk — would otherwise answer the row of a write that was never stored.
    pub(crate) async fn fetch_optional(self, on: &mut impl HoldsConnection) -> Result<Option<Row>, StoreError> {
        let _timed = StatementTimer::start(&self.sql);
        Ok(match on.connection() {
            ConnectionRef::Postgres(connection) => self
                .query::<Postgres>()
                .fetch_optional(connection)
                .await
                .inspect_err(note_statement_failure)?
                .map(Row::Postgres),
            ConnectionRef::Sqlite(connection) => {
                self.query::<Sqlite>().fetch_all(connection).await?.into_iter().next().map(Row::Sqlite)
            }
        })
    }

    /// Runs the statement; answers its first row (no row is an error). On SQLite the statement
    /// is stepped to its end, as in [`Statement::fetch_optional`].
    pub(crate) async fn fetch_one(self, on: &mut impl HoldsConnection) -> Result<Row, StoreError> {
        self.fetch_optional(on).await?.ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    /// Runs the statement; answers its first row, if any, as `read` reads it.
    pub(crate) async fn fetch_optional_as<T>(
        self,
        on: &mut impl HoldsConnection,
        read: impl FnOnce(&Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        self.fetch_optional(on).await?.map(|row| read(&row)).transpose()
    }

    /// Runs the statement; answers every row as `read` reads it, collected in the order they came
    /// (a `Vec`, a set: whatever the caller asks for).
    pub(crate) async fn fetch_all_as<T, Collection: FromIterator<T>>(
        self,
        on: &mut impl HoldsConnection,
        read: impl FnMut(&Row) -> Result<T, StoreError>,
    ) -> Result<Collection, StoreError> {
        self.fetch_all(on).await?.iter().map(read).collect()
    }

    /// Runs the statement; answers every row.
    pub(crate) async fn fetch_all(self, on: &mut impl HoldsConnection) -> Result<Vec<Row>, StoreError> {
        let _timed = StatementTimer::start(&self.sql);
        Ok(match on.connection() {
            ConnectionRef::Postgres(connection) => {
                let rows = self.query::<Postgres>().fetch_all(connection).await.inspect_err(note_statement_failure)?;
                rows.into_iter().map(Row::Postgres).collect()
            }
            ConnectionRef::Sqlite(connection) => {
                self.query::<Sqlite>().fetch_all(connection).await?.into_iter().map(Row::Sqlite).collect()
            }
        })
    }
}

/// A statement text composed with dialect hooks, once per backend: `compose` runs the first time
/// a backend asks, and every later use is the same `&'static str` (a [`Statement::new`] text,
/// whose metric label is found by its address).
pub(crate) struct PerBackend {
    compose: fn(Backend) -> String,
    postgres: std::sync::OnceLock<String>,
    sqlite: std::sync::OnceLock<String>,
}

impl PerBackend {
    /// Texts that `compose` writes for a backend.
    pub(crate) const fn new(compose: fn(Backend) -> String) -> Self {
        PerBackend { compose, postgres: std::sync::OnceLock::new(), sqlite: std::sync::OnceLock::new() }
    }

    /// The statement in `backend`'s dialect.
    pub(crate) fn statement<'a>(&'static self, backend: Backend) -> Statement<'a> {
        let text = match backend {
            Backend::Postgres => &self.postgres,
            Backend::Sqlite => &self.sqlite,
        };
        Statement::new(text.get_or_init(|| (self.compose)(backend)))
    }
}

/// Times one statement, from its start until it answered or was abandoned, into the histogram
/// `cloudly_store_operation_duration_seconds{operation}` ([`operation_label`]).
struct StatementTimer {
    operation: &'static str,
    started: std::time::Instant,
}

impl StatementTimer {
    fn start(sql: &Sql) -> StatementTimer {
        let operation = match sql {
            Sql::Written(text) => written_operation_label(text),
            Sql::Composed(text) => operation_label(text),
        };
        StatementTimer { operation, started: std::time::Instant::now() }
    }
}

impl Drop for StatementTimer {
    fn drop(&mut self) {
        metrics::histogram!("cloudly_store_operation_duration_seconds", "operation" => self.operation)
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// [`operation_label`] of a written statement, found by the address of its text after the first
/// time (a written statement's text is one `&'static str`).
fn written_operation_label(sql: &'static str) -> &'static str {
    static WRITTEN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<usize, &'static str>>> =
        std::sync::OnceLock::new();
    let written = WRITTEN.get_or_init(Default::default);
    let address = sql.as_ptr() as usize;
    if let Some(label) = written.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&address) {
        return label;
    }
    let label = operation_label(sql);
    written.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(address, label);
    label
}

/// The record row of each head `h`, as [`head_record`] brings it.
pub(crate) struct HeadRecord {
    /// The select-list items: `alias.column` for each column.
    pub(crate) columns: String,
    /// What follows the heads table `h` in `FROM`.
    pub(crate) join: String,
}

/// `columns` of the generation that each row `h` of a heads table names in `records` (keyed by
/// `cluster_id`, `key`, `generation`), under `alias`: a head without its record reads NULL.
///
/// **A whole-cluster read brings each head's record by one primary-key probe, whatever the
/// statistics say.** With a plain join, PostgreSQL plans from its statistics; when they
/// under-count a cluster (one that just grew, or one far larger than the others), it picks a
/// nested loop whose inner side scans every record of the cluster for each head — quadratic: 2 s
/// for 4 096 leases, measured by `benches/projection_store.rs`. So on PostgreSQL the record is a
/// `LATERAL` subquery on the full key with `LIMIT 1`, which the planner never flattens into a
/// join (one probe per head for all columns; a scalar subquery per column cost a probe per
/// column: 8 ms against 2.6 ms for 480 heads of nine columns). SQLite's planner probes the
/// primary key of a join on the full key itself.
pub(crate) fn head_record(backend: Backend, records: &str, alias: &str, key: &str, columns: &[&str]) -> HeadRecord {
    let columns = columns.iter().map(|column| format!("{alias}.{column}")).collect::<Vec<_>>().join(", ");
    let on_key =
        format!("{alias}.cluster_id = h.cluster_id AND {alias}.{key} = h.{key} AND {alias}.generation = h.generation");
    let join = match backend {
        Backend::Postgres => {
            format!(
                "LEFT JOIN LATERAL (SELECT {columns} FROM {records} {alias} WHERE {on_key} LIMIT 1) {alias} ON TRUE"
            )
        }
        Backend::Sqlite => format!("LEFT JOIN {records} {alias} ON {on_key}"),
    };
    HeadRecord { columns, join }
}

/// `rows` rows of `columns` placeholders each, numbered from `$2` on (`$1` is the cluster id),
/// each row opened by `lead` and closed by `tail`: `(lead$2, $3tail), (lead$4, $5tail)`.
pub(crate) fn placeholder_rows(rows: usize, columns: usize, lead: &str, tail: &str) -> String {
    (0..rows)
        .map(|row| {
            let placeholders: Vec<String> =
                (0..columns).map(|column| format!("${}", 2 + row * columns + column)).collect();
            format!("({lead}{}{tail})", placeholders.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Most ids one statement of a scoped read names (`IN (VALUES …)`, one parameter each).
const IDS_PER_STATEMENT: usize = 512;

/// `column IN (VALUES ($2), ($3), …)` for `count` ids after the cluster id.
fn in_ids(column: &str, count: usize) -> String {
    format!("{column} IN (VALUES {})", placeholder_rows(count, 1, "", ""))
}

/// Runs `sql` (a statement whose `$1` is the cluster id and whose `{ids}` is replaced by an
/// [`in_ids`] list) once per [`IDS_PER_STATEMENT`] of `ids`, answering every row.
pub(crate) async fn rows_by_ids(
    on: &mut impl HoldsConnection,
    cluster_id: &crate::contract::Id,
    sql: &str,
    column: &str,
    ids: &[&str],
) -> Result<Vec<super::sql::Row>, StoreError> {
    let mut rows = Vec::new();
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        let mut statement =
            Statement::composed(sql.replace("{ids}", &in_ids(column, chunk.len()))).text(cluster_id.as_str());
        for id in chunk {
            statement = statement.text(id);
        }
        rows.extend(statement.fetch_all(on).await?);
    }
    Ok(rows)
}

/// The store operation a statement performs, as a bounded metric label: its verb and the table
/// (or first common table expression) it works on, lowercase — `select clusters`,
/// `insert designation_generations`, `update node_sessions`, `delete registrations`,
/// `with head`. Every statement is one of the store's own texts, so the labels are few; each is
/// kept once for the life of the process.
pub(crate) fn operation_label(sql: &str) -> &'static str {
    static LABELS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<&'static str>>> =
        std::sync::OnceLock::new();
    let mut words = sql
        .split(|character: char| !(character.is_ascii_alphanumeric() || character == '_'))
        .filter(|word| !word.is_empty());
    let verb = words.next().unwrap_or_default().to_ascii_lowercase();
    let mut after = |keyword: &str| {
        words.by_ref().take_while(|word| !word.eq_ignore_ascii_case(keyword)).for_each(drop);
        words.next()
    };
    let object = match verb.as_str() {
        "select" | "delete" => after("from"),
        "insert" => after("into"),
        "update" | "with" => words.next(),
        _ => None,
    };
    let label = match object {
        Some(object) => format!("{verb} {}", object.to_ascii_lowercase()),
        None => verb,
    };
    let mut labels = LABELS.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match labels.get(label.as_str()) {
        Some(kept) => kept,
        None => {
            let kept: &'static str = Box::leak(label.into_boxed_str());
            labels.insert(kept);
            kept
        }
    }
}

/// A row a [`Statement`] answered, read by column name with typed accessors.
pub(crate) enum Row {
    /// A PostgreSQL row.
    Postgres(PgRow),
    /// A SQLite row.
    Sqlite(SqliteRow),
}

impl Row {
    /// A column of a type both backends decode.
    fn get<T>(&self, column: &str) -> Result<T, StoreError>
    where
        T: for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>,
    {
        Ok(match self {
            Row::Postgres(row) => row.try_get(column)?,
            Row::Sqlite(row) => row.try_get(column)?,
        })
    }

    /// A `TEXT NOT NULL` column.
    pub(crate) fn text(&self, column: &str) -> Result<String, StoreError> {
        self.get(column)
    }

    /// A nullable `TEXT` column.
    pub(crate) fn optional_text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }

    /// An integer column (`BIGINT` or `INTEGER` on PostgreSQL, `INTEGER` on SQLite).
    pub(crate) fn integer(&self, column: &str) -> Result<i64, StoreError> {
        self.optional_integer(column)?.ok_or_else(|| StoreError::Corrupt(format!("stored {column} is NULL")))
    }

    /// A nullable integer column.
    pub(crate) fn optional_integer(&self, column: &str) -> Result<Option<i64>, StoreError> {
        match self {
            // A PostgreSQL `INTEGER` (4 bytes) does not decode as an i64.
            Row::Postgres(row) => match row.try_get::<Option<i64>, _>(column) {
                Ok(value) => Ok(value),
                Err(wide) => {
                    row.try_get::<Option<i32>, _>(column).map(|value| value.map(i64::from)).map_err(|_| wide.into())
                }
            },
            Row::Sqlite(row) => Ok(row.try_get(column)?),
        }
    }

    /// A `BOOLEAN` column (an integer on SQLite).
    pub(crate) fn boolean(&self, column: &str) -> Result<bool, StoreError> {
        self.get(column)
    }

    /// A `BYTEA` / `BLOB` column.
    pub(crate) fn bytes(&self, column: &str) -> Result<Vec<u8>, StoreError> {
        self.get(column)
    }

    /// A `TEXT` column holding an [`Id`]; `what` names it in the corruption error.
    pub(crate) fn id(&self, column: &str, what: &str) -> Result<Id, StoreError> {
        Id::parse(&self.text(column)?).ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not an Id")))
    }

    /// A `TEXT` column holding a [`NodeId`].
    pub(crate) fn node_id(&self, column: &str, what: &str) -> Result<NodeId, StoreError> {
        NodeId::parse(&self.text(column)?).ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not a NodeId")))
    }

    /// A `TEXT` column holding a `sha256:…` digest.
    pub(crate) fn digest(&self, column: &str, what: &str) -> Result<Sha256Digest, StoreError> {
        Sha256Digest::parse(&self.text(column)?)
            .ok_or_else(|| StoreError::Corrupt(format!("stored {what} is not a digest")))
    }

    /// An integer column holding a counter (0 to 2^53 − 1), such as a revision or an epoch.
    pub(crate) fn counter(&self, column: &str, what: &str) -> Result<u64, StoreError> {
        counter_from_sql(self.integer(column)?, what)
    }

    /// A column holding a 32-byte hash.
    pub(crate) fn hash(&self, column: &str, what: &str) -> Result<[u8; 32], StoreError> {
        hash_from_sql(self.bytes(column)?, what)
    }

    /// A nullable column holding a 32-byte hash.
    pub(crate) fn optional_hash(&self, column: &str, what: &str) -> Result<Option<[u8; 32]>, StoreError> {
        self.get::<Option<Vec<u8>>>(column)?.map(|bytes| hash_from_sql(bytes, what)).transpose()
    }

    /// A `protocol` column: `tcp` or `udp`.
    pub(crate) fn protocol(&self, what: &str) -> Result<Protocol, StoreError> {
        Protocol::parse(&self.text("protocol")?)
            .ok_or_else(|| StoreError::Corrupt(format!("stored {what} protocol is not tcp or udp")))
    }

    /// A `port` column: 1..=65535.
    pub(crate) fn port(&self, what: &str) -> Result<u16, StoreError> {
        u16::try_from(self.integer("port")?)
            .ok()
            .filter(|port| *port >= 1)
            .ok_or_else(|| StoreError::Corrupt(format!("stored {what} port is not a port")))
    }

    /// A signed record of kind `T`: `record` (the payload, read through `snapshot` with its
    /// digest checked) and `signature` (the signature block).
    pub(crate) fn signed<T: DigestedRecord>(
        &self,
        kind: &str,
        snapshot: impl FnOnce(&serde_json::Value) -> Option<T>,
    ) -> Result<Signed<T>, StoreError> {
        read_signed(&self.text("record")?, &self.text("signature")?, kind, snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::operation_label;

    #[test]
    fn a_statement_is_labelled_by_its_verb_and_table() {
        assert_eq!(operation_label("SELECT a, b FROM clusters WHERE id = $1"), "select clusters");
        assert_eq!(operation_label("INSERT INTO node_sessions (a) VALUES ($1)"), "insert node_sessions");
        assert_eq!(operation_label("UPDATE clusters SET a = $1"), "update clusters");
        assert_eq!(operation_label("DELETE FROM registrations WHERE x"), "delete registrations");
        assert_eq!(operation_label("WITH head AS (UPDATE clusters SET a = 1) SELECT 1"), "with head");
        assert_eq!(operation_label("SELECT 1"), "select");
        assert!(std::ptr::eq(operation_label("SELECT 1"), operation_label("select 2")), "kept once");
    }
}
