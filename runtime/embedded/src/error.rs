//! Errors of the support library: an ABI status code and a message for `aotc_last_error`.

/// An error with its ABI status code.
pub struct Error {
    pub code: i32,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn err<T>(code: i32, message: impl Into<String>) -> Result<T> {
    Err(Error { code, message: message.into() })
}
