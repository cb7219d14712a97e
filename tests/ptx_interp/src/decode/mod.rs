//! From a parsed entry to a `Kernel`: register slots assigned, operands resolved to slots,
//! labels to instruction indices, parameters and shared variables laid out.

mod data;
mod math;
mod mods;

use std::collections::HashMap;

use crate::error::ParseError;
use crate::inst::{Inst, Op, Slot, UNGUARDED};
use crate::kernel::{special, Kernel, Param, ParamKind};
use crate::lex::Token;
use crate::parse::{parse_u64, BodyItem, EntryDecl, Statement};
use mods::{type_bits, Mods};

/// Static shared memory a CTA may declare (the hardware limit without opt-in).
const MAX_SHARED_BYTES: u64 = 48 * 1024;
/// Register-file slots per thread (registers, immediates, special registers): a CTA
/// holds 1024 copies, and real kernels use a few hundred.
const MAX_SLOTS: usize = 1 << 15;

/// What an immediate operand is read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Imm {
    /// An integer or bit pattern of this many bits (a `0f`/`0d` pattern of that width too).
    Bits(u32),
    F32,
    F64,
}

/// Where an address operand points.
pub(crate) enum Base {
    /// A register or immediate slot holding the address.
    Slot(Slot),
    /// A parameter, by byte offset in the parameter buffer.
    Param(u32),
}

struct Decoder<'a> {
    entry: &'a EntryDecl,
    registers: HashMap<String, Slot>,
    shared: HashMap<&'a str, u64>,
    params: HashMap<&'a str, &'a Param>,
    labels: HashMap<&'a str, u32>,
    constants: HashMap<u64, Slot>,
    slot_names: Vec<String>,
    initial_values: Vec<u64>,
}

pub(crate) fn decode_entry(entry: &EntryDecl) -> Result<Kernel, ParseError> {
    let (params, param_bytes) = layout_params(entry)?;
    let (shared_offsets, shared_bytes) = layout_shared(entry)?;
    let mut decoder = Decoder {
        entry,
        registers: HashMap::new(),
        shared: shared_offsets,
        params: params.iter().map(|p| (p.name.as_str(), p)).collect(),
        labels: HashMap::new(),
        constants: HashMap::new(),
        slot_names: Vec::new(),
        initial_values: Vec::new(),
    };
    decoder.declare_registers()?;
    let first_constant = decoder.slot_names.len();
    decoder.collect_labels()?;
    let mut code = Vec::new();
    let mut lines = Vec::new();
    let mut texts = Vec::new();
    for item in &entry.body {
        if let BodyItem::Instruction(statement) = item {
            code.push(decoder.statement(statement)?);
            lines.push(statement.line);
            texts.push(statement.text.clone());
        }
    }
    let Decoder { slot_names, initial_values, .. } = decoder;
    let mut initially_written = vec![false; slot_names.len()];
    initially_written[..special::COUNT as usize].fill(true);
    initially_written[first_constant..].fill(true);
    Ok(Kernel {
        name: entry.name.clone(),
        params,
        param_bytes,
        maxntid: entry.maxntid,
        shared_bytes: shared_bytes as u32,
        code,
        lines,
        texts,
        slot_names,
        initial_values,
        initially_written,
    })
}

fn layout_params(entry: &EntryDecl) -> Result<(Vec<Param>, u32), ParseError> {
    let mut params: Vec<Param> = Vec::new();
    let mut offset = 0u32;
    for decl in &entry.params {
        let bytes = type_bits(&decl.ty).unwrap_or(64) / 8;
        let kind = match decl.ty.as_bytes()[0] {
            b'f' => ParamKind::Float,
            b'b' => ParamKind::Bits,
            _ => ParamKind::Int,
        };
        if params.iter().any(|p| p.name == decl.name) {
            return Err(ParseError { line: entry.line, message: format!("parameter `{}` declared twice", decl.name) });
        }
        offset = offset.next_multiple_of(bytes);
        params.push(Param { name: decl.name.clone(), ty: decl.ty.clone(), kind, bytes, offset });
        offset += bytes;
    }
    Ok((params, offset))
}

fn layout_shared(entry: &EntryDecl) -> Result<(HashMap<&str, u64>, u64), ParseError> {
    let mut offsets = HashMap::new();
    let mut end = 0u64;
    for decl in &entry.shared {
        let offset = end.next_multiple_of(decl.align);
        end = offset.saturating_add(decl.bytes);
        if end > MAX_SHARED_BYTES {
            return Err(ParseError {
                line: decl.line,
                message: format!("more than {MAX_SHARED_BYTES} bytes of shared memory"),
            });
        }
        if offsets.insert(decl.name.as_str(), offset).is_some() {
            return Err(ParseError {
                line: decl.line,
                message: format!("shared variable `{}` declared twice", decl.name),
            });
        }
    }
    Ok((offsets, end))
}

impl<'a> Decoder<'a> {
    fn new_slot(&mut self, name: String, value: u64) -> Result<Slot, ParseError> {
        if self.slot_names.len() >= MAX_SLOTS {
            let message = format!("more than {MAX_SLOTS} registers and distinct immediates");
            return Err(ParseError { line: self.entry.line, message });
        }
        let slot = self.slot_names.len() as Slot;
        self.slot_names.push(name);
        self.initial_values.push(value);
        Ok(slot)
    }

    fn declare_registers(&mut self) -> Result<(), ParseError> {
        for (dim, base) in
            [("tid", special::TID), ("ntid", special::NTID), ("ctaid", special::CTAID), ("nctaid", special::NCTAID)]
        {
            for (i, axis) in ["x", "y", "z"].iter().enumerate() {
                let name = format!("%{dim}.{axis}");
                self.registers.insert(name.clone(), base + i as u32);
                self.new_slot(name, 0)?;
            }
        }
        for name in ["%laneid", "%warpid"] {
            let slot = self.new_slot(name.into(), 0)?;
            self.registers.insert(name.into(), slot);
        }
        for decl in &self.entry.regs {
            if type_bits(decl.ty.trim_start_matches('.')).is_none() || !decl.ty.starts_with('.') {
                return Err(ParseError {
                    line: decl.line,
                    message: format!("register type `{}` is not supported", decl.ty),
                });
            }
            for name in &decl.names {
                if !name.starts_with('%') || self.registers.contains_key(name) {
                    return Err(ParseError {
                        line: decl.line,
                        message: format!("register `{name}` is not a fresh %name"),
                    });
                }
                let slot = self.new_slot(name.clone(), 0)?;
                self.registers.insert(name.clone(), slot);
            }
        }
        Ok(())
    }

    fn collect_labels(&mut self) -> Result<(), ParseError> {
        let mut pc = 0u32;
        for item in &self.entry.body {
            match item {
                BodyItem::Label(name, line) => {
                    if self.labels.insert(name, pc).is_some() {
                        return Err(ParseError { line: *line, message: format!("label `{name}` defined twice") });
                    }
                }
                BodyItem::Instruction(_) => pc += 1,
            }
        }
        Ok(())
    }

    fn statement(&mut self, statement: &Statement) -> Result<Inst, ParseError> {
        let mut mods = Mods::new(&statement.opcode, statement.line, &statement.text);
        let (guard, guard_negated) = match &statement.guard {
            Some((name, negated)) => (self.register(name, &mods)?, *negated),
            None => (UNGUARDED, false),
        };
        let operands = &statement.operands;
        let op = match mods.name {
            "mov" | "ld" | "st" | "cvta" | "cvt" | "atom" => data::decode(self, &mut mods, operands)?,
            "bra" | "ret" | "exit" | "bar" | "barrier" | "shfl" | "membar" | "fence" => {
                self.control(&mut mods, operands)?
            }
            _ => math::decode(self, &mut mods, operands)?,
        };
        mods.finish()?;
        Ok(Inst { op, guard, guard_negated })
    }

    fn control(&mut self, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
        let op = match mods.name {
            "bra" => {
                mods.flag("uni");
                let [label] = operands else {
                    return Err(mods.error("bra takes one label"));
                };
                let name = single_word(label).ok_or_else(|| mods.error("bra takes one label"))?;
                let target = *self.labels.get(name).ok_or_else(|| mods.error(format!("no label `{name}`")))?;
                Op::Bra { target }
            }
            "ret" | "exit" if operands.is_empty() => Op::Exit,
            "bar" | "barrier" => {
                mods.flag("aligned");
                if !mods.flag("sync") {
                    return Err(mods.error("only bar.sync is supported"));
                }
                mods.flag("aligned");
                let [id] = operands else {
                    return Err(mods.error("only `bar.sync 0` is supported"));
                };
                if single_word(id) != Some("0") {
                    return Err(mods.error("only barrier 0 is supported"));
                }
                Op::BarSync
            }
            "shfl" => self.shfl(mods, operands)?,
            "membar" => {
                mods.take(&["cta", "gl", "sys"]).ok_or_else(|| mods.error("membar needs a scope"))?;
                Op::Nop
            }
            "fence" => {
                mods.take(&["sc", "acq_rel"]);
                mods.take(&["cta", "gpu", "sys"]).ok_or_else(|| mods.error("fence needs a scope"))?;
                Op::Nop
            }
            _ => return Err(mods.error("unexpected operands")),
        };
        Ok(op)
    }

    fn shfl(&mut self, mods: &mut Mods, operands: &[Vec<Token>]) -> Result<Op, ParseError> {
        use crate::inst::ShflMode;
        if !mods.flag("sync") {
            return Err(mods.error("only shfl.sync is supported"));
        }
        let mode = match mods.take(&["up", "down", "bfly", "idx"]) {
            Some("up") => ShflMode::Up,
            Some("down") => ShflMode::Down,
            Some("bfly") => ShflMode::Bfly,
            Some(_) => ShflMode::Idx,
            None => return Err(mods.error("missing shuffle mode")),
        };
        if mods.take_last()? != "b32" {
            return Err(mods.error("shfl.sync is .b32 only"));
        }
        let [dest, a, b, c, mask] = operands else {
            return Err(mods.error("shfl.sync takes 5 operands"));
        };
        let (d, p) = match dest.iter().position(|t| t.is('|')) {
            Some(bar) => (self.dst(&dest[..bar], mods)?, Some(self.dst(&dest[bar + 1..], mods)?)),
            None => (self.dst(dest, mods)?, None),
        };
        Ok(Op::Shfl {
            mode,
            d,
            p,
            a: self.src(a, Imm::Bits(32), mods)?,
            b: self.src(b, Imm::Bits(32), mods)?,
            c: self.src(c, Imm::Bits(32), mods)?,
            mask: self.src(mask, Imm::Bits(32), mods)?,
        })
    }

    /// A declared register or special register by name.
    fn register(&self, name: &str, mods: &Mods) -> Result<Slot, ParseError> {
        self.registers.get(name).copied().ok_or_else(|| mods.error(format!("`{name}` is not a declared register")))
    }

    /// A destination: a declared register (not a special register or immediate).
    pub(crate) fn dst(&self, tokens: &[Token], mods: &Mods) -> Result<Slot, ParseError> {
        let name = single_word(tokens).ok_or_else(|| mods.error("destination must be a register"))?;
        let slot = self.register(name, mods)?;
        if slot < special::COUNT {
            return Err(mods.error(format!("`{name}` cannot be written")));
        }
        Ok(slot)
    }

    fn constant(&mut self, value: u64) -> Result<Slot, ParseError> {
        if let Some(&slot) = self.constants.get(&value) {
            return Ok(slot);
        }
        let slot = self.new_slot(format!("{value:#x}"), value)?;
        self.constants.insert(value, slot);
        Ok(slot)
    }

    /// A source operand: register, special register, immediate or shared symbol address.
    pub(crate) fn src(&mut self, tokens: &[Token], imm: Imm, mods: &Mods) -> Result<Slot, ParseError> {
        let (negative, rest) = match tokens.split_first() {
            Some((first, rest)) if first.is('-') => (true, rest),
            _ => (false, tokens),
        };
        let word = single_word(rest).ok_or_else(|| mods.error("operand is not a register or immediate"))?;
        if word.starts_with('%') && !negative {
            return self.register(word, mods);
        }
        if let Some(&offset) = self.shared.get(word).filter(|_| !negative) {
            return self.constant(offset);
        }
        let value = immediate(word, negative, imm).ok_or_else(|| mods.error(format!("bad immediate `{word}` here")))?;
        self.constant(value)
    }

    /// An address operand `[base]`, `[base+imm]` or `[base-imm]`.
    pub(crate) fn address(&mut self, tokens: &[Token], mods: &Mods) -> Result<(Base, i64), ParseError> {
        let bad = || mods.error("bad address operand");
        let inner = match tokens {
            [open, inner @ .., close] if open.is('[') && close.is(']') => inner,
            _ => return Err(bad()),
        };
        let (base, offset) = match inner {
            [base] => (base, 0i64),
            [base, sign, value] if sign.is('+') || sign.is('-') => {
                let value = value.word().and_then(parse_u64).and_then(|v| i64::try_from(v).ok()).ok_or_else(bad)?;
                (base, if sign.is('-') { -value } else { value })
            }
            [base, plus, minus, value] if plus.is('+') && minus.is('-') => {
                let value = value.word().and_then(parse_u64).and_then(|v| i64::try_from(v).ok()).ok_or_else(bad)?;
                (base, -value)
            }
            _ => return Err(bad()),
        };
        let name = base.word().ok_or_else(bad)?;
        if let Some(param) = self.params.get(name) {
            let offset =
                (param.offset as i64).checked_add(offset).and_then(|o| u32::try_from(o).ok()).ok_or_else(bad)?;
            return Ok((Base::Param(offset), 0));
        }
        Ok((Base::Slot(self.src(std::slice::from_ref(base), Imm::Bits(64), mods)?), offset))
    }

    /// The registers of a `{a, b, ...}` vector operand, or of a single register.
    pub(crate) fn vector(&self, tokens: &[Token], mods: &Mods) -> Result<Vec<Slot>, ParseError> {
        match tokens {
            [open, inner @ .., close] if open.is('{') && close.is('}') => {
                if inner.len() % 2 == 0 {
                    return Err(mods.error("bad vector operand"));
                }
                let mut slots = Vec::new();
                for (i, token) in inner.iter().enumerate() {
                    if i % 2 == 0 {
                        slots.push(self.dst(std::slice::from_ref(token), mods)?);
                    } else if !token.is(',') {
                        return Err(mods.error("bad vector operand"));
                    }
                }
                Ok(slots)
            }
            _ => Ok(vec![self.dst(tokens, mods)?]),
        }
    }
}

pub(crate) fn single_word(tokens: &[Token]) -> Option<&str> {
    match tokens {
        [token] => token.word(),
        _ => None,
    }
}

/// An immediate's bits: integers (masked to the width), `0f`/`0d` float bit patterns.
fn immediate(word: &str, negative: bool, imm: Imm) -> Option<u64> {
    let hex_float = |prefix: &str, digits: usize| {
        let hex = word.strip_prefix(prefix).or_else(|| word.strip_prefix(&prefix.to_uppercase()))?;
        (hex.len() == digits && !negative).then(|| u64::from_str_radix(hex, 16).ok()).flatten()
    };
    match imm {
        Imm::F32 => hex_float("0f", 8),
        Imm::F64 => hex_float("0d", 16),
        Imm::Bits(bits) => {
            if let Some(value) = hex_float("0f", 8).filter(|_| bits == 32) {
                return Some(value);
            }
            if let Some(value) = hex_float("0d", 16).filter(|_| bits == 64) {
                return Some(value);
            }
            let magnitude = parse_u64(word)?;
            let value = if negative { magnitude.wrapping_neg() } else { magnitude };
            Some(if bits >= 64 { value } else { value & ((1u64 << bits) - 1) })
        }
    }
}
