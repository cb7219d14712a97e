//! Loads, stores and atomics on global, shared and parameter memory: bounds, alignment,
//! and the race logs.

use super::Env;
use crate::error::ErrorKind;
use crate::inst::{AtomOp, AtomTy, MemTy};
use crate::race::Conflict;

/// The little-endian value of `bytes` (1, 2, 4 or 8 of them), extended as `ty` says.
/// Fixed-size reads per width: a variable-length copy here costs a memcpy call and a
/// store-forwarding stall on every load.
#[inline(always)]
fn decode(bytes: &[u8], ty: MemTy) -> u64 {
    let (raw, bits) = match *bytes {
        [a] => (a as u64, 8),
        [a, b] => (u16::from_le_bytes([a, b]) as u64, 16),
        [a, b, c, d] => (u32::from_le_bytes([a, b, c, d]) as u64, 32),
        [a, b, c, d, e, f, g, h] => return u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        _ => return 0, // decoding admits no other width
    };
    if ty.signed {
        let shift = 64 - bits;
        (((raw << shift) as i64) >> shift) as u64
    } else {
        raw
    }
}

#[inline(always)]
fn encode(value: u64, out: &mut [u8]) {
    match out.len() {
        1 => out[0] = value as u8,
        2 => out.copy_from_slice(&(value as u16).to_le_bytes()),
        4 => out.copy_from_slice(&(value as u32).to_le_bytes()),
        _ => out.copy_from_slice(&value.to_le_bytes()),
    }
}

fn check_alignment(address: u64, bytes: u64) -> Result<(), ErrorKind> {
    if !address.is_multiple_of(bytes) {
        return Err(ErrorKind::Misaligned { address, bytes });
    }
    Ok(())
}

impl Env<'_> {
    fn conflict(&self, address: u64, conflict: Conflict, shared: bool) -> ErrorKind {
        let (other_cta, other_thread) = if shared {
            (self.cta, self.thread_index(conflict.other))
        } else {
            self.global_thread_index(conflict.other)
        };
        let other_wrote = conflict.other_wrote;
        if shared {
            ErrorKind::SharedRace { address, other_cta, other_thread, other_wrote }
        } else {
            ErrorKind::GlobalRace { address, other_cta, other_thread, other_wrote }
        }
    }

    /// The allocation and offset of a global access of `bytes` at `address`, logged.
    #[inline(always)]
    fn global(&mut self, address: u64, bytes: u64, thread: u32, write: bool) -> Result<(usize, usize), ErrorKind> {
        check_alignment(address, bytes)?;
        let (index, offset) =
            self.memory.locate(address, bytes).map_err(|_| ErrorKind::OutOfBounds { address, bytes })?;
        if let Some(races) = self.races.as_mut() {
            let len = self.memory.allocation_len(index);
            let id = self.first_global_thread + thread;
            if let Err(conflict) = races.global(index, len).access(offset, bytes as usize, id, write) {
                let at = address - offset as u64 + conflict.offset as u64;
                return Err(self.conflict(at, conflict, false));
            }
        }
        Ok((index, offset))
    }

    /// The offset of a shared access, logged.
    #[inline(always)]
    fn shared(&mut self, address: u64, bytes: u64, thread: u32, write: bool) -> Result<usize, ErrorKind> {
        check_alignment(address, bytes)?;
        let shared_bytes = self.shared.len() as u64;
        if address.checked_add(bytes).is_none_or(|end| end > shared_bytes) {
            return Err(ErrorKind::SharedOutOfBounds { address, bytes, shared_bytes });
        }
        if let Some(races) = self.races.as_mut() {
            if let Err(conflict) = races.shared.access(address as usize, bytes as usize, thread, write) {
                return Err(self.conflict(conflict.offset as u64, conflict, true));
            }
        }
        Ok(address as usize)
    }

    /// Loads `out.len()` consecutive elements (a vector access checks the whole span).
    #[inline(always)]
    pub(super) fn load(
        &mut self,
        shared: bool,
        address: u64,
        ty: MemTy,
        out: &mut [u64],
        thread: u32,
    ) -> Result<(), ErrorKind> {
        let size = ty.bytes as usize;
        let span = (size * out.len()) as u64;
        let (bytes, offset) = if shared {
            let offset = self.shared(address, span, thread, false)?;
            (&self.shared[..], offset)
        } else {
            let (index, offset) = self.global(address, span, thread, false)?;
            (&*self.memory.allocation_mut(index), offset)
        };
        for (i, value) in out.iter_mut().enumerate() {
            let at = offset + i * size;
            *value = decode(&bytes[at..at + size], ty);
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn store(
        &mut self,
        shared: bool,
        address: u64,
        size: usize,
        values: &[u64],
        thread: u32,
    ) -> Result<(), ErrorKind> {
        let span = (size * values.len()) as u64;
        let (bytes, offset) = if shared {
            let offset = self.shared(address, span, thread, true)?;
            (&mut self.shared[..], offset)
        } else {
            let (index, offset) = self.global(address, span, thread, true)?;
            (self.memory.allocation_mut(index), offset)
        };
        for (i, &value) in values.iter().enumerate() {
            let at = offset + i * size;
            encode(value, &mut bytes[at..at + size]);
        }
        Ok(())
    }

    pub(super) fn load_param(&self, offset: u32, ty: MemTy) -> u64 {
        let at = offset as usize;
        // Decoding checked the offset against the parameter layout.
        decode(&self.params[at..at + ty.bytes as usize], ty)
    }

    /// An atomic read-modify-write of global memory: the old value. Not race-logged.
    pub(super) fn atomic(&mut self, op: AtomOp, ty: AtomTy, address: u64, b: u64, c: u64) -> Result<u64, ErrorKind> {
        let size: u64 = match ty {
            AtomTy::F32 => 4,
            AtomTy::Int(int) => int.bits() as u64 / 8,
        };
        check_alignment(address, size)?;
        let (index, offset) =
            self.memory.locate(address, size).map_err(|_| ErrorKind::OutOfBounds { address, bytes: size })?;
        let cell = &mut self.memory.allocation_mut(index)[offset..offset + size as usize];
        let old = decode(cell, MemTy { bytes: size as u8, signed: false });
        let new = match (ty, op) {
            (_, AtomOp::Exch) => b,
            (_, AtomOp::Cas) => {
                if old == b {
                    c
                } else {
                    old
                }
            }
            (AtomTy::F32, _) => (f32::from_bits(old as u32) + f32::from_bits(b as u32)).to_bits() as u64,
            (AtomTy::Int(int), AtomOp::Add) => int.wrap(int.extend(old) + int.extend(b)),
            (AtomTy::Int(int), AtomOp::Min) => int.wrap(int.extend(old).min(int.extend(b))),
            (AtomTy::Int(int), _) => int.wrap(int.extend(old).max(int.extend(b))),
        };
        encode(new, cell);
        Ok(old)
    }
}
