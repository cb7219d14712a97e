//! Symbols of dynamic sizes: the table with their ranges, the sympy expressions that name
//! them, and the symbols whose values come from the data.
//!
//! torch.export gives a fresh symbol to every size it cannot express through earlier
//! ones. Three kinds reach aotc:
//! - input symbols (`s77`): the library binds them from the input shapes;
//! - data symbols (`u0`): the value of `tensor.item()` or the row count of `nonzero`,
//!   computed by the program, which then runs in stages ([`Lowerer::bind_data_symbol`]);
//! - derived symbols: a recorded size that aotc computes itself (`slice(x, 0, u20, u21)`
//!   has `u4` rows). The first check of a result against its recorded shape defines the
//!   symbol as aotc's expression ([`Lowerer::define_symbol`]), every later use is
//!   rewritten to it, and its recorded range becomes guards. aotc never takes a
//!   recorded size on trust.

use super::{abbreviate, Lowerer};
use crate::error::{Error, Result};
use crate::frontend::schema::{SymInt, SymIntArgument};
use crate::frontend::sympy;
use crate::ir::{BufId, DataBinding};
use aotc_abi::manifest::{GuardOp, SymbolRange};
use aotc_abi::sym::{set_scope_ranges, SymExpr, SymId};

/// The lower bound of a symbol whose range export left open below.
pub const UNBOUNDED_BELOW: i64 = i64::MIN;

impl Lowerer<'_> {
    pub(super) fn symbol_id(&mut self, name: &str) -> SymId {
        if let Some(i) = self.symbols.iter().position(|s| s.name == name) {
            return i as SymId;
        }
        // Open below until known to be an input dimension (check_input_symbols).
        self.symbols.push(SymbolRange { name: name.into(), min: UNBOUNDED_BELOW, max: None });
        self.hints.push(None);
        (self.symbols.len() - 1) as SymId
    }

    /// A recorded size, derived symbols rewritten (a free symbol stays itself).
    pub fn parse_sym(&mut self, s: &SymInt) -> std::result::Result<SymExpr, String> {
        match s {
            SymInt::Int(v) => Ok(SymExpr::Int(*v)),
            SymInt::Expr(e) => {
                let parsed = sympy::parse(&e.expr_str, &mut |n| self.symbol_id(n))
                    .map_err(|m| format!("symbolic size {}: {m}", abbreviate(&e.expr_str)))?;
                if let (SymExpr::Sym(id), Some(h)) =
                    (&parsed, e.hint.as_ref().and_then(|h| h.get("as_int")).and_then(|v| v.as_i64()))
                {
                    self.hints[*id as usize] = Some(h);
                }
                Ok(self.resolve(&parsed))
            }
        }
    }

    /// The expression a named SymInt argument records, derived symbols rewritten.
    pub fn sym_arg(&self, s: &SymIntArgument) -> std::result::Result<SymExpr, String> {
        let x = match s {
            SymIntArgument::Int(v) => Ok(SymExpr::Int(*v)),
            SymIntArgument::Name(n) => {
                let v = self
                    .src
                    .program
                    .graph_module
                    .graph
                    .sym_int_values
                    .get(n)
                    .ok_or_else(|| format!("SymInt '{n}' has no recorded value"))?;
                match v {
                    SymInt::Int(v) => Ok(SymExpr::Int(*v)),
                    SymInt::Expr(e) => {
                        // Only symbols of the table (inputs' or data's) can have values at run time.
                        const UNKNOWN: SymId = SymId::MAX;
                        let known = |name: &str| {
                            self.symbols.iter().position(|s| s.name == name).map_or(UNKNOWN, |i| i as SymId)
                        };
                        let x = sympy::parse(&e.expr_str, &mut |name| known(name))
                            .map_err(|m| format!("SymInt '{n}' ({}): {m}", abbreviate(&e.expr_str)))?;
                        let mut unknown = false;
                        x.for_each_symbol(&mut |i| unknown |= i == UNKNOWN);
                        if unknown {
                            Err(format!("SymInt '{n}' ({}) uses a symbol no input defines", abbreviate(&e.expr_str)))
                        } else {
                            Ok(x)
                        }
                    }
                }
            }
        }?;
        Ok(self.resolve(&x))
    }

    /// `e` with every derived symbol replaced by its definition.
    pub fn resolve(&self, e: &SymExpr) -> SymExpr {
        if self.defs.is_empty() {
            e.clone()
        } else {
            e.substitute(&|s| self.defs.get(&s).cloned())
        }
    }

    /// A symbol nothing defines yet: neither an input's, nor the data's, nor derived.
    pub(super) fn is_free(&self, s: SymId) -> bool {
        !self.input_symbols.contains(&s) && !self.data_symbols.contains(&s) && !self.defs.contains_key(&s)
    }

    /// Defines free symbol `s` as `value` (aotc's own size for what export recorded as
    /// `s`); export's range for `s` must hold for it.
    pub(super) fn define_symbol(&mut self, s: SymId, value: SymExpr) -> std::result::Result<(), String> {
        let r = self.symbols[s as usize].clone();
        if r.min != UNBOUNDED_BELOW {
            self.require(
                SymExpr::Int(r.min),
                GuardOp::Le,
                value.clone(),
                &format!("the size export named {} is at least {}", r.name, r.min),
            )?;
        }
        if let Some(max) = r.max {
            self.require(
                value.clone(),
                GuardOp::Le,
                SymExpr::Int(max),
                &format!("the size export named {} is at most {max}", r.name),
            )?;
        }
        self.defs.insert(s, value);
        Ok(())
    }

    /// The free symbol export recorded for a data-dependent value (`SymInt` output
    /// `name`, or a size of a result): it must be a lone symbol nothing defines yet.
    pub fn data_symbol(&mut self, recorded: &SymExpr, what: &str) -> std::result::Result<SymId, String> {
        match recorded {
            SymExpr::Sym(s) if self.is_free(*s) => Ok(*s),
            other => Err(format!("{what}: export recorded {other}, expected a new unbacked symbol")),
        }
    }

    /// Symbol `s` takes the int64 value of the one-element buffer `buf`, as the kernels
    /// emitted so far leave it; code that uses `s` runs in a later stage.
    pub fn bind_data_symbol(&mut self, s: SymId, buf: BufId) {
        self.data_symbols.insert(s);
        let after = self.prog.kernels.len();
        self.prog.data_symbols.push(DataBinding { sym: s, buf, after, what: self.node_desc.clone() });
    }

    /// The recorded expression of a SymInt output of the current node.
    pub fn recorded_sym_output(&mut self, name: &str) -> std::result::Result<SymExpr, String> {
        let v = self
            .src
            .program
            .graph_module
            .graph
            .sym_int_values
            .get(name)
            .ok_or_else(|| format!("SymInt '{name}' has no recorded value"))?;
        self.parse_sym(v)
    }

    /// Names a value that is not a tensor in the graph (a float `item()`), for the
    /// operands that use it.
    pub fn define_scalar(&mut self, name: &str, value: crate::lower::tensor::TensorValue) {
        let value = self.stamp(value);
        self.env.insert(name.to_string(), value);
    }

    /// Symbols with their ranges from `range_constraints`: an empty range could never be
    /// called. A range open below stays open ([`UNBOUNDED_BELOW`]) until
    /// [`Lowerer::check_input_symbols`] knows which symbols are sizes. From here on the
    /// sizes this thread builds are simplified with the table's ranges (`set_scope_ranges`),
    /// as torch.export simplified the sizes it recorded.
    pub(super) fn bind_range_constraints(&mut self) -> Result<()> {
        for (name, rc) in &self.src.program.range_constraints {
            let (min, max) = (rc.min_val.unwrap_or(UNBOUNDED_BELOW), rc.max_val);
            if let Some(max) = max.filter(|&max| max < min) {
                return Err(Error::Format {
                    path: self.src.path.clone(),
                    message: format!("range constraint of {name}: minimum {min} is larger than maximum {max}"),
                });
            }
            let id = self.symbol_id(name) as usize;
            self.symbols[id].min = min;
            self.symbols[id].max = max.filter(|&m| m < i64::MAX / 2);
        }
        set_scope_ranges(&self.symbols);
        Ok(())
    }

    /// The symbols of input dimensions: sizes, so their range starts at 0 at the lowest.
    pub(super) fn check_input_symbols(&mut self, sizes: &[SymExpr]) -> Result<()> {
        for e in sizes {
            let mut syms = vec![];
            e.for_each_symbol(&mut |s| syms.push(s));
            for s in syms {
                let r = &mut self.symbols[s as usize];
                if r.min == UNBOUNDED_BELOW {
                    r.min = 0;
                } else if r.min < 0 {
                    return Err(Error::Format {
                        path: self.src.path.clone(),
                        message: format!(
                            "range constraint of {}: minimum {} is negative, but {} is an input dimension",
                            r.name, r.min, r.name
                        ),
                    });
                }
                self.input_symbols.insert(s);
            }
        }
        set_scope_ranges(&self.symbols);
        Ok(())
    }
}
