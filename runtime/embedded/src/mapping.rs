//! Read-only mappings of weights files, shared by the instances of one process.
//!
//! A file is mapped once per (device, inode, size, modification time): instances created
//! from it, or that load it, hold the same [`Mapping`], unmapped with the last of them.
//! A file replaced by a new one (aotc writes through a rename) is a new inode and gets a
//! new mapping; the old one stays valid for the instances that use it.
//!
//! Out of scope: a file truncated in place while mapped. Reading a page past its new end
//! raises SIGBUS, as with any mapped file; aotc never writes a weights file in place.

use crate::error::{Error, Result};
use aotc_abi::status;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Mutex, Weak};

/// What identifies a file's contents for sharing.
type Key = (u64, u64, u64, i64, i64);

pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is read-only memory that lives until Drop; reading it from several
// threads at once is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above: nothing writes through it.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr is a live PROT_READ mapping of len bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped once; every reference
        // into it belonged to an instance holding this Arc.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

static SHARED: Mutex<Vec<(Key, Weak<Mapping>)>> = Mutex::new(Vec::new());

/// Frees the table itself (its entries' mappings went with their last instances): at
/// unload, with no instance left (`crate::unload`).
pub fn release() {
    drop(std::mem::take(&mut *SHARED.lock().unwrap_or_else(|p| p.into_inner())));
}

fn weights_err(path: &str, message: impl std::fmt::Display) -> Error {
    Error { code: status::WEIGHTS, message: format!("weights file '{path}': {message}") }
}

/// The mapping of the file at `path`: the one an instance of this process already holds,
/// or a new read-only one.
pub fn map(path: &str) -> Result<Arc<Mapping>> {
    let file = aotc_abi::file::open_regular(path.as_ref()).map_err(|e| weights_err(path, e))?;
    let meta = file.metadata().map_err(|e| weights_err(path, e))?;
    let key: Key = (meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec());
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    shared.retain(|(_, m)| m.strong_count() > 0);
    if let Some(m) = shared.iter().find(|(k, _)| *k == key).and_then(|(_, m)| m.upgrade()) {
        return Ok(m);
    }
    let len = usize::try_from(meta.size()).map_err(|_| weights_err(path, "too large for this address space"))?;
    if len == 0 {
        return Err(weights_err(path, "the file is empty (not a safetensors file)"));
    }
    // SAFETY: a fresh read-only private mapping of an open file descriptor; the kernel
    // checks the arguments; the descriptor may close afterwards, the mapping stays.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
    if ptr == libc::MAP_FAILED {
        return Err(weights_err(path, format!("cannot map {len} bytes: {}", std::io::Error::last_os_error())));
    }
    let m = Arc::new(Mapping { ptr: ptr.cast(), len });
    shared.push((key, Arc::downgrade(&m)));
    Ok(m)
}
