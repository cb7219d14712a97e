//! A small structured PTX emitter: typed virtual registers allocated per kind, one
//! `.reg` declaration per kind, instructions as an opcode and typed operands, labels.
//! Kernel code builds instructions through it and never formats PTX text itself.

use std::fmt;

/// The register kinds the kernels use, each declared once as `.reg .KIND %prefix<N>;`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pred,
    B16,
    B32,
    B64,
    F32,
    F64,
}

const KINDS: [Kind; 6] = [Kind::Pred, Kind::B16, Kind::B32, Kind::B64, Kind::F32, Kind::F64];

impl Kind {
    fn slot(self) -> usize {
        self as usize
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::Pred => "p",
            Kind::B16 => "h",
            Kind::B32 => "r",
            Kind::B64 => "rd",
            Kind::F32 => "f",
            Kind::F64 => "fd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            Kind::Pred => ".pred",
            Kind::B16 => ".b16",
            Kind::B32 => ".b32",
            Kind::B64 => ".b64",
            Kind::F32 => ".f32",
            Kind::F64 => ".f64",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    pub kind: Kind,
    n: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}{}", self.kind.prefix(), self.n)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(u32);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.0)
    }
}

/// An instruction operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Reg(Reg),
    Int(i64),
    /// Printed as its bit pattern, `0fXXXXXXXX`.
    F32(f32),
    /// Printed as its bit pattern, `0dXXXXXXXXXXXXXXXX`.
    F64(f64),
    /// `[reg+offset]`.
    At(Reg, i64),
    /// `[name+offset]`: a parameter or shared symbol.
    AtSym(String, i64),
    /// A symbol's address (`mov.u64 %rd1, name;`).
    Sym(String),
    /// `%tid.x` and the like.
    Special(&'static str),
    /// `{lo, hi}`, for `mov.b64` packing and unpacking.
    Pair(Reg, Reg),
    Label(Label),
}

impl From<Reg> for Op {
    fn from(r: Reg) -> Op {
        Op::Reg(r)
    }
}

impl From<i64> for Op {
    fn from(v: i64) -> Op {
        Op::Int(v)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Reg(r) => write!(f, "{r}"),
            Op::Int(v) => write!(f, "{v}"),
            Op::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
            Op::F64(v) => write!(f, "0d{:016X}", v.to_bits()),
            Op::At(r, 0) => write!(f, "[{r}]"),
            Op::At(r, off) => write!(f, "[{r}+{off}]"),
            Op::AtSym(s, 0) => write!(f, "[{s}]"),
            Op::AtSym(s, off) => write!(f, "[{s}+{off}]"),
            Op::Sym(s) => write!(f, "{s}"),
            Op::Special(s) => write!(f, "{s}"),
            Op::Pair(a, b) => write!(f, "{{{a}, {b}}}"),
            Op::Label(l) => write!(f, "{l}"),
        }
    }
}

/// One kernel body under construction.
#[derive(Default)]
pub struct Body {
    counts: [u32; 6],
    labels: u32,
    lines: Vec<String>,
    shared: Vec<String>,
}

impl Body {
    pub fn reg(&mut self, kind: Kind) -> Reg {
        self.counts[kind.slot()] += 1;
        Reg { kind, n: self.counts[kind.slot()] }
    }

    /// `opcode args...;`
    pub fn emit(&mut self, opcode: &str, args: &[Op]) {
        self.line(None, opcode, args);
    }

    /// `@p opcode args...;` (`@!p` when `negate`).
    pub fn emit_if(&mut self, p: Reg, negate: bool, opcode: &str, args: &[Op]) {
        self.line(Some((p, negate)), opcode, args);
    }

    /// A new register of `kind` defined by `opcode dest, args...;`.
    pub fn def(&mut self, opcode: &str, kind: Kind, args: &[Op]) -> Reg {
        let d = self.reg(kind);
        let mut all = vec![Op::Reg(d)];
        all.extend_from_slice(args);
        self.emit(opcode, &all);
        d
    }

    /// `opcode dest, args...;` into an existing register (loop-carried values).
    pub fn set(&mut self, opcode: &str, dest: Reg, args: &[Op]) {
        let mut all = vec![Op::Reg(dest)];
        all.extend_from_slice(args);
        self.emit(opcode, &all);
    }

    fn line(&mut self, guard: Option<(Reg, bool)>, opcode: &str, args: &[Op]) {
        let guard = match guard {
            Some((p, neg)) => format!("@{}{p} ", if neg { "!" } else { "" }),
            None => String::new(),
        };
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let sep = if args.is_empty() { "" } else { " " };
        self.lines.push(format!("\t{guard}{opcode}{sep}{};", args.join(", ")));
    }

    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels)
    }

    pub fn place(&mut self, l: Label) {
        self.lines.push(format!("{l}:"));
    }

    pub fn bra(&mut self, l: Label) {
        self.emit("bra.uni", &[Op::Label(l)]);
    }

    /// Branches to `l` when `p` holds (or, with `negate`, when it does not).
    pub fn bra_if(&mut self, p: Reg, negate: bool, l: Label) {
        self.emit_if(p, negate, "bra", &[Op::Label(l)]);
    }

    pub fn comment(&mut self, text: &str) {
        self.lines.push(format!("\t// {}", text.replace('\n', " ")));
    }

    /// Declares `bytes` of per-CTA shared memory named `name`.
    pub fn shared(&mut self, name: &str, align: u32, bytes: u64) {
        self.shared.push(format!("\t.shared .align {align} .b8 {name}[{bytes}];"));
    }

    /// The entry's text: `.visible .entry name(params) .maxntid threads,1,1 { ... }`;
    /// `params` are (PTX type, name) pairs. `.minnctapersm 1` (no semantics) keeps
    /// ptxas from capping registers for occupancy, which made it spill.
    pub fn finish(mut self, name: &str, params: &[(&str, String)], threads: u32) -> String {
        self.emit("ret", &[]);
        let params: Vec<String> = params.iter().map(|(ty, n)| format!("\t.param {ty} {n}")).collect();
        let mut out = format!(
            ".visible .entry {name}(\n{}\n)\n.maxntid {threads}, 1, 1\n.minnctapersm 1\n{{\n",
            params.join(",\n")
        );
        for k in KINDS {
            let n = self.counts[k.slot()];
            if n > 0 {
                out.push_str(&format!("\t.reg {} %{}<{}>;\n", k.decl(), k.prefix(), n + 1));
            }
        }
        for s in &self.shared {
            out.push_str(s);
            out.push('\n');
        }
        for l in &self.lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_declared_per_kind_and_floats_print_as_bit_patterns() {
        let mut b = Body::default();
        let x = b.def("mov.f32", Kind::F32, &[Op::F32(1.0)]);
        let y = b.def("add.rn.f32", Kind::F32, &[x.into(), Op::F32(-2.5)]);
        let p = b.def("setp.lt.f32", Kind::Pred, &[y.into(), Op::F32(0.0)]);
        let l = b.label();
        b.bra_if(p, true, l);
        let d = b.reg(Kind::F64);
        b.emit("mov.f64", &[d.into(), Op::F64(0.5)]);
        b.place(l);
        let text = b.finish("k", &[(".u64", "b0".into())], 256);
        assert!(text.contains(".reg .f32 %f<3>;"), "{text}");
        assert!(text.contains("mov.f32 %f1, 0f3F800000;"), "{text}");
        assert!(text.contains("add.rn.f32 %f2, %f1, 0fC0200000;"), "{text}");
        assert!(text.contains("@!%p1 bra L1;"), "{text}");
        assert!(text.contains("mov.f64 %fd1, 0d3FE0000000000000;"), "{text}");
        assert!(text.contains(".maxntid 256, 1, 1"), "{text}");
    }
}
