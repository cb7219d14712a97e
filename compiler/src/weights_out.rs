//! External weights: where a library's weights go (`--external-weights`, or automatically
//! past [`crate::AUTO_EXTERNAL_BYTES`]) and the file that holds them
//! (`aotc_abi::weights_file`: safetensors, every tensor 64-byte aligned).
//!
//! The file holds the weights as the library reads them (packed GEMM operands, folded
//! convolution weights, initial values of state), keyed by the names of the manifest's
//! weights table, whose fingerprints it carries.

use crate::error::{Error, Result};
use crate::ir::Program;
use crate::passes::plan::Plan;
use crate::{CompileOptions, WeightsPlacement, AUTO_EXTERNAL_BYTES};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The most weights `--embed-weights` links into a library: past 2 GiB the x86-64 small
/// code model's 32-bit relocations from the code to the GOT cannot span the blob (measured
/// with benchmarks/big_weights.py --embed: the link of 2.5 GiB fails).
pub const MAX_EMBEDDED_BYTES: u64 = 2 << 30;
use std::path::{Path, PathBuf};

/// The weights file of `library` by default: `model.so` → `model.weights.safetensors`.
pub fn default_path(library: &Path) -> PathBuf {
    let stem = library.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    library.with_file_name(format!("{stem}.weights.safetensors"))
}

/// Decides where the weights of `plan` live and records it in its manifest; returns the
/// file to write when they go outside the library.
pub fn place(plan: &mut Plan, library: &Path, opts: &CompileOptions) -> Result<Option<PathBuf>> {
    let external = match opts.placement {
        WeightsPlacement::External => true,
        WeightsPlacement::Embedded => false,
        WeightsPlacement::Auto => opts.weights_out.is_some() || plan.weights_bytes > AUTO_EXTERNAL_BYTES,
    };
    if !external {
        let bytes = plan.weights_bytes;
        if bytes > MAX_EMBEDDED_BYTES {
            return Err(Error::Unsupported(format!(
                "{bytes} bytes of weights cannot be linked into the library: the support library reaches its data through 32-bit PC-relative relocations, which a blob past 2 GiB puts out of range (linking 2.5 GiB fails with \"relocation truncated to fit: R_X86_64_GOTPCREL\"); drop --embed-weights to keep them in a weights file beside the library"
            )));
        }
        if opts.weights_out.is_some() {
            return Err(Error::Unsupported(
                "--weights-out names a weights file, but --embed-weights keeps the weights in the library".into(),
            ));
        }
        return Ok(None);
    }
    let file = opts.weights_out.clone().unwrap_or_else(|| default_path(library));
    if file.file_name().is_none() || file == library {
        return Err(Error::Io {
            path: file,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a usable weights file name (it must name a file other than the library)",
            ),
        });
    }
    let table = &mut plan.manifest.weights;
    table.external = true;
    table.file = file.file_name().map(|n| n.to_string_lossy().into_owned());
    Ok(Some(file))
}

/// Whether the library's weights come in an object of their own ([`write_object`]): when
/// they are embedded and there are any.
pub fn has_object(plan: &Plan) -> bool {
    !plan.manifest.weights.external && plan.weights_bytes > 0
}

/// The weights written out before the library is linked (their content id is in its
/// manifest).
pub enum Written {
    /// Embedded, and none: the generated object's one-byte `__aotc_weights` stands for them.
    Nothing,
    /// Embedded: the object file defining `__aotc_weights`, in its temporary directory.
    Object(tempfile::TempDir, PathBuf),
    /// External: the weights file, under a temporary name until [`Written::commit`].
    File(PendingFile),
}

impl Written {
    /// The object for the linker, if any.
    pub fn object(&self) -> Option<&Path> {
        match self {
            Written::Object(_, path) => Some(path),
            _ => None,
        }
    }

    /// Puts a weights file in place, once the library beside it is linked.
    pub fn commit(self) -> Result<()> {
        match self {
            Written::File(pending) => pending.commit(),
            _ => Ok(()),
        }
    }
}

/// A weights file written under a temporary name beside its final one, removed unless
/// committed.
pub struct PendingFile {
    tmp: PathBuf,
    file: PathBuf,
    committed: bool,
}

impl PendingFile {
    /// Renamed into place, so that a process that has the previous file mapped keeps its
    /// (now unlinked) contents instead of seeing them change or shrink under it.
    fn commit(mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.file).map_err(|source| Error::Io { path: self.file.clone(), source })?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes the weights of `program` where `plan` places them: into `file` when they live
/// outside the library, else into an object file for the linker; records their content id
/// in the manifest.
pub fn write(program: &Program, plan: &mut Plan, file: Option<&Path>) -> Result<Written> {
    if let Some(file) = file {
        return write_file(program, plan, file).map(Written::File);
    }
    if !has_object(plan) {
        plan.manifest.weights.id = aotc_abi::weights::content_id(&[]);
        return Ok(Written::Nothing);
    }
    let dir = tempfile::tempdir().map_err(|e| Error::Link(format!("temporary directory: {e}")))?;
    let path = dir.path().join("weights.o");
    write_object(program, plan, &path)?;
    Ok(Written::Object(dir, path))
}

/// Creates `path` for reading back what is written (the content id is hashed from it).
fn create(path: &Path) -> Result<File> {
    let io = |source| Error::Io { path: path.into(), source };
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io)
}

/// The weights file: the safetensors header, then the blob. The header's length does not
/// depend on the content id (16 hex digits), so the blob is written first, after room
/// for the header, and the header once the id is known.
fn write_file(program: &Program, plan: &mut Plan, file: &Path) -> Result<PendingFile> {
    let tmp = file.with_file_name(format!(
        ".{}.tmp{}",
        file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        std::process::id()
    ));
    let out = create(&tmp)?;
    let pending = PendingFile { tmp, file: file.into(), committed: false };
    // Any id has the length of the empty blob's.
    plan.manifest.weights.id = aotc_abi::weights::content_id(&[]);
    let header_len = aotc_abi::weights_file::header(&plan.manifest.weights).len() as u64;
    plan.manifest.weights.id = write_blob(program, plan, &out, &pending.tmp, header_len)?;
    let header = aotc_abi::weights_file::header(&plan.manifest.weights);
    assert_eq!(header.len() as u64, header_len, "a weights file's header length depends on its content id");
    // Not fsynced, like the library beside it: a build output, not a database.
    out.write_all_at(&header, 0).map_err(|source| Error::Io { path: pending.tmp.clone(), source })?;
    Ok(pending)
}

/// Writes the blob into `out` (the file `path`) from byte `at` on, payload by payload,
/// zeros between them; returns its content id, hashed from what was written (a packed
/// operand is written band by band, out of order).
fn write_blob(program: &Program, plan: &Plan, out: &File, path: &Path, at: u64) -> Result<String> {
    let io = |source| Error::Io { path: path.into(), source };
    // The gaps (and a trailing one) read as zeros.
    out.set_len(at + plan.weights_bytes).map_err(io)?;
    for (payload, &offset) in program.weights.iter().zip(&plan.weight_offsets) {
        payload.write(&mut |within, piece| out.write_all_at(piece, at + offset + within as u64).map_err(io))?;
    }
    let mut hash = aotc_abi::weights::Hash64::new();
    let mut piece = vec![0; HASH_PIECE.min(plan.weights_bytes as usize)];
    let mut done = 0;
    while done < plan.weights_bytes {
        let n = piece.len().min((plan.weights_bytes - done) as usize);
        out.read_exact_at(&mut piece[..n], at + done).map_err(io)?;
        hash.update(&piece[..n]);
        done += n as u64;
    }
    Ok(hash.content_id())
}

/// How much of the written blob is read back at once to hash it.
const HASH_PIECE: usize = 16 << 20;

/// The relocatable ELF object that defines `__aotc_weights`: the blob in a read-only
/// section of its own (64-byte aligned), written straight from the payloads, so the
/// weights never sit in memory whole (nor pass through Cranelift's object, which holds
/// its data in memory). x86-64, like the generated code.
fn write_object(program: &Program, plan: &mut Plan, path: &Path) -> Result<()> {
    let out = create(path)?;
    plan.manifest.weights.id = write_blob(program, plan, &out, path, ELF_HEADER_BYTES)?;
    let data_end = ELF_HEADER_BYTES + plan.weights_bytes;
    let (tail_at, tail, section_headers) = elf_tail(data_end, plan.weights_bytes);
    let io = |source| Error::Io { path: path.into(), source };
    out.write_all_at(&tail, tail_at).map_err(io)?;
    out.write_all_at(&elf_header(section_headers), 0).map_err(io)
}

const ELF_HEADER_BYTES: u64 = 64;
/// Sections of the weights object: null, the blob, `.note.GNU-stack` (no executable stack),
/// `.symtab`, `.strtab`, `.shstrtab`.
const SECTION_NAMES: [&str; 6] = ["", ".rodata.aotc_weights", ".note.GNU-stack", ".symtab", ".strtab", ".shstrtab"];
const SHSTRTAB: u16 = 5;

fn elf_header(section_headers: u64) -> Vec<u8> {
    let mut h = vec![0x7f, b'E', b'L', b'F', 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */];
    h.resize(16, 0);
    h.extend(1u16.to_le_bytes()); // ET_REL
    h.extend(62u16.to_le_bytes()); // EM_X86_64
    h.extend(1u32.to_le_bytes()); // EV_CURRENT
    h.extend(0u64.to_le_bytes()); // entry
    h.extend(0u64.to_le_bytes()); // program headers: none
    h.extend(section_headers.to_le_bytes());
    h.extend(0u32.to_le_bytes()); // flags
    for half in [ELF_HEADER_BYTES as u16, 0, 0, 64, SECTION_NAMES.len() as u16, SHSTRTAB] {
        // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
        h.extend(half.to_le_bytes());
    }
    h
}

const PROGBITS: u32 = 1;
const SYMTAB: u32 = 2;
const STRTAB: u32 = 3;
const ALLOC: u64 = 2;

/// An ELF64 section header, less its name and address (0 in a relocatable object).
struct Section {
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entry: u64,
}

impl Section {
    fn write(&self, name: u32, out: &mut Vec<u8>) {
        out.extend(name.to_le_bytes());
        out.extend(self.kind.to_le_bytes());
        out.extend(self.flags.to_le_bytes());
        out.extend(0u64.to_le_bytes()); // address
        for field in [self.offset, self.size] {
            out.extend(field.to_le_bytes());
        }
        out.extend(self.link.to_le_bytes());
        out.extend(self.info.to_le_bytes());
        out.extend(self.align.to_le_bytes());
        out.extend(self.entry.to_le_bytes());
    }
}

/// What follows the blob (ending at `data_end`, `bytes` long): where it starts, its bytes
/// (symbol table, string tables, section headers) and where its section headers start.
fn elf_tail(data_end: u64, bytes: u64) -> (u64, Vec<u8>, u64) {
    let tail_at = data_end.next_multiple_of(8);
    let mut tail = vec![];
    // The symbol table: the null symbol, then __aotc_weights, global, over the whole blob.
    let symtab = tail_at;
    tail.extend([0u8; 24]);
    tail.extend(1u32.to_le_bytes()); // name: offset 1 in .strtab
    tail.extend([0x11, 0]); // STB_GLOBAL | STT_OBJECT, default visibility
    tail.extend(1u16.to_le_bytes()); // section 1, the blob
    tail.extend(0u64.to_le_bytes());
    tail.extend(bytes.to_le_bytes());
    let strtab = tail_at + tail.len() as u64;
    let symbol = format!("\0{}\0", aotc_abi::internal_symbols::WEIGHTS);
    tail.extend(symbol.as_bytes());
    let shstrtab = tail_at + tail.len() as u64;
    let mut names = vec![];
    for name in SECTION_NAMES {
        names.push(tail.len() as u64 + tail_at - shstrtab);
        tail.extend(name.as_bytes());
        tail.push(0);
    }
    let shstrtab_len = tail_at + tail.len() as u64 - shstrtab;
    tail.resize(tail.len().next_multiple_of(8), 0);
    let section_headers = tail_at + tail.len() as u64;
    let section =
        |kind, flags, offset, size| Section { kind, flags, offset, size, link: 0, info: 0, align: 1, entry: 0 };
    let sections = [
        section(0, 0, 0, 0),
        Section {
            align: crate::passes::plan::WEIGHT_ALIGN as u64,
            ..section(PROGBITS, ALLOC, ELF_HEADER_BYTES, bytes)
        },
        section(PROGBITS, 0, ELF_HEADER_BYTES, 0),
        // Linked to .strtab; its first global symbol is symbol 1.
        Section { link: 4, info: 1, align: 8, entry: 24, ..section(SYMTAB, 0, symtab, 48) },
        section(STRTAB, 0, strtab, symbol.len() as u64),
        section(STRTAB, 0, shstrtab, shstrtab_len),
    ];
    for (s, name) in sections.iter().zip(names) {
        s.write(if s.kind == 0 { 0 } else { name as u32 }, &mut tail);
    }
    (tail_at, tail, section_headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_file_sits_beside_the_library() {
        assert_eq!(default_path(Path::new("/x/model.so")), Path::new("/x/model.weights.safetensors"));
        assert_eq!(default_path(Path::new("lib")), Path::new("lib.weights.safetensors"));
    }
}
