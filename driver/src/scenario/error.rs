//! Scenario errors: the located error callers see, and the byte-span error
//! the checks produce before it is turned into a line and column.

use std::ops::Range;

/// A scenario file that could not be read, parsed or validated.
///
/// Displays as `FILE:LINE:COL: REASON`; line and column are 1-based (0 when
/// the file could not be read at all).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {reason}")]
pub struct ScenarioError {
    /// Name of the scenario source (usually its path).
    pub file: String,
    /// 1-based line of the offending text; 0 for I/O errors.
    pub line: usize,
    /// 1-based column (in characters) of the offending text; 0 for I/O errors.
    pub column: usize,
    /// What is wrong, as a sentence without trailing period.
    pub reason: String,
}

/// An error located by a byte range of the source text.
#[derive(Debug)]
pub(super) struct SpanError {
    pub span: Range<usize>,
    pub reason: String,
}

impl SpanError {
    /// An error at `span`.
    pub fn new(span: Range<usize>, reason: impl Into<String>) -> Self {
        Self {
            span,
            reason: reason.into(),
        }
    }
}

/// Turns a byte-located error into a line/column-located one.
pub(super) fn locate(file: &str, text: &str, e: &SpanError) -> ScenarioError {
    let (line, column) = line_col(text, e.span.start);
    ScenarioError {
        file: file.to_owned(),
        line,
        column,
        reason: e.reason.clone(),
    }
}

/// 1-based line and character column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::{line_col, ScenarioError};

    #[test]
    fn display_is_file_line_column_reason() {
        let e = ScenarioError {
            file: "demo.toml".into(),
            line: 14,
            column: 9,
            reason: "bad".into(),
        };
        assert_eq!(e.to_string(), "demo.toml:14:9: bad");
    }

    #[test]
    fn line_col_counts_characters_from_one() {
        let text = "ab\nçd = 1\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, text.find('d').unwrap_or(0)), (2, 2));
        assert_eq!(line_col(text, 1000), (3, 1));
    }
}
