//! Splitting PTX text into tokens, each with its line and byte offset.

use crate::error::ParseError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// Identifiers, directives (`.reg`), opcodes with modifiers (`add.rn.f32`),
    /// registers (`%r1`, `%tid.x`) and numbers (`16`, `0x1f`, `0f3F800000`).
    Word(String),
    /// One of `{ } ( ) [ ] , ; : @ ! + - < > |`.
    Punct(char),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    pub line: u32,
    /// Byte offsets of the token in the source.
    pub start: usize,
    pub end: usize,
}

impl Token {
    pub(crate) fn word(&self) -> Option<&str> {
        match &self.kind {
            TokenKind::Word(word) => Some(word),
            TokenKind::Punct(_) => None,
        }
    }

    pub(crate) fn is(&self, punct: char) -> bool {
        self.kind == TokenKind::Punct(punct)
    }

    pub(crate) fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Word(word) => format!("`{word}`"),
            TokenKind::Punct(c) => format!("`{c}`"),
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '%')
}

pub(crate) fn tokenize(source: &str) -> Result<Vec<Token>, ParseError> {
    let bytes = source.as_bytes();
    let mut tokens = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if source[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if source[i..].starts_with("/*") {
            let start_line = line;
            let close = source[i + 2..]
                .find("*/")
                .ok_or(ParseError { line: start_line, message: "unterminated /* comment".into() })?;
            line += source[i..i + 2 + close].matches('\n').count() as u32;
            i += close + 4;
        } else if is_word_char(c) {
            let start = i;
            while i < bytes.len() && is_word_char(bytes[i] as char) {
                i += 1;
            }
            tokens.push(Token { kind: TokenKind::Word(source[start..i].to_string()), line, start, end: i });
        } else if "{}()[],;:@!+-<>|".contains(c) {
            tokens.push(Token { kind: TokenKind::Punct(c), line, start: i, end: i + 1 });
            i += 1;
        } else {
            let shown = source[i..].chars().next().unwrap_or('?');
            return Err(ParseError { line, message: format!("unexpected character `{shown}`") });
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_punctuation_comments_and_lines() {
        let tokens = tokenize("add.s32 %r1, %r2, -4; // c\n/* a\nb */ @!%p1 bra $L_1;").unwrap();
        let shown: Vec<String> = tokens.iter().map(|t| format!("{}:{}", t.line, t.describe())).collect();
        assert_eq!(
            shown.join(" "),
            "1:`add.s32` 1:`%r1` 1:`,` 1:`%r2` 1:`,` 1:`-` 1:`4` 1:`;` 3:`@` 3:`!` 3:`%p1` 3:`bra` 3:`$L_1` 3:`;`"
        );
        assert_eq!(tokenize("x /* open").unwrap_err().line, 1);
        assert!(tokenize("mov.u32 %r1, \"s\";").is_err());
    }
}
