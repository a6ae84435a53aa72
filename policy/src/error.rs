//! The two error types of this crate, each with a stable `code()`.
//!
//! [`RequestError`] is what a caller gets for bad input: the HTTP layer maps its code to a
//! status. [`PolicyError`] is what a policy author gets for a bad policy or cases file: it names
//! the file, line and column, the rule when there is one, and a code. Tests assert on codes,
//! never on message text.

use std::fmt;
use std::path::PathBuf;

/// A tool call, or a part of one, that is refused before any policy sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("invalid JSON at byte {offset}: {reason}")]
    InvalidJson { offset: usize, reason: &'static str },
    #[error("duplicate object key `{key}`")]
    DuplicateKey { key: String },
    #[error("number `{literal}` cannot be represented exactly; send it as a string")]
    UnsafeNumber { literal: String },
    #[error("JSON nests deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error("body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("`args` must be a JSON object")]
    InvalidArgs,
    #[error("invalid tool name `{tool}`: it must match ^[A-Za-z0-9][A-Za-z0-9_.:/-]{{0,127}}$")]
    InvalidTool { tool: String },
    #[error("invalid `context`: {reason}")]
    InvalidContext { reason: String },
    #[error("unknown field `{field}` in the request body; a call takes `tool`, `args` and `context`{hint}")]
    UnknownField { field: String, hint: String },
}

impl RequestError {
    /// The stable code, as DESIGN §3 lists it.
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::InvalidJson { .. } => "request.invalid_json",
            RequestError::DuplicateKey { .. } => "request.duplicate_key",
            RequestError::UnsafeNumber { .. } => "request.unsafe_number",
            RequestError::TooDeep { .. } => "request.too_deep",
            RequestError::TooLarge { .. } => "request.too_large",
            RequestError::InvalidArgs => "request.invalid_args",
            RequestError::InvalidTool { .. } => "request.invalid_tool",
            RequestError::InvalidContext { .. } => "request.invalid_context",
            RequestError::UnknownField { .. } => "request.unknown_field",
        }
    }
}

/// One problem in a policy or cases file, located as precisely as the source allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Stable code, for example `policy.unknown_variable`.
    pub code: &'static str,
    pub file: PathBuf,
    /// 1-based; 0 when the problem has no place in a file (an unreadable folder).
    pub line: usize,
    pub col: usize,
    /// The rule the problem belongs to, when it belongs to one.
    pub rule: Option<String>,
    pub message: String,
}

impl PolicyError {
    pub(crate) fn new(
        code: &'static str,
        file: impl Into<PathBuf>,
        message: impl Into<String>,
    ) -> Self {
        PolicyError {
            code,
            file: file.into(),
            line: 0,
            col: 0,
            rule: None,
            message: message.into(),
        }
    }

    pub(crate) fn at(mut self, (line, col): (usize, usize)) -> Self {
        self.line = line;
        self.col = col;
        self
    }

    pub(crate) fn in_rule(mut self, rule: &str) -> Self {
        self.rule = Some(rule.to_owned());
        self
    }
}

impl PolicyError {
    /// Where and what, without the code: `file:line:col: rule `id`: message` (a file that
    /// cannot be read has no line to name).
    pub fn located(&self) -> String {
        let mut s = if self.line == 0 {
            format!("{}: ", self.file.display())
        } else {
            format!("{}:{}:{}: ", self.file.display(), self.line, self.col)
        };
        if let Some(rule) = &self.rule {
            s.push_str(&format!("rule `{rule}`: "));
        }
        s.push_str(&self.message);
        s
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.located(), self.code)
    }
}

/// Everything wrong with a policy set: a bad set is rejected whole, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl PolicyErrors {
    /// The code of the first problem, for callers that report one.
    pub fn code(&self) -> &'static str {
        self.0.first().map(|e| e.code).unwrap_or("policy.invalid")
    }
}

impl From<PolicyError> for PolicyErrors {
    fn from(e: PolicyError) -> Self {
        PolicyErrors(vec![e])
    }
}

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyErrors {}

/// Converts a byte offset in `text` into a 1-based (line, column), columns counted in chars.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}
