//! Opening a file a user named, for the compiler, the loader and the library alike.
//!
//! A path may name a FIFO, a socket or a device: a plain `open` of a FIFO blocks until a
//! writer appears (forever, for a hostile or mistaken path), and reading a device may
//! never end. [`open_regular`] opens without blocking, then refuses anything that is not
//! a regular file.

use std::fs::File;
use std::io::{Error, ErrorKind, Result};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (after symbolic links), else an
/// `InvalidInput` error saying what it is. Never blocks: the open is non-blocking, which
/// changes nothing for the reads of a regular file.
pub fn open_regular(path: &Path) -> Result<File> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    let what = if kind.is_file() {
        return Ok(file);
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a file"
    };
    Err(Error::new(ErrorKind::InvalidInput, format!("{what}, not a regular file")))
}

/// The whole of the regular file at `path` (see [`open_regular`]).
pub fn read_regular(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut open_regular(path)?, &mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_fifo_without_blocking() {
        let dir = std::env::temp_dir().join(format!("aotc-abi-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("w.safetensors");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_regular(&fifo).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.to_string(), "a FIFO (named pipe), not a regular file");
        assert_eq!(open_regular(&dir).unwrap_err().to_string(), "a directory, not a regular file");
        std::fs::write(dir.join("plain"), b"abc").unwrap();
        assert_eq!(read_regular(&dir.join("plain")).unwrap(), b"abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
