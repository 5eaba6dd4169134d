//! The READMEs cannot drift from the binary: every line of the `sh` blocks of README.md and
//! deploy/README.md is run with bash, in document order, against a real `cloudly serve` in a
//! sandbox directory (a copy of `deploy/`, `HOME` inside it, the built `cloudly` first on `PATH`),
//! one sandbox and one controller per document; a command that fails fails the test, naming its
//! document and line. A `cloudly` command in a fenced block of another language fails it too (it
//! would run nowhere), and so does a `deploy/examples/` file named but missing.
//!
//! What the sandbox changes, each for the reason given: the controller's documented address
//! (`127.0.0.1:8080`, and compose's second controller on `8081`) is a free port of the test's,
//! through `CLOUDLY_LISTEN`, `CLOUDLY_URL` and the text of the lines; the lines of [`SKIPPED`]
//! do not run; [`REPLACED`] lines run a stand-in.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The documents whose commands run.
const DOCUMENTS: &[&str] = &["README.md", "deploy/README.md"];

/// Commands that do not run here, by their first word, and why.
const SKIPPED: &[(&str, &str)] = &[
    ("git", "the sandbox is a copy of this checkout"),
    ("cargo", "the binary under test is built and first on PATH"),
    ("scripts/test.sh", "the test command is what runs this test"),
    ("scripts/e2e.sh", "tests/e2e.rs is a test target of its own"),
    ("docker", "scripts/compose-e2e.sh runs the compose file under a Docker engine of its own"),
    ("sudo", "installing on the host is outside a test"),
    ("journalctl", "it follows a systemd unit's log until interrupted"),
];

/// Lines that run a stand-in: (a part of the line, the stand-in, why).
const REPLACED: &[(&str, &str, &str)] = &[
    (
        "docker compose -f deploy/docker-compose.yml up",
        "cloudly serve 2> cloudly.log & cloudly ready --wait 60s",
        "the compose controllers are cloudly serve; one process stands in for both",
    ),
    (
        "cat /var/lib/cloudly/admin-identity.json > admin.json",
        "cp cloudly-data/admin-identity.json admin.json",
        "the stand-in controller's identity is in the sandbox's data directory",
    ),
];

/// One command line of a document (continuation lines joined).
#[derive(Debug, Clone)]
struct DocumentLine {
    document: &'static str,
    number: usize,
    text: String,
}

/// A fenced block: its language, the line of its opening fence and its lines (indentation of the
/// fence removed).
struct Block {
    language: String,
    number: usize,
    lines: Vec<String>,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(document: &str) -> String {
    std::fs::read_to_string(repository().join(document)).unwrap_or_else(|error| panic!("{document}: {error}"))
}

fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(language)) => {
                open = Some((indent, Block { language: language.trim().to_owned(), number: index + 1, lines: vec![] }))
            }
            (Some(_), Some("")) => found.push(open.take().unwrap().1),
            (Some((indent, block)), _) => block.lines.push(line.get(*indent..).unwrap_or(trimmed).to_owned()),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed fence");
    found
}

/// The command lines of the `sh` blocks of `document`: a line ending in `\` continues on the
/// next; blank and comment lines are left out.
fn sh_lines(document: &'static str) -> Vec<DocumentLine> {
    let mut lines = Vec::new();
    for block in blocks(&read(document)).into_iter().filter(|block| block.language == "sh") {
        let mut pending: Option<DocumentLine> = None;
        for (offset, line) in block.lines.iter().enumerate() {
            let number = block.number + 1 + offset;
            let current = pending.get_or_insert(DocumentLine { document, number, text: String::new() });
            match line.trim_end().strip_suffix('\\') {
                Some(continued) => current.text.push_str(&format!("{} ", continued.trim())),
                None => {
                    current.text.push_str(line.trim());
                    let done = pending.take().unwrap();
                    if !done.text.is_empty() && !done.text.starts_with('#') {
                        lines.push(done);
                    }
                }
            }
        }
        assert!(pending.is_none(), "{document}:{}: a block ends in a continuation", block.number);
    }
    lines
}

/// Why `line` does not run, if it does not: its command (after `NAME=value` assignments), or a
/// command it pipes into, is one of [`SKIPPED`].
fn skipped(line: &str) -> Option<&'static str> {
    line.split('|').find_map(|command| {
        let first = command.split_whitespace().find(|word| !word.contains('=') || word.starts_with('-'))?;
        SKIPPED.iter().find(|(name, _)| *name == first).map(|(_, reason)| *reason)
    })
}

#[test]
fn every_cloudly_command_of_the_readmes_is_in_an_sh_block() {
    for document in DOCUMENTS {
        for block in blocks(&read(document)).into_iter().filter(|block| block.language != "sh") {
            for (offset, line) in block.lines.iter().enumerate() {
                let command = line.trim_start().trim_start_matches("$ ");
                assert!(
                    !command.starts_with("cloudly ") && !command.contains("| cloudly "),
                    "{document}:{}: a cloudly command in a ```{} block; put it in an ```sh block, where \
                     tests/readme_commands.rs runs it",
                    block.number + 1 + offset,
                    block.language
                );
            }
        }
    }
}

#[test]
fn every_example_file_the_readmes_name_exists() {
    let mut named = 0;
    for document in DOCUMENTS {
        let text = read(document);
        for (at, _) in text.match_indices("deploy/examples/") {
            let rest = &text[at + "deploy/examples/".len()..];
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')).collect();
            let name = name.trim_end_matches('.');
            if name.is_empty() {
                continue;
            }
            named += 1;
            assert!(
                repository().join("deploy/examples").join(name).is_file(),
                "{document} names deploy/examples/{name}"
            );
        }
    }
    assert!(named >= 6, "the READMEs name {named} example files");
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The bash script of `lines`: each line announced on stderr (`>>> document:line`), then run,
/// the first failure ending the script; the background controllers stopped at the end.
fn script(lines: &[DocumentLine], address: &str) -> (String, Vec<String>) {
    let mut script = String::from("set -e\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n");
    let mut notes = Vec::new();
    for line in lines {
        let place = format!("{}:{}", line.document, line.number);
        let text = line.text.replace("127.0.0.1:8080", address).replace("127.0.0.1:8081", address);
        let command = if let Some((_, stand_in, why)) = REPLACED.iter().find(|(part, _, _)| text.contains(part)) {
            notes.push(format!("{place}: replaced ({why}): {}", line.text));
            (*stand_in).to_owned()
        } else if let Some(why) = skipped(&text) {
            notes.push(format!("{place}: skipped ({why}): {}", line.text));
            continue;
        } else {
            text
        };
        let announced = format!(">>> {place}: {command}").replace('\'', "'\\''");
        script.push_str(&format!("echo '{announced}' >&2\n{command}\n"));
    }
    script.push_str("echo '>>> done' >&2\n");
    (script, notes)
}

/// Runs the `sh` lines of `document` in a fresh sandbox; panics naming the line that failed.
fn run_document(document: &'static str) -> Vec<String> {
    let lines = sh_lines(document);
    assert!(lines.iter().any(|line| line.text.starts_with("cloudly ")), "{document} has no cloudly command");
    let sandbox = std::env::temp_dir().join(format!("cloudly-readme-{}", uuid::Uuid::new_v4().simple()));
    copy_tree(&repository().join("deploy"), &sandbox.join("deploy"));
    let address = format!("127.0.0.1:{}", free_port());
    let (script, notes) = script(&lines, &address);
    std::fs::write(sandbox.join("readme.sh"), &script).unwrap();
    let binary_dir = Path::new(env!("CARGO_BIN_EXE_cloudly")).parent().unwrap().to_owned();
    let path = std::env::join_paths(
        std::iter::once(binary_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut child = Command::new("bash")
        .arg("readme.sh")
        .current_dir(&sandbox)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &sandbox)
        .env("CLOUDLY_LISTEN", &address)
        .env("CLOUDLY_URL", format!("http://{address}"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(sandbox.join("stdout.log")).unwrap())
        .stderr(std::fs::File::create(sandbox.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(sandbox.join("stderr.log")).unwrap_or_default();
    let stdout = std::fs::read_to_string(sandbox.join("stdout.log")).unwrap_or_default();
    let failed_at = stderr.lines().rev().find(|line| line.starts_with(">>> ")).unwrap_or("(before the first line)");
    let ok = status.is_some_and(|status| status.success()) && failed_at == ">>> done";
    if ok {
        let _ = std::fs::remove_dir_all(&sandbox);
    }
    assert!(
        ok,
        "{document}: the command at {failed_at} failed ({status:?}); sandbox {}\n--- stderr (end)\n{}\n--- stdout (end)\n{}",
        sandbox.display(),
        tail(&stderr, 40),
        tail(&stdout, 20)
    );
    notes
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[test]
fn every_command_of_readme_runs_against_a_real_controller() {
    let notes = run_document("README.md");
    // The quick start runs as written: only the clone and the install are left to the reader.
    let quick_start: Vec<&String> =
        notes.iter().filter(|note| note.contains("git clone") || note.contains("cargo install")).collect();
    assert_eq!(quick_start.len(), 2, "{notes:#?}");
}

#[test]
fn every_command_of_the_deploy_readme_runs_against_a_real_controller() {
    let notes = run_document("deploy/README.md");
    assert!(notes.iter().any(|note| note.contains("replaced")), "{notes:#?}");
}

#[test]
fn the_sandbox_rules_skip_and_replace_what_they_say() {
    assert_eq!(skipped("cargo install --locked --path ."), Some("the binary under test is built and first on PATH"));
    assert!(skipped("CLOUDLY_E2E_URLS=http://a,http://b CLOUDLY_E2E_IDENTITY=/x scripts/e2e.sh").is_some());
    assert!(skipped("echo 'X=1' | sudo install -m 0600 /dev/stdin /etc/x").is_some());
    assert_eq!(skipped("cloudly cluster list"), None);
    assert_eq!(skipped("curl -s http://127.0.0.1:8080/readyz"), None);
    let lines =
        [DocumentLine { document: "README.md", number: 1, text: "cloudly --url http://127.0.0.1:8080 version".into() }];
    let (script, _) = script(&lines, "127.0.0.1:1234");
    assert!(script.contains("\ncloudly --url http://127.0.0.1:1234 version\n"), "{script}");
}
