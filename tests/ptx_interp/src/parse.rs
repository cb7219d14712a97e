//! The module's structure: header directives, entries, their parameters, register and
//! shared declarations, labels and instruction statements (decoded by `decode`).

use crate::error::ParseError;
use crate::lex::{tokenize, Token};

/// A `.param` of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamDecl {
    pub name: String,
    /// The type suffix without its dot: `u64`, `f32`, ...
    pub ty: String,
}

/// A `.reg` declaration: a type and the names it declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RegDecl {
    pub ty: String,
    pub names: Vec<String>,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SharedDecl {
    pub name: String,
    pub align: u64,
    pub bytes: u64,
    pub line: u32,
}

/// One instruction statement, not yet decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Statement {
    pub line: u32,
    /// The source text, for error messages.
    pub text: String,
    /// `@%p` / `@!%p`: the predicate and whether it is negated.
    pub guard: Option<(String, bool)>,
    pub opcode: String,
    /// The operands, each as its tokens (split at top-level commas).
    pub operands: Vec<Vec<Token>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BodyItem {
    Label(String, u32),
    Instruction(Statement),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryDecl {
    pub name: String,
    pub line: u32,
    pub params: Vec<ParamDecl>,
    pub maxntid: Option<[u32; 3]>,
    pub regs: Vec<RegDecl>,
    pub shared: Vec<SharedDecl>,
    pub body: Vec<BodyItem>,
}

/// The most registers one `%r<N>` may declare: the interpreter gives each thread a slot per
/// register, and no real kernel comes near this.
const MAX_REGISTERS: u64 = 1 << 16;

struct Parser<'a> {
    source: &'a str,
    tokens: Vec<Token>,
    at: usize,
}

pub(crate) fn parse_module(source: &str) -> Result<Vec<EntryDecl>, ParseError> {
    let mut parser = Parser { source, tokens: tokenize(source)?, at: 0 };
    let mut entries = Vec::new();
    while let Some(token) = parser.peek() {
        let line = token.line;
        match token.word() {
            Some(".version") | Some(".target") => {
                parser.next_token()?;
                parser.word()?;
                // `.target sm_80, debug` style lists are outside the subset.
            }
            Some(".address_size") => {
                parser.next_token()?;
                let size = parser.word()?;
                if size != "64" {
                    return Err(ParseError { line, message: format!("`.address_size {size}`: only 64 is supported") });
                }
            }
            Some(".visible") | Some(".entry") => entries.push(parser.entry()?),
            _ => return Err(parser.unexpected("a module directive")),
        }
    }
    Ok(entries)
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn last_line(&self) -> u32 {
        self.tokens.last().map_or(1, |t| t.line)
    }

    fn next_token(&mut self) -> Result<Token, ParseError> {
        let token = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or(ParseError { line: self.last_line(), message: "unexpected end of input".into() })?;
        self.at += 1;
        Ok(token)
    }

    fn unexpected(&self, wanted: &str) -> ParseError {
        match self.peek() {
            Some(token) => {
                ParseError { line: token.line, message: format!("expected {wanted}, found {}", token.describe()) }
            }
            None => ParseError { line: self.last_line(), message: format!("expected {wanted}, found the end") },
        }
    }

    fn word(&mut self) -> Result<String, ParseError> {
        match self.peek().and_then(|t| t.word()) {
            Some(word) => {
                let word = word.to_string();
                self.at += 1;
                Ok(word)
            }
            None => Err(self.unexpected("a word")),
        }
    }

    fn expect(&mut self, punct: char) -> Result<(), ParseError> {
        if self.peek().is_some_and(|t| t.is(punct)) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{punct}`")))
        }
    }

    fn eat(&mut self, punct: char) -> bool {
        let found = self.peek().is_some_and(|t| t.is(punct));
        if found {
            self.at += 1;
        }
        found
    }

    fn number(&mut self) -> Result<u64, ParseError> {
        let line = self.peek().map_or(self.last_line(), |t| t.line);
        let word = self.word()?;
        parse_u64(&word).ok_or(ParseError { line, message: format!("`{word}` is not a number") })
    }

    fn entry(&mut self) -> Result<EntryDecl, ParseError> {
        if self.peek().and_then(|t| t.word()) == Some(".visible") {
            self.at += 1;
        }
        let line = self.peek().map_or(self.last_line(), |t| t.line);
        if self.word()? != ".entry" {
            return Err(ParseError { line, message: "only `.entry` functions are supported".into() });
        }
        let name = self.word()?;
        let mut entry = EntryDecl {
            name,
            line,
            params: Vec::new(),
            maxntid: None,
            regs: Vec::new(),
            shared: Vec::new(),
            body: Vec::new(),
        };
        self.expect('(')?;
        if !self.eat(')') {
            loop {
                entry.params.push(self.param()?);
                if self.eat(')') {
                    break;
                }
                self.expect(',')?;
            }
        }
        // Performance directives: `.maxntid` bounds the launch; `.minnctapersm N` only
        // guides ptxas's register allocation, so it is read and ignored.
        loop {
            match self.peek().and_then(|t| t.word()) {
                Some(".minnctapersm") => {
                    self.at += 1;
                    self.number()?;
                    continue;
                }
                Some(".maxntid") => self.at += 1,
                _ => break,
            }
            let mut dims = [1u32; 3];
            for (i, dim) in dims.iter_mut().enumerate() {
                if i > 0 && !self.eat(',') {
                    break;
                }
                let line = self.peek().map_or(self.last_line(), |t| t.line);
                *dim = u32::try_from(self.number()?)
                    .map_err(|_| ParseError { line, message: ".maxntid too large".into() })?;
            }
            entry.maxntid = Some(dims);
        }
        self.expect('{')?;
        self.body(&mut entry)?;
        Ok(entry)
    }

    fn param(&mut self) -> Result<ParamDecl, ParseError> {
        let line = self.peek().map_or(self.last_line(), |t| t.line);
        if self.word()? != ".param" {
            return Err(ParseError { line, message: "expected `.param`".into() });
        }
        let ty = self.word()?;
        let known = ["u32", "s32", "u64", "s64", "b32", "b64", "f32", "f64"];
        let bare = ty.strip_prefix('.').filter(|t| known.contains(t)).ok_or(ParseError {
            line,
            message: format!("parameter type `{ty}` is not supported (scalar 32/64-bit types only)"),
        })?;
        Ok(ParamDecl { name: self.word()?, ty: bare.to_string() })
    }

    /// Statements up to the entry's closing brace; nested `{ }` blocks only group.
    fn body(&mut self, entry: &mut EntryDecl) -> Result<(), ParseError> {
        let mut depth = 1;
        loop {
            let token = self.next_token()?;
            let line = token.line;
            if token.is('{') {
                depth += 1;
                continue;
            }
            if token.is('}') {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
                continue;
            }
            let word = token.word().map(str::to_string);
            match word.as_deref() {
                Some(".reg") => entry.regs.push(self.reg_decl(line)?),
                Some(".shared") => entry.shared.push(self.shared_decl(line)?),
                Some(label) if self.peek().is_some_and(|t| t.is(':')) && !label.starts_with('.') => {
                    self.at += 1;
                    entry.body.push(BodyItem::Label(label.to_string(), line));
                }
                Some(_) | None if token.is('@') || token.word().is_some_and(|w| !w.starts_with('.')) => {
                    self.at -= 1;
                    entry.body.push(BodyItem::Instruction(self.statement()?));
                }
                _ => return Err(ParseError { line, message: format!("{} is not supported here", token.describe()) }),
            }
        }
    }

    fn reg_decl(&mut self, line: u32) -> Result<RegDecl, ParseError> {
        let ty = self.word()?;
        let mut names = Vec::new();
        loop {
            let name = self.word()?;
            if self.eat('<') {
                let count = self.number()?;
                self.expect('>')?;
                if count > MAX_REGISTERS {
                    return Err(ParseError {
                        line,
                        message: format!("{count} registers in one declaration is too many"),
                    });
                }
                names.extend((0..count).map(|i| format!("{name}{i}")));
            } else {
                names.push(name);
            }
            if !self.eat(',') {
                break;
            }
        }
        self.expect(';')?;
        Ok(RegDecl { ty, names, line })
    }

    fn shared_decl(&mut self, line: u32) -> Result<SharedDecl, ParseError> {
        let mut align = 1;
        let mut word = self.word()?;
        if word == ".align" {
            align = self.number()?;
            word = self.word()?;
        }
        let element = match word.as_str() {
            ".b8" | ".u8" | ".s8" => 1,
            ".b16" | ".u16" | ".s16" | ".f16" => 2,
            ".b32" | ".u32" | ".s32" | ".f32" => 4,
            ".b64" | ".u64" | ".s64" | ".f64" => 8,
            _ => return Err(ParseError { line, message: format!("shared variable type `{word}` is not supported") }),
        };
        let name = self.word()?;
        let count = if self.eat('[') {
            let count = self.number()?;
            self.expect(']')?;
            count
        } else {
            1
        };
        self.expect(';')?;
        if !align.is_power_of_two() {
            return Err(ParseError { line, message: format!("`.align {align}` is not a power of two") });
        }
        let bytes =
            count.checked_mul(element).ok_or(ParseError { line, message: "shared variable too large".into() })?;
        Ok(SharedDecl { name, align: align.max(element), bytes, line })
    }

    fn statement(&mut self) -> Result<Statement, ParseError> {
        let first = self.peek().cloned().ok_or(self.unexpected("an instruction"))?;
        let line = first.line;
        let mut guard = None;
        if self.eat('@') {
            let negated = self.eat('!');
            guard = Some((self.word()?, negated));
        }
        let opcode = self.word()?;
        let mut operands: Vec<Vec<Token>> = Vec::new();
        let mut current = Vec::new();
        let mut nesting = 0i32;
        let end = loop {
            let token = self.next_token()?;
            if token.is(';') && nesting == 0 {
                break token.end;
            }
            if token.is('{') || token.is('[') {
                nesting += 1;
            } else if token.is('}') || token.is(']') {
                nesting -= 1;
            }
            if token.is(',') && nesting == 0 {
                operands.push(std::mem::take(&mut current));
            } else {
                current.push(token);
            }
        };
        if !current.is_empty() || !operands.is_empty() {
            operands.push(current);
        }
        let text = self.source[first.start..end].split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(Statement { line, text, guard, opcode, operands })
    }
}

/// A non-negative integer literal: decimal, `0x` hex, or PTX's `U` suffix.
pub(crate) fn parse_u64(word: &str) -> Option<u64> {
    let word = word.strip_suffix('U').unwrap_or(word);
    if let Some(hex) = word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if word.bytes().all(|b| b.is_ascii_digit()) && !word.is_empty() {
        word.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_with_everything() {
        let source = ".version 7.8\n.target sm_80\n.address_size 64\n\
            .visible .entry k(.param .u64 out, .param .f32 x) .maxntid 128, 1, 1\n{\n\
            .reg .b32 %r<3>;\n.reg .pred %p;\n.shared .align 4 .b8 buf[64];\n\
            L0: @!%p add.s32 %r1, %r2, 1;\nmov.b64 %rd1, {%r0, %r1};\n{ ret; }\n}\n";
        let entries = parse_module(source).unwrap();
        let entry = &entries[0];
        assert_eq!(entry.name, "k");
        assert_eq!(entry.params[1], ParamDecl { name: "x".into(), ty: "f32".into() });
        assert_eq!(entry.maxntid, Some([128, 1, 1]));
        assert_eq!(entry.regs[0].names, ["%r0", "%r1", "%r2"]);
        assert_eq!(entry.shared[0], SharedDecl { name: "buf".into(), align: 4, bytes: 64, line: 8 });
        assert_eq!(entry.body[0], BodyItem::Label("L0".into(), 9));
        let BodyItem::Instruction(add) = &entry.body[1] else { panic!() };
        assert_eq!(add.text, "@!%p add.s32 %r1, %r2, 1;");
        assert_eq!(add.guard, Some(("%p".into(), true)));
        assert_eq!(add.operands.len(), 3);
        let BodyItem::Instruction(mov) = &entry.body[2] else { panic!() };
        assert_eq!(mov.operands.len(), 2);
        assert_eq!(entry.body.len(), 4);
    }

    #[test]
    fn outside_the_subset_names_the_line() {
        let error = parse_module(".version 7.8\n.func f()\n{\n}\n").unwrap_err();
        assert_eq!(error.line, 2);
        let error = parse_module(".entry k()\n{\n.local .b8 x[4];\n}\n").unwrap_err();
        assert_eq!(error.line, 3);
        assert!(parse_module(".entry k(.param .u64 a\n").is_err());
        assert!(parse_module(".entry k() {\n.reg .b32 %r<99999999>;\n}").is_err());
    }
}
