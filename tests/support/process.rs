//! `cloudly serve` as a real process: started with a data directory and a store URL, its log
//! (JSON lines, and the final `error: …` line of a refused start) collected, stopped with SIGTERM.

use cloudly::client::Client;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a start may take to serve or to exit.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// A `cloudly serve` process that is serving.
pub struct Serving {
    child: Child,
    /// `http://<address>`.
    pub base_url: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    log: Arc<Mutex<String>>,
}

/// How a start of `cloudly serve` ended.
pub enum Started {
    /// It serves.
    Serving(Serving),
    /// It exited before serving, with this status and log.
    Exited(ExitStatus, String),
}

impl Started {
    /// The process, which must be serving.
    pub fn serving(self) -> Serving {
        match self {
            Started::Serving(serving) => serving,
            Started::Exited(status, log) => panic!("cloudly serve exited with {status:?} instead of serving:\n{log}"),
        }
    }

    /// The exit status and log of a start that must have been refused.
    pub fn refused(self) -> (ExitStatus, String) {
        match self {
            Started::Exited(status, log) => (status, log),
            Started::Serving(serving) => {
                let log = serving.log();
                serving.kill();
                panic!("cloudly serve started instead of refusing:\n{log}")
            }
        }
    }
}

/// Starts `cloudly serve` on `database_url` with `data_dir` and a free port, and waits until it
/// serves or exits.
pub fn start(data_dir: &Path, database_url: &str) -> Started {
    start_with(data_dir, database_url, &[])
}

/// [`start`] with more environment variables (`CLOUDLY_…` settings). The binary is the one
/// cargo built for this test or bench, unless `CLOUDLY_BENCH_SERVER_BINARY` names another (a
/// build with debug line tables, for a profiler).
pub fn start_with(data_dir: &Path, database_url: &str, environment: &[(&str, &str)]) -> Started {
    let binary =
        std::env::var_os("CLOUDLY_BENCH_SERVER_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_cloudly").into());
    let mut child = Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        // Debug lines too, so that tests searching the log for secrets search them all (a
        // benchmark may set another `RUST_LOG` in `environment`).
        .env("RUST_LOG", "debug")
        .envs(environment.iter().copied())
        .env("CLOUDLY_DATA_DIR", data_dir)
        .env("CLOUDLY_DATABASE_URL", database_url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cloudly serve");
    let (log, address) = collect_log(&mut child);
    let started = Instant::now();
    loop {
        match address.recv_timeout(Duration::from_millis(50)) {
            Ok(address) => {
                return Started::Serving(Serving {
                    child,
                    base_url: format!("http://{address}"),
                    data_dir: data_dir.to_owned(),
                    log,
                });
            }
            Err(RecvTimeoutError::Disconnected) | Err(RecvTimeoutError::Timeout) => {
                if let Some(status) = child.try_wait().unwrap() {
                    // The reader thread ends with the process; let it take the last lines.
                    std::thread::sleep(Duration::from_millis(100));
                    let log = log.lock().unwrap().clone();
                    return Started::Exited(status, log);
                }
                if started.elapsed() > START_DEADLINE {
                    let _ = child.kill();
                    panic!("cloudly serve neither served nor exited:\n{}", log.lock().unwrap());
                }
            }
        }
    }
}

/// Starts a second `cloudly serve` beside `first` on the same store: its data directory
/// `data_dir` gets a copy of `first`'s keys before the start, as controllers of one cluster
/// share them.
pub fn start_sharing_keys(
    first: &Serving,
    data_dir: &Path,
    database_url: &str,
    environment: &[(&str, &str)],
) -> Started {
    std::fs::create_dir_all(data_dir.join("keys")).unwrap();
    for key in ["identity.ed25519", "signing.ed25519", "secret.key"] {
        std::fs::copy(first.data_dir.join("keys").join(key), data_dir.join("keys").join(key)).unwrap();
    }
    start_with(data_dir, database_url, environment)
}

/// Collects `child`'s stderr into a shared log; the receiver gets the address of the
/// `cloudly serving` line.
fn collect_log(child: &mut Child) -> (Arc<Mutex<String>>, Receiver<String>) {
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (address_sender, address) = std::sync::mpsc::channel();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(event) = serde_json::from_str::<Value>(&line)
                && event["message"] == "cloudly serving"
            {
                let _ = address_sender.send(event["address"].as_str().unwrap_or_default().to_owned());
            }
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    (log, address)
}

impl Serving {
    /// The log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A client of the process.
    pub fn client(&self) -> Client {
        Client::new(&self.base_url)
    }

    /// The bootstrap administrator identity the process wrote.
    pub fn admin_identity(&self) -> Value {
        let text = std::fs::read_to_string(self.data_dir.join("admin-identity.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Calls `method` as the bootstrap administrator.
    pub async fn call_as_admin(&self, method: &str, mut request: Value) -> Result<Value, cloudly::client::CallError> {
        request["identity"] = self.admin_identity();
        self.client().call(method, request).await
    }

    /// Waits until the log holds `text`, at most `wait`; answers whether it does.
    pub async fn log_shows(&self, text: &str, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while !self.log().contains(text) {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        true
    }

    /// Stops the process with SIGTERM; it must exit successfully after a clean stop. Answers its log.
    pub fn terminate(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let exit = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let log = self.log();
        assert!(exit.success(), "cloudly serve exited with {exit:?} after SIGTERM:\n{log}");
        assert!(log.contains("cloudly stopped"), "no clean stop in the log:\n{log}");
        log
    }

    /// Kills the process (a test that failed).
    pub fn kill(self) {
        drop(self);
    }

    /// Kills the process with SIGKILL, as a crash or an OOM kill would, and reaps it: no drain,
    /// no store close. Answers its log.
    pub fn kill_hard(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
        let exit = self.child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&exit), Some(9), "{exit:?}");
        std::thread::sleep(Duration::from_millis(100));
        self.log()
    }

    /// Sends SIGTERM and returns at once (the process drains; [`Serving::wait_exit`] waits).
    pub fn send_terminate(&self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }

    /// Waits up to `wait` for the process to exit: its exit status (`None` when it still runs,
    /// and then it is killed) and its log.
    pub async fn wait_exit(mut self, wait: Duration) -> (Option<ExitStatus>, String) {
        let deadline = Instant::now() + wait;
        let exit = loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                break Some(exit);
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The reader thread ends with the process; let it take the last lines.
        tokio::time::sleep(Duration::from_millis(100)).await;
        (exit, self.log())
    }
}

impl Drop for Serving {
    /// A test that panicked leaves no process behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A temporary directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new empty directory under the system's temporary directory.
    pub fn new(prefix: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
