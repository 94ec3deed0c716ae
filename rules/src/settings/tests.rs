//! The docs' tables are copies of [`SETTINGS`]: these tests fail when a
//! copy drifts, and print the table to paste.

use super::*;

/// A workspace file, read from the rules crate's parent directory.
fn workspace_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The text of a file's `///` doc comments, one line each.
fn doc_text(source: &str) -> String {
    source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("///"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_contains(path: &str, text: &str, table: &str) {
    assert!(
        text.contains(table),
        "{path} does not hold the table rendered from leasehold_rules::SETTINGS; replace its table with:\n\n{table}"
    );
}

#[test]
fn the_readme_lists_every_attribute_as_the_table_does() {
    assert_contains("README.md", &workspace_file("README.md"), &attribute_table());
}

#[test]
fn the_derive_docs_list_every_attribute_as_the_table_does() {
    let docs = doc_text(&workspace_file("macros/src/lib.rs"));
    assert_contains("macros/src/lib.rs", &docs, &attribute_table());
}

#[test]
fn the_job_settings_docs_list_every_setter_as_the_table_does() {
    let docs = doc_text(&workspace_file("src/job.rs"));
    assert_contains("src/job.rs", &docs, &setter_table());
}

#[test]
fn names_and_synonyms_are_unique_and_durations_have_duration_examples() {
    let mut seen = Vec::new();
    for s in SETTINGS {
        for name in std::iter::once(&s.name).chain(s.synonyms) {
            assert!(!seen.contains(name), "`{name}` is listed twice");
            seen.push(name);
        }
        if s.value == Value::Duration {
            let example = s.example.trim_matches('"');
            assert!(crate::parse_duration(example).is_ok(), "{}: {example}", s.name);
        }
        assert!(
            (s.bound.is_some()) <= (s.value == Value::Duration),
            "{}: only durations have a bound",
            s.name
        );
    }
    for (alias, _) in ALIASES {
        assert!(!seen.contains(alias), "`{alias}` is listed twice");
    }
}

#[test]
fn the_bounds_are_the_library_rules() {
    let lease = setting("lease").and_then(|s| s.bound).expect("lease has a bound");
    assert!(lease(Duration::from_millis(9)).is_err());
    assert!(lease(crate::MAX_LEASE).is_ok());
    let every = setting("every").and_then(|s| s.bound).expect("every has a bound");
    assert!(every(Duration::from_millis(99)).is_err());
    assert!(every(crate::MIN_PERIOD).is_ok());
    let timeout = setting("timeout").and_then(|s| s.bound).expect("timeout has a bound");
    assert!(timeout(crate::MIN_TIMEOUT).is_ok() && timeout(crate::MAX_TIMEOUT).is_ok());
    for bad in [Duration::from_millis(99), crate::MAX_TIMEOUT + Duration::from_secs(1)] {
        let message = timeout(bad).expect_err("out of range").to_string();
        assert!(message.contains("from 100ms to 168h"), "{message}");
    }
}
