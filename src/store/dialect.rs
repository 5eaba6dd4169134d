//! The backends and the few places where their SQL differs. Every statement of the store is
//! written once (both databases take `$n` parameters); where PostgreSQL and SQLite need other
//! text, the statement asks its backend for it through one of the named hooks below.

/// Which backend a store is, and so which SQL dialect it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// Embedded SQLite.
    Sqlite,
}

impl Backend {
    /// How a write transaction begins. On PostgreSQL a plain `BEGIN`: the transaction's first
    /// statement locks the rows it judges against ([`Backend::lock_rows`]). On SQLite `BEGIN
    /// IMMEDIATE`, which takes the database's write lock at once, so writers (also in other
    /// processes that open the same file) serialize there, waiting up to the busy timeout, and a
    /// transaction never has to upgrade a read lock (which SQLite answers with `SQLITE_BUSY` at
    /// once).
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Backend::Postgres => "BEGIN",
            Backend::Sqlite => "BEGIN IMMEDIATE",
        }
    }

    /// How a read-only transaction whose statements all see one snapshot begins.
    pub(crate) fn begin_snapshot(self) -> &'static str {
        match self {
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            Backend::Sqlite => "BEGIN",
        }
    }

    /// The suffix of a `SELECT` that holds the rows it reads against other writers until the
    /// transaction ends: `FOR UPDATE` on PostgreSQL; nothing on SQLite, whose write transaction
    /// already holds the database's write lock.
    pub(crate) fn lock_rows(self) -> &'static str {
        match self {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        }
    }

    /// The suffix of an `ORDER BY` text column that orders by bytes: PostgreSQL orders by the
    /// database's collation unless told `COLLATE "C"`; SQLite's default collation is bytewise.
    pub(crate) fn bytewise(self) -> &'static str {
        match self {
            Backend::Postgres => " COLLATE \"C\"",
            Backend::Sqlite => "",
        }
    }

    /// The text member at `path` (object keys, outermost first) of the JSON text in `column`,
    /// NULL when absent: for a join on a reference a stored record holds. PostgreSQL reads the
    /// text as `json` (checked, not re-encoded as `jsonb` would be).
    pub(crate) fn json_text(self, column: &str, path: &[&str]) -> String {
        match self {
            Backend::Postgres => format!("({column}::json #>> '{{{}}}')", path.join(",")),
            Backend::Sqlite => format!("json_extract({column}, '$.{}')", path.join(".")),
        }
    }

    /// A query answering `present`: whether sqlx's `_sqlx_migrations` bookkeeping table exists.
    pub(crate) fn migrations_table_exists(self) -> &'static str {
        match self {
            Backend::Postgres => "SELECT to_regclass('_sqlx_migrations') IS NOT NULL AS present",
            Backend::Sqlite => {
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations') \
                 AS present"
            }
        }
    }

    /// True when the write of an accepted designation is one statement (PostgreSQL's
    /// data-modifying `WITH`, atomic without a transaction, one round trip); false when it is
    /// several statements that need a write transaction (SQLite has no data-modifying `WITH`, and
    /// its statements cost no round trip).
    pub(crate) fn designation_write_is_one_statement(self) -> bool {
        match self {
            Backend::Postgres => true,
            Backend::Sqlite => false,
        }
    }
}
