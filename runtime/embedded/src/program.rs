//! The program the compiler embedded: its manifest, the weights blob, and what the
//! metadata functions of the ABI hand out, parsed once per process.

use crate::error::{Error, Result};
use aotc_abi::layout::byte_len;
use aotc_abi::manifest::{ConstValue, InputSpec, Manifest};
use aotc_abi::sym::SymExpr;
use aotc_abi::{status, AotcValueInfo, DType};
use std::ffi::CString;
use std::sync::Mutex;

extern "C" {
    #[link_name = "__aotc_manifest"]
    static MANIFEST_BYTES: u8;
    #[link_name = "__aotc_manifest_len"]
    static MANIFEST_LEN: u64;
    #[link_name = "__aotc_weights"]
    static WEIGHTS: u8;
}

/// The manifest and the C strings derived from it, shared by all instances.
pub struct Program {
    pub manifest: Manifest,
    pub manifest_json: CString,
    pub in_spec: CString,
    pub out_spec: CString,
    pub inputs: Vec<ValueInfoStore>,
    pub outputs: Vec<ValueInfoStore>,
    pub buffers: Vec<ValueInfoStore>,
    /// The byte length of each buffer, computed once with checked arithmetic.
    pub buffer_bytes: Vec<usize>,
}

/// Owns what an `AotcValueInfo` points to.
pub struct ValueInfoStore {
    name: CString,
    kind: i32,
    dtype: DType,
    sizes: Vec<i64>,
    dim_min: Vec<i64>,
    dim_max: Vec<i64>,
}

impl ValueInfoStore {
    fn new(name: &str, kind: i32, dtype: DType, sizes: &[SymExpr], m: &Manifest) -> ValueInfoStore {
        let range = |e: &SymExpr| match (e.as_int(), e) {
            (Some(v), _) => (v, v, v),
            (None, SymExpr::Sym(s)) => {
                let r = &m.symbols[*s as usize];
                (-1, r.min.max(0), r.max.unwrap_or(-1))
            }
            (None, _) => (-1, 0, -1),
        };
        let (sizes, (dim_min, dim_max)): (Vec<i64>, (Vec<i64>, Vec<i64>)) =
            sizes.iter().map(range).map(|(s, lo, hi)| (s, (lo, hi))).unzip();
        ValueInfoStore { name: cstring(name), kind, dtype, sizes, dim_min, dim_max }
    }

    pub fn info(&self) -> AotcValueInfo {
        AotcValueInfo {
            name: self.name.as_ptr(),
            kind: self.kind,
            dtype: self.dtype.to_dlpack(),
            ndim: self.sizes.len() as i32,
            sizes: self.sizes.as_ptr(),
            dim_min: self.dim_min.as_ptr(),
            dim_max: self.dim_max.as_ptr(),
        }
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// The parsed manifest (or why it is unreadable): made by the first [`program`], freed by
/// [`release`] when the library is unloaded.
type Parsed = std::result::Result<Program, String>;
static PROGRAM: Mutex<Option<&'static Parsed>> = Mutex::new(None);

/// Parses the embedded manifest once per load of the library.
pub fn program() -> Result<&'static Program> {
    let mut slot = PROGRAM.lock().unwrap_or_else(|e| e.into_inner());
    let parsed: &'static Parsed = slot.get_or_insert_with(|| {
        crate::unload::free_at_unload();
        Box::leak(Box::new(parse()))
    });
    parsed.as_ref().map_err(|e| Error { code: status::INTERNAL, message: e.clone() })
}

/// Frees what [`program`] made (the next call parses again).
///
/// # Safety
/// No reference [`program`] returned is used afterwards.
pub unsafe fn release() {
    if let Some(parsed) = PROGRAM.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // SAFETY: made by Box::leak in `program`, taken out of the slot once; the caller
        // guarantees that no reference to it remains in use.
        drop(unsafe { Box::from_raw(parsed as *const Parsed as *mut Parsed) });
    }
}

fn parse() -> Parsed {
    // SAFETY: the compiler emits __aotc_manifest with __aotc_manifest_len bytes.
    let bytes = unsafe { std::slice::from_raw_parts(&MANIFEST_BYTES as *const u8, MANIFEST_LEN as usize) };
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| format!("embedded manifest is corrupt: {e}"))?;
    if m.abi_version != aotc_abi::ABI_VERSION {
        return Err(format!("manifest ABI {} != support library ABI {}", m.abi_version, aotc_abi::ABI_VERSION));
    }
    let buffer_bytes = m
        .buffers
        .iter()
        .map(|b| {
            byte_len(&b.sizes, b.dtype.size()).ok_or_else(|| {
                format!("embedded manifest is corrupt: buffer '{}' of shape {:?} does not fit memory", b.name, b.sizes)
            })
        })
        .collect::<std::result::Result<_, _>>()?;
    let inputs = m
        .inputs
        .iter()
        .enumerate()
        .map(|(k, i)| match i {
            // A python int export kept dynamic (a SymInt input) is kind INT.
            InputSpec::Tensor(t) => ValueInfoStore::new(&t.name, m.input_kind(k), t.dtype, &t.sizes, &m),
            // What aotc.h asks the caller to pass for it.
            InputSpec::Constant { name, value } => {
                let (dtype, sizes) = match value {
                    ConstValue::Int(_) => (DType::I64, vec![]),
                    ConstValue::Bool(_) => (DType::Bool, vec![]),
                    ConstValue::Float(_) => (DType::F64, vec![]),
                    ConstValue::Str(s) => (DType::U8, vec![SymExpr::Int(s.len() as i64)]),
                    ConstValue::None => (DType::U8, vec![]),
                };
                ValueInfoStore::new(name, m.input_kind(k), dtype, &sizes, &m)
            }
        })
        .collect();
    let outputs = m.outputs.iter().map(|t| ValueInfoStore::new(&t.name, t.kind, t.dtype, &t.sizes, &m)).collect();
    let buffers = m
        .buffers
        .iter()
        .map(|b| {
            let sizes: Vec<SymExpr> = b.sizes.iter().map(|&s| SymExpr::Int(s)).collect();
            ValueInfoStore::new(&b.name, aotc_abi::value_kind::TENSOR, b.dtype, &sizes, &m)
        })
        .collect();
    Ok(Program {
        manifest_json: CString::new(bytes.to_vec()).map_err(|_| "manifest holds a NUL byte".to_string())?,
        in_spec: cstring(&m.in_spec),
        out_spec: cstring(&m.out_spec),
        inputs,
        outputs,
        buffers,
        buffer_bytes,
        manifest: m,
    })
}

/// The start of the linked weights blob (read-only).
pub fn weights_base() -> *const u8 {
    // SAFETY: taking the address of the linked weights blob; nothing is read here.
    unsafe { &WEIGHTS as *const u8 }
}
