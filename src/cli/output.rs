//! Everything the command line prints goes through here: the answer on standard output, errors
//! and warnings on standard error, in the format the operator asked for (`-o table|json|yaml`).
//!
//! A write to a closed pipe (`cloudly completions bash | head`) is not an error worth a panic:
//! Rust ignores `SIGPIPE`, so the write fails with `BrokenPipe`, and the text is dropped. A unit
//! test fails on any `println!`, `eprintln!`, `print!` or `eprint!` elsewhere in `src/cli/`, whose
//! failure would panic.

use serde_json::Value;
use std::io::Write as _;

/// How a command prints its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people (times in RFC 3339, UTC).
    Table,
    /// The controller's answer as JSON, as it gave it.
    Json,
    /// The controller's answer as YAML.
    Yaml,
}

/// How a command without a table prints its answer (`call`, the writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataFormat {
    /// The controller's answer as JSON.
    Json,
    /// The controller's answer as YAML.
    Yaml,
}

impl From<DataFormat> for OutputFormat {
    fn from(format: DataFormat) -> Self {
        match format {
            DataFormat::Json => OutputFormat::Json,
            DataFormat::Yaml => OutputFormat::Yaml,
        }
    }
}

/// Writes `bytes` to standard output; a closed pipe drops them.
pub fn stdout_bytes(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
}

/// Writes `text` and a line end to standard output; a closed pipe drops it.
pub fn stdout_line(text: &str) {
    stdout_bytes(format!("{text}\n").as_bytes());
}

/// Writes `text` and a line end to standard error; a closed pipe drops it.
pub fn stderr_line(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{text}").and_then(|()| stderr.flush());
}

/// `error: <message>` on standard error.
pub fn error_line(message: impl std::fmt::Display) {
    stderr_line(&format!("error: {message}"));
}

/// `value` as pretty JSON.
pub fn json_text(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|error| format!("\"unprintable: {error}\""))
}

/// `value` as YAML (without a trailing line end).
pub fn yaml_text(value: &Value) -> String {
    serde_yaml_ng::to_string(value)
        .map(|text| text.trim_end().to_owned())
        .unwrap_or_else(|error| format!("unprintable: {error}"))
}

/// `value` as JSON or YAML on standard output.
pub fn print_data(value: &Value, format: DataFormat) {
    match format {
        DataFormat::Json => stdout_line(&json_text(value)),
        DataFormat::Yaml => stdout_line(&yaml_text(value)),
    }
}

/// A JSON value as a table cell: a string as it is, `null` (or absent) as `-`, a list as its
/// items joined by commas, anything else as JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        Value::Array(items) if items.is_empty() => "-".to_owned(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// A time in milliseconds since the Unix epoch as a table cell: RFC 3339 in UTC with
/// milliseconds (`2026-03-01T12:00:00.000Z`), `-` when absent.
pub fn time_cell(value: &Value) -> String {
    value.as_u64().map_or_else(|| cell(value), rfc3339)
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, with milliseconds.
pub fn rfc3339(milliseconds: u64) -> String {
    let seconds = milliseconds / 1_000;
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3_600,
        second_of_day % 3_600 / 60,
        second_of_day % 60,
        milliseconds % 1_000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// `header` and `rows` as left-aligned columns two spaces apart.
pub fn aligned(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .chain([header[column].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let cells: Vec<String> =
            cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}", width = *width)).collect();
        cells.join("  ").trim_end().to_owned()
    };
    std::iter::once(line(header.to_vec()))
        .chain(rows.iter().map(|row| line(row.iter().map(String::as_str).collect())))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
        assert_eq!(rfc3339(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
        assert_eq!(time_cell(&json!(null)), "-");
    }

    #[test]
    fn cells_and_columns() {
        assert_eq!(cell(&json!(["a", "b"])), "a,b");
        assert_eq!(cell(&json!([])), "-");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(
            aligned(&["ID", "NAME"], &[vec!["org".to_owned(), "Example".to_owned()]]),
            "ID   NAME\norg  Example"
        );
        assert_eq!(yaml_text(&json!({ "a": [1] })), "a:\n- 1");
    }

    /// Every print of `src/cli/` goes through this module: `println!` and its kin panic on a
    /// closed pipe.
    #[test]
    fn nothing_in_the_cli_prints_but_this_module() {
        let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
        let mut offenders = Vec::new();
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|name| name == "output.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (number, line) in text.lines().enumerate() {
                for macro_name in ["println!", "eprintln!", "print!", "eprint!"] {
                    let found = line.match_indices(macro_name).any(|(at, _)| {
                        !line[..at].ends_with(|character: char| character.is_alphanumeric() || character == '_')
                    });
                    if found {
                        offenders.push(format!("{}:{}: {}", path.display(), number + 1, line.trim()));
                    }
                }
            }
        }
        assert!(offenders.is_empty(), "print through cli::output instead:\n{}", offenders.join("\n"));
    }
}
