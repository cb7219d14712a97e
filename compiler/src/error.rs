//! The compiler's error type: every variant names what is wrong and where (file, node,
//! op, input), so the CLI can print it as is.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The archive or JSON is malformed or of an unsupported version.
    Format {
        path: PathBuf,
        message: String,
    },
    /// A weight or constant is missing, mis-shaped, pickled...
    Weight {
        name: String,
        message: String,
    },
    /// The program uses something aotc does not support (custom objects, tokens...).
    Unsupported(String),
    /// Every unsupported operator, with the nodes that use it.
    UnsupportedOps(Vec<(String, Vec<String>)>),
    /// A node could not be lowered.
    Lower {
        node: String,
        target: String,
        message: String,
    },
    Codegen(String),
    Link(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Format { path, message } => write!(f, "{}: {message}", path.display()),
            Error::Weight { name, message } => write!(f, "weight '{name}': {message}"),
            Error::Unsupported(m) => write!(f, "unsupported program: {m}"),
            Error::UnsupportedOps(ops) => {
                writeln!(f, "{} unsupported operator(s):", ops.len())?;
                for (target, nodes) in ops {
                    writeln!(f, "  {target}: used by node(s) {}", nodes.join(", "))?;
                }
                Ok(())
            }
            Error::Lower { node, target, message } => write!(f, "node '{node}' ({target}): {message}"),
            Error::Codegen(m) => write!(f, "code generation failed: {m}"),
            Error::Link(m) => write!(f, "linking failed: {m}"),
        }
    }
}

impl std::error::Error for Error {}
