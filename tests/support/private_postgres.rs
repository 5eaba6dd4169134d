//! A PostgreSQL server of one test's own, which the test may stop and start at will without
//! touching the machine's shared server: `initdb` into a temporary directory, `pg_ctl start` on a
//! free port with its socket in that directory. Dropped (also when the test panics), it stops the
//! server at once and removes the directory.
//!
//! `initdb` refuses to run as root; as root every PostgreSQL command runs as the `postgres` user
//! (`runuser -u postgres --`), with the directory owned by it. Missing PostgreSQL binaries fail
//! the test with the reason; it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// How a stop ends the server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// `pg_ctl -m fast`: sessions are terminated, the server shuts down cleanly.
    Fast,
    /// `pg_ctl -m immediate`: the server quits at once, as in a crash (recovery at the next start).
    Immediate,
}

impl StopMode {
    fn flag(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// A private PostgreSQL server.
pub struct PrivatePostgres {
    /// The directory holding the data directory, the socket and the server log.
    dir: PathBuf,
    /// Where `initdb` and `pg_ctl` are.
    bin: PathBuf,
    /// The TCP port it listens on (127.0.0.1).
    pub port: u16,
    /// True when the commands run as the `postgres` user (this process is root).
    as_postgres: bool,
}

impl PrivatePostgres {
    /// Initializes and starts a new server on a free port.
    pub fn start() -> PrivatePostgres {
        let bin = postgres_bin_dir();
        let as_postgres = running_as_root();
        let dir = std::env::temp_dir().join(format!("cloudly-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let server = PrivatePostgres { dir, bin, port: free_port(), as_postgres };
        if as_postgres {
            let chowned = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&server.dir).status();
            assert!(
                chowned.is_ok_and(|status| status.success()),
                "chown of {} to postgres failed: a private PostgreSQL server needs the postgres user when the \
                 tests run as root",
                server.dir.display()
            );
        }
        let data = server.data_dir();
        let initialized = server.run("initdb", &["-D", path_text(&data), "-A", "trust", "-U", "postgres", "--no-sync"]);
        assert!(initialized.status.success(), "initdb failed:\n{}", describe(&initialized));
        server.start_again();
        server
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The store URL of its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the (stopped) server on its port and waits until it accepts connections. `fsync` is
    /// off (only the server is ever stopped, never the machine), but commits stay synchronous: a
    /// commit the server answered survives its crash (`-m immediate`).
    pub fn start_again(&self) {
        let options =
            format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", self.port, path_text(&self.dir));
        let log = self.dir.join("server.log");
        let started = self.run(
            "pg_ctl",
            &["-D", path_text(&self.data_dir()), "-l", path_text(&log), "-o", &options, "-w", "-t", "60", "start"],
        );
        assert!(
            started.status.success(),
            "pg_ctl start failed:\n{}\nserver log:\n{}",
            describe(&started),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server and waits until it is down.
    pub fn stop(&self, mode: StopMode) {
        let stopped =
            self.run("pg_ctl", &["-D", path_text(&self.data_dir()), "-m", mode.flag(), "-w", "-t", "60", "stop"]);
        assert!(stopped.status.success(), "pg_ctl stop -m {} failed:\n{}", mode.flag(), describe(&stopped));
    }

    /// Runs one PostgreSQL program of [`Self::bin`] (as `postgres` when root).
    fn run(&self, program: &str, arguments: &[&str]) -> Output {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&path);
            command
        } else {
            Command::new(&path)
        };
        command
            .args(arguments)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|error| panic!("cannot run {}: {error}", path.display()))
    }
}

impl Drop for PrivatePostgres {
    /// Stops the server at once (it may already be down) and removes its directory.
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", &["-D", path_text(&self.data_dir()), "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path_text(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

fn describe(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The directory of `initdb` and `pg_ctl`: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn postgres_bin_dir() -> PathBuf {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_tools(&dir) {
            return dir;
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path().join("bin"))))
        .filter(|(_, dir)| has_tools(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir).unwrap_or_else(|| {
        panic!(
            "the PostgreSQL server binaries (initdb, pg_ctl) are missing: neither `pg_config --bindir` nor \
             /usr/lib/postgresql/<version>/bin has them; install the PostgreSQL server package — the fault tests \
             run a private server and never skip"
        )
    })
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
