//! Helpers for the scenario checks' unit tests: parse a snippet and assert
//! where the error points.

use super::error::ScenarioError;
use super::parse::parse;
use super::spec::Scenario;

/// Two lines that make any snippet placed before them a valid scenario.
pub const BASE: &str = "[[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
                        [[vm]]\nid = 1\npartition = 1\n";

/// Parses `snippet` followed by [`BASE`], expecting an error.
pub fn err(snippet: &str) -> ScenarioError {
    err_raw(&format!("{snippet}{BASE}"))
}

/// Parses `text` as is, expecting an error.
pub fn err_raw(text: &str) -> ScenarioError {
    match parse("t.toml", text) {
        Ok(s) => panic!("expected an error, parsed {s:?}"),
        Err(e) => e,
    }
}

/// Parses `snippet` followed by [`BASE`], expecting success.
pub fn ok(snippet: &str) -> Scenario {
    match parse("t.toml", &format!("{snippet}{BASE}")) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// Asserts that `e` is at `line` and its reason contains `needle`.
#[track_caller]
pub fn assert_at(e: &ScenarioError, line: usize, needle: &str) {
    assert_eq!(e.line, line, "wrong line in: {e}");
    assert!(e.reason.contains(needle), "reason lacks {needle:?}: {e}");
}
