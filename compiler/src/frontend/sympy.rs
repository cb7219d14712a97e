//! Parses the sympy `srepr` strings torch.export writes for symbolic sizes, e.g.
//! `Add(Mul(Integer(2), Symbol('s0', positive=True, integer=True)), Integer(1))`.
//!
//! The text comes from the archive, so the parser bounds what it can be made to do: the
//! text's length, its nesting depth (the parser recurses) and the trees it builds, which
//! later passes recurse over too: no deeper than the text's nesting plus log2(arguments)
//! per `Max`/`Min`, and `Pow` expansion capped.

use aotc_abi::sym::{SymExpr, SymId};

/// Far longer and deeper than any expression torch.export writes; small enough for any stack.
const MAX_LEN: usize = 1 << 20;
const MAX_DEPTH: usize = 64;
/// Nodes `Pow` may add by repeating its base (`Pow(Pow(x, 16), 16)...` grows exponentially).
const MAX_NODES: usize = 1 << 16;

/// Parses `text`; `symbol` maps a symbol name to its id.
pub fn parse(text: &str, symbol: &mut dyn FnMut(&str) -> SymId) -> Result<SymExpr, String> {
    if text.len() > MAX_LEN {
        return Err(format!("symbolic expression is {} bytes long, more than the {MAX_LEN} aotc reads", text.len()));
    }
    let mut p = Parser { s: text.as_bytes(), i: 0, depth: 0, nodes: 0, symbol };
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
    depth: usize,
    /// Nodes added by `Pow` expansion so far.
    nodes: usize,
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
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
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
        let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        digits.parse().map_err(|_| match digits.trim_start_matches('-') {
            "" => format!("expected an integer at byte {start}"),
            _ => format!("integer {digits} at byte {start} does not fit in 64 bits"),
        })
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
        if self.depth == MAX_DEPTH {
            return Err(format!("symbolic expression nested deeper than {MAX_DEPTH} levels (at byte {})", self.i));
        }
        self.depth += 1;
        let e = self.call();
        self.depth -= 1;
        e
    }

    /// `Head(args...)` or a bare integer.
    fn call(&mut self) -> Result<SymExpr, String> {
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
            "Max" => balanced(self.args()?, SymExpr::max).ok_or("Max()".into()),
            "Min" => balanced(self.args()?, SymExpr::min).ok_or("Min()".into()),
            "CeilToInt" | "FloorToInt" | "TruncToInt" => {
                // A size torch computed in floating point (`x * 0.5` for a resize), rounded.
                let (e, shift) = self.scaled()?;
                self.expect(b')')?;
                let den = SymExpr::Int(1 << shift);
                Ok(match head.as_str() {
                    "CeilToInt" => SymExpr::floor_div(SymExpr::add([e, SymExpr::Int((1 << shift) - 1)]), den),
                    // Truncation and flooring agree on sizes, which are never negative.
                    _ => SymExpr::floor_div(e, den),
                })
            }
            "CleanDiv" | "IntTrueDiv" => two(self.args()?, SymExpr::floor_div),
            "Pow" | "PowByNatural" => {
                let v = self.args()?;
                match v.as_slice() {
                    [b, SymExpr::Int(e @ 0..=16)] => {
                        let e = *e as usize;
                        self.nodes = self.nodes.saturating_add(node_count(b).saturating_mul(e));
                        if self.nodes > MAX_NODES {
                            return Err(format!("symbolic expression expands to more than {MAX_NODES} nodes"));
                        }
                        Ok(SymExpr::mul(std::iter::repeat_n(b.clone(), e)))
                    }
                    _ => Err(format!("unsupported power {v:?}")),
                }
            }
            other => Err(format!("unsupported sympy function {other}")),
        }
    }
}

impl Parser<'_, '_> {
    /// A real-valued size as `e / 2^shift`: `ToFloat(x)`, `Float('0.5')`, their products,
    /// or an integer expression. Only exact binary fractions are representable.
    fn scaled(&mut self) -> Result<(SymExpr, u32), String> {
        if self.depth == MAX_DEPTH {
            return Err(format!("symbolic expression nested deeper than {MAX_DEPTH} levels (at byte {})", self.i));
        }
        self.depth += 1;
        let r = self.scaled_call();
        self.depth -= 1;
        r
    }

    fn scaled_call(&mut self) -> Result<(SymExpr, u32), String> {
        let start = self.i;
        match self.ident().as_str() {
            "ToFloat" => {
                self.expect(b'(')?;
                let e = self.expr()?;
                self.expect(b')')?;
                Ok((e, 0))
            }
            "Float" => {
                self.expect(b'(')?;
                let text = self.string()?;
                self.skip_keywords();
                self.expect(b')')?;
                let (num, shift) = dyadic(&text)?;
                Ok((SymExpr::Int(num), shift))
            }
            "Mul" => {
                self.expect(b'(')?;
                let (mut product, mut shift) = (SymExpr::Int(1), 0u32);
                loop {
                    let (e, s) = self.scaled()?;
                    product = SymExpr::mul([product, e]);
                    shift = shift
                        .checked_add(s)
                        .filter(|&t| t <= 40)
                        .ok_or("symbolic size scaled by too small a fraction")?;
                    if !self.eat(b',') {
                        break;
                    }
                }
                self.expect(b')')?;
                Ok((product, shift))
            }
            _ => {
                self.i = start;
                Ok((self.expr()?, 0))
            }
        }
    }
}

/// `text` (a float) as `num / 2^shift` exactly, or an error for other fractions.
fn dyadic(text: &str) -> Result<(i64, u32), String> {
    let v: f64 = text.parse().map_err(|_| format!("Float('{text}') is not a number"))?;
    (0..=40)
        .map(|k| (v * (1u64 << k) as f64, k))
        .find(|(x, _)| x.fract() == 0.0 && x.abs() < (1u64 << 53) as f64)
        .map(|(x, k)| (x as i64, k))
        .ok_or_else(|| {
            format!("Float('{text}') in a symbolic size is not a binary fraction; aotc computes sizes exactly")
        })
}

/// Folds `xs` pairwise, level by level, so that `Max` of n arguments is about log2(n)
/// levels deep rather than n.
fn balanced(mut xs: Vec<SymExpr>, f: fn(SymExpr, SymExpr) -> SymExpr) -> Option<SymExpr> {
    while xs.len() > 1 {
        let mut rest = xs.into_iter();
        let mut level = Vec::new();
        while let Some(a) = rest.next() {
            level.push(match rest.next() {
                Some(b) => f(a, b),
                None => a,
            });
        }
        xs = level;
    }
    xs.pop()
}

/// The nodes of `e` (a tree the parser built, so of bounded depth).
fn node_count(e: &SymExpr) -> usize {
    match e {
        SymExpr::Int(_) | SymExpr::Sym(_) => 1,
        SymExpr::Add(xs) | SymExpr::Mul(xs) | SymExpr::Max(xs) | SymExpr::Min(xs) => {
            xs.iter().map(node_count).fold(1, usize::saturating_add)
        }
        SymExpr::FloorDiv(a, b) | SymExpr::Mod(a, b) => node_count(a).saturating_add(node_count(b)).saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> String {
        let mut names: Vec<String> = vec![];
        let mut id = |n: &str| {
            if let Some(i) = names.iter().position(|x| x == n) {
                return i as u32;
            }
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
        // Resize outputs: trunc(0.5 * x) and ceil(x * 1.5).
        assert_eq!(p("TruncToInt(Mul(Float('0.5', precision=53), ToFloat(Symbol('s0'))))"), "floordiv(s0, 2)");
        assert_eq!(p("CeilToInt(Mul(ToFloat(Symbol('s0')), Float('1.5', precision=53)))"), "floordiv((3*s0) + 1, 2)");
        assert!(p("FloorToInt(Mul(Float('0.7'), ToFloat(Symbol('s0'))))").contains("not a binary fraction"));
        assert!(p("Frobnicate(Integer(1))").starts_with("error: unsupported sympy function Frobnicate"));
    }

    #[test]
    fn bounds_what_the_text_can_make_it_build() {
        let nested = |n: usize| format!("{}Symbol('s0'){}", "Add(".repeat(n), ", Integer(1))".repeat(n));
        assert_eq!(p(&nested(MAX_DEPTH - 1)), format!("s0 + {}", MAX_DEPTH - 1));
        for n in [MAX_DEPTH, 20_000] {
            assert!(
                p(&nested(n)).starts_with("error: symbolic expression nested deeper than 64 levels (at byte 256)"),
                "{n}"
            );
        }
        let powers = format!("{}Symbol('s0'){}", "Pow(".repeat(8), ", Integer(16))".repeat(8));
        assert_eq!(p(&powers), "error: symbolic expression expands to more than 65536 nodes");
        // A wide Max is a shallow tree: Display (recursive) gets through it.
        let wide = (0..4_000).map(|i| format!("Symbol('s{i}')")).collect::<Vec<_>>().join(", ");
        assert!(p(&format!("Max({wide})")).starts_with("max(max("));
        assert_eq!(
            p("Integer(99999999999999999999)"),
            "error: integer 99999999999999999999 at byte 8 does not fit in 64 bits"
        );
        assert!(p(&" ".repeat(MAX_LEN + 1)).starts_with("error: symbolic expression is 1048577 bytes long"));
    }
}
