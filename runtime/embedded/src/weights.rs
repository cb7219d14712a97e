//! The weights an instance reads: the blob linked into the library, a weights file mapped
//! read-only (shared by the instances that use the same file), or a caller's bytes copied
//! into memory of the instance's own.
//!
//! Nothing in a file or a buffer is trusted: its header is checked against the manifest's
//! weights table (`aotc_abi::weights_file::check`: every tensor present with its dtype and
//! shape, inside the file, 64-byte aligned, and the same structure fingerprint) before any
//! pointer into it is formed. A file found implicitly (beside the library) must also be the
//! one this compilation wrote: the same weights id.

use crate::error::{Error, Result};
use crate::mapping::{map, Mapping};
use crate::memory::AlignedBuf;
use crate::program::{weights_base, Program};
use aotc_abi::status;
use aotc_abi::weights_file::{check, header_len, parse_header, KEY_ID};
use std::path::PathBuf;
use std::sync::Arc;

/// Where an instance takes its weights from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// The library's own: linked in, or the file its compilation wrote beside it.
    Default,
    /// A weights file of the same structure.
    File(&'a str),
    /// The bytes of such a file (copied).
    Bytes(&'a [u8]),
}

enum Backing {
    Linked,
    Mapped(#[allow(dead_code)] Arc<Mapping>),
    Owned(#[allow(dead_code)] AlignedBuf),
}

/// One set of weights, checked: entry `e` of the table lies at `base + offsets[e]`.
pub struct Weights {
    /// Keeps the memory alive (and shared mappings counted).
    _backing: Backing,
    base: *const u8,
    offsets: Vec<usize>,
    lens: Vec<usize>,
}

// SAFETY: the weights are read-only memory owned (or shared through an Arc) by the value.
unsafe impl Send for Weights {}

fn weights_err(what: &str, message: impl std::fmt::Display) -> Error {
    Error { code: status::WEIGHTS, message: format!("{what}: {message}") }
}

/// The page size mappings are aligned to.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// The path of the `.so` this code is linked into.
fn library_path() -> Result<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr reads the address of a function of this library and fills `info`.
    let found = unsafe { libc::dladdr(library_path as *const libc::c_void, info.as_mut_ptr()) };
    // SAFETY: zero-initialised, and filled on success.
    let info = unsafe { info.assume_init() };
    if found == 0 || info.dli_fname.is_null() {
        return Err(weights_err(
            "external weights",
            "cannot find the path of this library (dladdr failed): pass the weights file explicitly",
        ));
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the dynamic loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Ok(PathBuf::from(std::ffi::OsStr::new(&*name.to_string_lossy())))
}

impl Weights {
    pub fn open(program: &Program, source: Source) -> Result<Weights> {
        let table = &program.manifest.weights;
        match source {
            Source::Default if !table.external => Ok(Weights::linked(program)),
            Source::Default => {
                let name = table
                    .file
                    .as_deref()
                    .ok_or_else(|| weights_err("external weights", "the manifest names no weights file"))?;
                let lib = library_path()?;
                let path = lib.with_file_name(name);
                let path = path.to_string_lossy();
                let w = Weights::file(program, &path).map_err(|e| match e.message.contains("No such file") {
                    true => Error { message: format!("{} (this library, {}, was compiled with external weights and looks for them beside itself; pass a weights file explicitly to use one elsewhere)", e.message, lib.display()), ..e },
                    false => e,
                })?;
                let id = w.1.get(KEY_ID).cloned().unwrap_or_default();
                if id != table.id {
                    return Err(weights_err(&format!("weights file '{path}'"), format!(
                        "it is from another compilation: its weights id is {id}, this library was compiled with weights id {} (the structures match, fingerprint {}). Pass the file explicitly (aotc_model_create_weights, load_weights) to use other weights of the same structure, or compile again",
                        table.id, table.fingerprint
                    )));
                }
                Ok(w.0)
            }
            Source::File(path) => Weights::file(program, path).map(|w| w.0),
            Source::Bytes(bytes) => Weights::bytes(program, bytes),
        }
    }

    fn linked(program: &Program) -> Weights {
        let entries = &program.manifest.weights.entries;
        Weights {
            _backing: Backing::Linked,
            base: weights_base(),
            offsets: entries.iter().map(|e| e.offset as usize).collect(),
            lens: entries.iter().map(|e| e.bytes as usize).collect(),
        }
    }

    /// The mapped file at `path`, checked, with its header's metadata.
    fn file(program: &Program, path: &str) -> Result<(Weights, std::collections::BTreeMap<String, String>)> {
        let what = format!("weights file '{path}'");
        let mapping = map(path)?;
        let (offsets, lens, meta) =
            checked(program, mapping.bytes(), page_size()).map_err(|m| weights_err(&what, m))?;
        let base = mapping.as_ptr();
        Ok((Weights { _backing: Backing::Mapped(mapping), base, offsets, lens }, meta))
    }

    fn bytes(program: &Program, bytes: &[u8]) -> Result<Weights> {
        let what = format!("weights buffer ({} bytes)", bytes.len());
        // Checked before copying: a wrong buffer costs no allocation of its size.
        checked(program, bytes, aotc_abi::weights::ALIGN).map_err(|m| weights_err(&what, m))?;
        let copy = AlignedBuf::from_bytes(bytes)
            .ok_or_else(|| Error { code: status::OUT_OF_MEMORY, message: format!("{what}: cannot allocate a copy") })?;
        let (offsets, lens, _) =
            checked(program, copy.as_slice(), aotc_abi::weights::ALIGN).map_err(|m| weights_err(&what, m))?;
        let base = copy.as_ptr().cast_const();
        Ok(Weights { _backing: Backing::Owned(copy), base, offsets, lens })
    }

    /// The address of entry `e`.
    pub fn ptr(&self, e: usize) -> *const u8 {
        self.base.wrapping_add(self.offsets[e])
    }

    /// A valid address for a weight of no bytes (nothing reads through it).
    pub fn base(&self) -> *const u8 {
        self.base
    }

    /// The bytes of entry `e`.
    pub fn slice(&self, e: usize) -> &[u8] {
        // SAFETY: `checked` (or the compiler, for the linked blob) placed entry e's lens[e]
        // bytes at offsets[e] inside the memory the backing keeps alive.
        unsafe { std::slice::from_raw_parts(self.ptr(e), self.lens[e]) }
    }
}

type Checked = (Vec<usize>, Vec<usize>, std::collections::BTreeMap<String, String>);

/// Checks the weights file `bytes` (lying at an address aligned to `base_align`) against
/// the program's table: each entry's offset and length in it, and the header's metadata.
fn checked(program: &Program, bytes: &[u8], base_align: usize) -> std::result::Result<Checked, String> {
    let n = header_len(bytes)?;
    let h = parse_header(bytes.get(..8 + n as usize).unwrap_or(bytes))?;
    let table = &program.manifest.weights;
    let offsets = check(table, &h, bytes.len() as u64, base_align)?;
    let offsets = offsets
        .into_iter()
        .map(|o| usize::try_from(o).map_err(|_| "offset beyond the address space".to_string()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let lens = table.entries.iter().map(|e| e.bytes as usize).collect();
    Ok((offsets, lens, h.metadata))
}
