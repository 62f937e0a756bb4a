//! Errors of the configuration file: what is wrong and where (file, line, column), shown with
//! the offending line underlined.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::kind::ErrorKind;

/// A configuration file problem, located in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFileError {
    /// The file, as the user named it.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong (boxed, so that a `Result` carrying this error stays small).
    pub kind: Box<ErrorKind>,
    /// The text of the offending line.
    pub source_line: String,
    /// How many characters of that line to underline.
    pub width: usize,
}

impl ConfigFileError {
    /// Locates `span` of `src` (1-based line and column) and keeps the line for display.
    pub(super) fn new(path: &Path, src: &str, span: Range<usize>, kind: ErrorKind) -> Self {
        let start = span.start.min(src.len());
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line = src[..start].matches('\n').count() + 1;
        let column = src[line_start..start].chars().count() + 1;
        let source_line = src[line_start..line_end].trim_end_matches('\r').to_string();
        let end = span.end.clamp(start, line_end);
        let width = src[start..end].chars().count().max(1);
        Self {
            path: path.to_path_buf(),
            line,
            column,
            kind: Box::new(kind),
            source_line,
            width,
        }
    }
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.kind
        )?;
        if !self.source_line.trim().is_empty() {
            let gutter = self.line.to_string().len();
            write!(
                f,
                "\n {:gutter$} |\n {} | {}\n {:gutter$} | {}{}",
                "",
                self.line,
                self.source_line,
                "",
                " ".repeat(self.column - 1),
                "^".repeat(self.width),
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigFileError {}

/// An error found after parsing, with the byte range it concerns.
pub(super) struct Located {
    /// Byte range in the source.
    pub(super) span: Range<usize>,
    /// What is wrong.
    pub(super) kind: ErrorKind,
}

/// Shorthand for a [`Located`] error.
pub(super) fn at(span: Range<usize>, kind: ErrorKind) -> Located {
    Located { span, kind }
}

/// Rewords serde's messages in TOML's vocabulary ("key" rather than "field").
pub(super) fn toml_message(message: &str) -> String {
    message
        .trim_end()
        .replace('\n', ": ")
        .replace("unknown field", "unknown key")
        .replace("missing field", "missing key")
        .replace("unknown variant", "unknown value")
}
