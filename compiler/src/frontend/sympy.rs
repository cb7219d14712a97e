//! Parses the sympy `srepr` strings torch.export writes for symbolic sizes, e.g.
//! `Add(Mul(Integer(2), Symbol('s0', positive=True, integer=True)), Integer(1))`.

use aotc_abi::sym::{SymExpr, SymId};

/// Parses `text`; `symbol` maps a symbol name to its id.
pub fn parse(text: &str, symbol: &mut dyn FnMut(&str) -> SymId) -> Result<SymExpr, String> {
    let mut p = Parser { s: text.as_bytes(), i: 0, symbol };
    let e = p.expr()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("trailing text at byte {} of \"{text}\"", p.i));
    }
    Ok(e)
}

struct Parser<'a, 'f> {
    s: &'a [u8],
    i: usize,
    symbol: &'f mut dyn FnMut(&str) -> SymId,
}

impl Parser<'_, '_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) { Ok(()) } else { Err(format!("expected '{}' at byte {}", c as char, self.i)) }
    }

    fn ident(&mut self) -> String {
        self.ws();
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_') {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn integer(&mut self) -> Result<i64, String> {
        self.ws();
        let start = self.i;
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or("").parse().map_err(|_| format!("expected an integer at byte {start}"))
    }

    fn string(&mut self) -> Result<String, String> {
        self.ws();
        let quote = *self.s.get(self.i).ok_or("expected a string")?;
        if quote != b'\'' && quote != b'"' {
            return Err(format!("expected a quoted name at byte {}", self.i));
        }
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != quote {
            self.i += 1;
        }
        let name = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.expect(quote)?;
        Ok(name)
    }

    /// Skips `key=value` assumptions such as `positive=True`.
    fn skip_keywords(&mut self) {
        while self.eat(b',') {
            self.ident();
            if self.eat(b'=') {
                self.ident();
            }
        }
    }

    fn args(&mut self) -> Result<Vec<SymExpr>, String> {
        let mut v = vec![self.expr()?];
        while self.eat(b',') {
            v.push(self.expr()?);
        }
        self.expect(b')')?;
        Ok(v)
    }

    fn expr(&mut self) -> Result<SymExpr, String> {
        let head = self.ident();
        if head.is_empty() {
            // A bare integer is accepted too.
            return self.integer().map(SymExpr::Int);
        }
        self.expect(b'(')?;
        let two = |v: Vec<SymExpr>, f: fn(SymExpr, SymExpr) -> SymExpr| -> Result<SymExpr, String> {
            let [a, b]: [SymExpr; 2] = v.try_into().map_err(|_| format!("{head} takes two arguments"))?;
            Ok(f(a, b))
        };
        match head.as_str() {
            "Integer" => {
                let v = self.integer()?;
                self.expect(b')')?;
                Ok(SymExpr::Int(v))
            }
            "Symbol" => {
                let name = self.string()?;
                self.skip_keywords();
                self.expect(b')')?;
                Ok(SymExpr::Sym((self.symbol)(&name)))
            }
            "Add" => Ok(SymExpr::add(self.args()?)),
            "Mul" => Ok(SymExpr::mul(self.args()?)),
            "FloorDiv" => two(self.args()?, SymExpr::floor_div),
            "Mod" | "PythonMod" => two(self.args()?, SymExpr::modulo),
            "Max" => self.args()?.into_iter().reduce(SymExpr::max).ok_or("Max()".into()),
            "Min" => self.args()?.into_iter().reduce(SymExpr::min).ok_or("Min()".into()),
            "CeilToInt" | "FloorToInt" | "TruncToInt" => {
                let mut v = self.args()?;
                if v.len() != 1 { return Err(format!("{head} takes one argument")) }
                Ok(v.pop().unwrap())
            }
            "CleanDiv" | "IntTrueDiv" => two(self.args()?, SymExpr::floor_div),
            "Pow" | "PowByNatural" => {
                let v = self.args()?;
                match v.as_slice() {
                    [b, SymExpr::Int(e)] if (0..=16).contains(e) => Ok(SymExpr::mul(std::iter::repeat_n(b.clone(), *e as usize))),
                    _ => Err(format!("unsupported power {v:?}")),
                }
            }
            other => Err(format!("unsupported sympy function {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> String {
        let mut names: Vec<String> = vec![];
        let mut id = |n: &str| {
            if let Some(i) = names.iter().position(|x| x == n) { return i as u32 }
            names.push(n.into());
            names.len() as u32 - 1
        };
        parse(s, &mut id).map(|e| e.to_string()).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn parses_export_expressions() {
        assert_eq!(p("Symbol('s77', positive=True, integer=True)"), "s0");
        assert_eq!(p("Add(Symbol('s27', positive=True, integer=True), Integer(1))"), "s0 + 1");
        assert_eq!(p("Mul(Integer(2), Symbol('s0', integer=True))"), "2*s0");
        assert_eq!(p("FloorDiv(Symbol('s0'), Integer(2))"), "floordiv(s0, 2)");
        assert_eq!(p("Max(Integer(1), Symbol('a'))"), "max(1, s0)");
        assert_eq!(p("Mod(Integer(7), Integer(3))"), "1");
        assert!(p("Frobnicate(Integer(1))").starts_with("error: unsupported sympy function Frobnicate"));
    }
}
