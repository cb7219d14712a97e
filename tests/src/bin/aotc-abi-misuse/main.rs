//! aotc-abi-misuse: throws malformed and hostile calls at compiled libraries through the
//! raw C ABI, the way code we do not control may call a deployed `.so`.
//!
//! usage: aotc-abi-misuse LIB.so [LIB.so...]
//!
//! For every input and buffer it passes systematically broken descriptors (ndim, shape,
//! strides, byte_offset, data, dtype, device), wrong counts and null pointers, plus valid
//! calls: plain, strided, and outputs fed back as inputs (compared with fresh copies);
//! the same for the outputs `aotc_run_into` writes into (`run_into.rs`).
//! Every call must return a status, `AOTC_OK` exactly for the valid ones, with a message
//! in `aotc_last_error` on failure. Run it under valgrind to also catch reads and writes
//! out of bounds. Exits non-zero on anything unexpected.

use aotc_abi::layout::contiguous_strides;
use aotc_abi::manifest::{ConstValue, InputSpec, Manifest};
use aotc_abi::{
    fn_types as ft, status, symbols, AotcModel, AotcTensor, AotcValueInfo, DLDataType, DLDevice, DType, DL_CPU,
};
use std::ffi::{c_char, CStr};
use std::process::ExitCode;

mod run_into;

/// The exported functions of one library.
struct Abi {
    version: ft::AbiVersion,
    last_error: ft::LastError,
    create: ft::ModelCreate,
    destroy: ft::ModelDestroy,
    metadata: unsafe extern "C" fn() -> *const c_char,
    in_spec: ft::ModelStr,
    input_count: ft::Count,
    input_info: ft::Info,
    buffer_read: ft::BufferRead,
    buffer_write: ft::BufferWrite,
    run: ft::Run,
    kernel_count: ft::Count,
    profile_enable: ft::ProfileEnable,
    profile_read: ft::ProfileRead,
    output_shapes: ft::OutputShapes,
    run_into: ft::RunInto,
    // Dropped last: the functions above point into it.
    _lib: libloading::Library,
}

impl Abi {
    fn load(path: &str) -> Result<Abi, String> {
        // SAFETY: loading runs the library's initialisers; an aotc .so has none beyond libc's.
        let lib = unsafe { libloading::Library::new(std::path::Path::new(".").join(path)) }
            .map_err(|e| format!("{path}: {e}"))?;
        fn get<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
            // SAFETY: T is the type aotc.h declares for `name`.
            unsafe { lib.get::<T>(name.as_bytes()).map(|f| *f) }.map_err(|e| format!("missing {name}: {e}"))
        }
        Ok(Abi {
            version: get(&lib, symbols::ABI_VERSION)?,
            last_error: get(&lib, symbols::LAST_ERROR)?,
            create: get(&lib, symbols::MODEL_CREATE)?,
            destroy: get(&lib, symbols::MODEL_DESTROY)?,
            metadata: get(&lib, symbols::METADATA_JSON)?,
            in_spec: get(&lib, symbols::IN_SPEC)?,
            input_count: get(&lib, symbols::INPUT_COUNT)?,
            input_info: get(&lib, symbols::INPUT_INFO)?,
            buffer_read: get(&lib, symbols::BUFFER_READ)?,
            buffer_write: get(&lib, symbols::BUFFER_WRITE)?,
            run: get(&lib, symbols::RUN)?,
            kernel_count: get(&lib, symbols::KERNEL_COUNT)?,
            profile_enable: get(&lib, symbols::PROFILE_ENABLE)?,
            profile_read: get(&lib, symbols::PROFILE_READ)?,
            output_shapes: get(&lib, symbols::OUTPUT_SHAPES)?,
            run_into: get(&lib, symbols::RUN_INTO)?,
            _lib: lib,
        })
    }

    fn message(&self) -> String {
        // SAFETY: aotc_last_error returns a valid C string (or null, handled).
        let p = unsafe { (self.last_error)() };
        if p.is_null() {
            String::new()
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    fn manifest(&self) -> Result<Manifest, String> {
        // SAFETY: returns the library's NUL-terminated manifest, or null.
        let p = unsafe { (self.metadata)() };
        if p.is_null() {
            return Err(format!("no manifest: {}", self.message()));
        }
        // SAFETY: non-null, NUL-terminated, owned by the library.
        serde_json::from_slice(unsafe { CStr::from_ptr(p) }.to_bytes()).map_err(|e| format!("manifest: {e}"))
    }

    fn instance(&self) -> Result<*mut AotcModel, String> {
        let mut m = std::ptr::null_mut();
        // SAFETY: a valid C string and out pointer.
        match unsafe { (self.create)(c"cpu".as_ptr(), &mut m) } {
            status::OK => Ok(m),
            rc => Err(format!("aotc_model_create: {} {}", status::name(rc), self.message())),
        }
    }

    /// aotc_run with `n_outputs` placeholders for the outputs.
    fn run(&self, m: *mut AotcModel, inputs: &[AotcTensor], n_outputs: usize) -> (i32, Vec<AotcTensor>) {
        let mut outs = vec![placeholder(); n_outputs];
        // SAFETY: arrays of the stated lengths; each descriptor is valid, or malformed in
        // a way the library must detect before it reads through it.
        let rc = unsafe { (self.run)(m, inputs.as_ptr(), inputs.len() as i64, outs.as_mut_ptr(), outs.len() as i64) };
        (rc, outs)
    }
}

fn placeholder() -> AotcTensor {
    AotcTensor {
        data: std::ptr::null_mut(),
        device: CPU,
        ndim: 0,
        dtype: DType::F32.to_dlpack(),
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

const CPU: DLDevice = DLDevice { device_type: DL_CPU, device_id: 0 };

/// Counts calls and what they returned; remembers the unexpected ones.
#[derive(Default)]
struct Tally {
    calls: usize,
    refused: usize,
    ok: usize,
    unexpected: Vec<String>,
}

impl Tally {
    fn expect_ok(&mut self, abi: &Abi, what: &str, rc: i32) {
        self.calls += 1;
        if rc == status::OK {
            self.ok += 1;
        } else {
            self.unexpected.push(format!("{what}: expected AOTC_OK, got {} ({})", status::name(rc), abi.message()));
        }
    }

    /// A refusal: an error status that names the problem (not AOTC_ERR_INTERNAL, which
    /// says a check was missing), and a message.
    fn expect_refused(&mut self, abi: &Abi, what: &str, rc: i32) {
        self.calls += 1;
        let msg = abi.message();
        let names_the_problem =
            rc != status::OK && rc != status::INTERNAL && status::name(rc) != status::name(status::INTERNAL);
        if !names_the_problem {
            self.unexpected.push(format!("{what}: expected an error status, got {rc} ({}: {msg})", status::name(rc)));
        } else if msg.trim().is_empty() {
            self.unexpected.push(format!("{what}: {} with an empty aotc_last_error", status::name(rc)));
        } else {
            self.refused += 1;
        }
    }

    fn expect(&mut self, abi: &Abi, what: &str, valid: bool, rc: i32) {
        if valid {
            self.expect_ok(abi, what, rc)
        } else {
            self.expect_refused(abi, what, rc)
        }
    }

    fn fail(&mut self, what: String) {
        self.unexpected.push(what);
    }
}

/// A tensor of the caller's: 8-byte aligned storage, its shape, its dtype.
#[derive(Clone)]
struct Owned {
    data: Vec<u64>,
    shape: Vec<i64>,
    dtype: DType,
}

impl Owned {
    /// Deterministic, varied values (floats), zeros otherwise (valid indices and bools).
    fn new(dtype: DType, shape: &[i64]) -> Owned {
        let n: usize = shape.iter().map(|&s| s as usize).product();
        let mut t = Owned { data: vec![0; (n * dtype.size()).div_ceil(8)], shape: shape.to_vec(), dtype };
        let bytes = t.bytes_mut();
        for k in 0..n {
            let v = (k % 7) as f64 * 0.25 - 0.5;
            match dtype {
                DType::F32 => bytes[k * 4..k * 4 + 4].copy_from_slice(&(v as f32).to_le_bytes()),
                DType::F64 => bytes[k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes()),
                _ => {}
            }
        }
        t
    }

    /// A constant input as aotc.h asks for it: a 0-dim scalar, a str's bytes (1-D uint8).
    fn scalar(value: &ConstValue) -> Owned {
        let (dtype, bits) = match value {
            ConstValue::Int(v) => (DType::I64, *v as u64),
            ConstValue::Bool(b) => (DType::Bool, *b as u64),
            ConstValue::Float(v) => (DType::F64, v.to_bits()),
            ConstValue::None => (DType::U8, 0),
            ConstValue::Str(s) => {
                let mut data = vec![0u64; s.len().div_ceil(8).max(1)];
                // SAFETY: data holds at least s.len() bytes.
                unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), data.as_mut_ptr().cast::<u8>(), s.len()) };
                return Owned { data, shape: vec![s.len() as i64], dtype: DType::U8 };
            }
        };
        Owned { data: vec![bits], shape: vec![], dtype }
    }

    fn bytes(&self) -> &[u8] {
        let n = self.shape.iter().product::<i64>() as usize * self.dtype.size();
        // SAFETY: data holds at least n bytes (rounded up to whole u64s).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().cast(), n) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.shape.iter().product::<i64>() as usize * self.dtype.size();
        // SAFETY: as in bytes, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_mut_ptr().cast(), n) }
    }

    fn raw(&mut self) -> AotcTensor {
        AotcTensor {
            data: self.data.as_mut_ptr().cast(),
            device: CPU,
            ndim: self.shape.len() as i32,
            dtype: self.dtype.to_dlpack(),
            shape: self.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }
}

/// One way to describe a value: the valid descriptor with some fields replaced.
struct Variant {
    what: String,
    valid: bool,
    ndim: Option<i32>,
    /// Replaces the shape array (its length need not be ndim: that is the point).
    shape: Option<Vec<i64>>,
    null_shape: bool,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    null_data: bool,
    dtype: Option<DLDataType>,
    device: Option<DLDevice>,
}

impl Variant {
    fn new(what: impl Into<String>, valid: bool) -> Variant {
        Variant {
            what: what.into(),
            valid,
            ndim: None,
            shape: None,
            null_shape: false,
            strides: None,
            byte_offset: 0,
            null_data: false,
            dtype: None,
            device: None,
        }
    }

    /// The descriptor: `base` with this variant's fields; it points into `self`.
    fn apply(&mut self, base: AotcTensor) -> AotcTensor {
        let mut t = base;
        if let Some(n) = self.ndim {
            t.ndim = n
        }
        if let Some(s) = &mut self.shape {
            t.shape = s.as_mut_ptr()
        }
        if self.null_shape {
            t.shape = std::ptr::null_mut()
        }
        if let Some(s) = &mut self.strides {
            t.strides = s.as_mut_ptr()
        }
        if self.null_data {
            t.data = std::ptr::null_mut()
        }
        if let Some(d) = self.dtype {
            t.dtype = d
        }
        if let Some(d) = self.device {
            t.device = d
        }
        t.byte_offset = self.byte_offset;
        t
    }
}

/// Every variant of a value of `shape` and `dtype`: broken ones, and a few valid ones.
fn variants(shape: &[i64], dtype: DType, wrong_dtype: Option<DType>) -> Vec<Variant> {
    let rank = shape.len() as i32;
    let elem = dtype.size() as i64;
    let mut v = vec![Variant::new("as is", true)];
    let with = |what: String, valid: bool, edit: &dyn Fn(&mut Variant)| {
        let mut x = Variant::new(what, valid);
        edit(&mut x);
        x
    };
    let mut ndims = vec![-1, i32::MIN, i32::MAX, 1 << 30, rank + 1];
    if rank > 0 {
        ndims.push(rank - 1);
    }
    for ndim in ndims {
        v.push(with(format!("ndim {ndim} with {rank} shape entries"), false, &|x| x.ndim = Some(ndim)));
    }
    for (what, device) in [("device CUDA", 2), ("device 0", 0), ("device -1", -1)] {
        v.push(with(what.into(), false, &|x| x.device = Some(DLDevice { device_type: device, device_id: 0 })));
    }
    for (what, d) in [
        ("dtype code 99", DLDataType { code: 99, bits: 7, lanes: 1 }),
        ("dtype float32x4", DLDataType { code: 2, bits: 32, lanes: 4 }),
    ] {
        v.push(with(what.into(), false, &|x| x.dtype = Some(d)));
    }
    if let Some(w) = wrong_dtype {
        v.push(with(format!("dtype {w}"), false, &|x| x.dtype = Some(w.to_dlpack())));
    }
    v.push(with("null data".into(), false, &|x| x.null_data = true));
    for byte_offset in [u64::MAX, i64::MAX as u64, 1 << 63, u64::MAX - 3] {
        v.push(with(format!("byte_offset {byte_offset}"), false, &|x| x.byte_offset = byte_offset));
    }
    if rank == 0 {
        return v;
    }
    v.push(with("null shape".into(), false, &|x| x.null_shape = true));
    let contiguous = contiguous_strides(shape);
    v.push(with("explicit contiguous strides".into(), true, &|x| x.strides = Some(contiguous.clone())));
    for d in 0..shape.len() {
        for bad in [-1, i64::MIN, i64::MAX] {
            v.push(with(format!("size {bad} in dimension {d}"), false, &|x| {
                let mut s = shape.to_vec();
                s[d] = bad;
                x.shape = Some(s);
            }));
        }
        // A size-1 dimension's stride reaches nothing: any value is valid.
        for stride in [i64::MAX, i64::MIN] {
            v.push(with(format!("stride {stride} in dimension {d} of size {}", shape[d]), shape[d] == 1, &|x| {
                let mut s = contiguous.clone();
                s[d] = stride;
                x.strides = Some(s);
            }));
        }
        if shape[d] > 1 {
            // Dimension d walked backwards from its last index: legal DLPack.
            v.push(with(format!("negative stride in dimension {d}"), true, &|x| {
                let mut s = contiguous.clone();
                s[d] = -s[d];
                x.byte_offset = ((shape[d] - 1) * contiguous[d] * elem) as u64;
                x.strides = Some(s);
            }));
        }
    }
    v
}

/// A dtype the value does not have, to be refused.
fn other_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F32
    } else {
        DType::F64
    }
}

/// One library: valid inputs and buffers from its manifest.
struct Subject<'a> {
    abi: &'a Abi,
    manifest: Manifest,
    inputs: Vec<Owned>,
}

impl Subject<'_> {
    fn valid_inputs(m: &Manifest) -> Result<Vec<Owned>, String> {
        let syms: Vec<Option<i64>> =
            m.symbols.iter().map(|s| Some(2.max(s.min).min(s.max.unwrap_or(i64::MAX)))).collect();
        m.inputs
            .iter()
            .map(|i| match i {
                InputSpec::Tensor(t) => {
                    let shape = t
                        .sizes
                        .iter()
                        .map(|e| e.eval(&syms))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| format!("input '{}': {e}", t.name))?;
                    Ok(Owned::new(t.dtype, &shape))
                }
                InputSpec::Constant { value, .. } => Ok(Owned::scalar(value)),
            })
            .collect()
    }

    fn n_outputs(&self) -> usize {
        self.manifest.outputs.len()
    }

    /// Fresh copies of the valid inputs (the program may mutate them).
    fn fresh_inputs(&self) -> Vec<Owned> {
        self.inputs.clone()
    }

    fn run_valid(&self, tally: &mut Tally, m: *mut AotcModel, what: &str) -> Vec<AotcTensor> {
        let mut inputs = self.fresh_inputs();
        let raw: Vec<AotcTensor> = inputs.iter_mut().map(Owned::raw).collect();
        let (rc, outs) = self.abi.run(m, &raw, self.n_outputs());
        tally.expect_ok(self.abi, what, rc);
        outs
    }

    /// Null pointers, bad indices, bad names and devices, wrong counts.
    fn misuse_calls(&self, tally: &mut Tally, m: *mut AotcModel) {
        let abi = self.abi;
        let null = std::ptr::null_mut();
        // SAFETY (this block): each call passes null or bad arguments the library checks,
        // and otherwise valid pointers to live memory.
        unsafe {
            if (abi.version)() != aotc_abi::ABI_VERSION {
                tally.fail(format!("aotc_abi_version is {}", (abi.version)()));
            }
            let mut out = null;
            tally.expect_refused(abi, "create: null device", (abi.create)(std::ptr::null(), &mut out));
            tally.expect_refused(abi, "create: null out", (abi.create)(c"cpu".as_ptr(), std::ptr::null_mut()));
            tally.expect_refused(abi, "create: device gpu", (abi.create)(c"gpu".as_ptr(), &mut out));
            tally.expect_refused(abi, "create: device cpu:7", (abi.create)(c"cpu:7".as_ptr(), &mut out));
            tally.expect_refused(abi, "create: non-UTF-8 device", (abi.create)(c"\xff\xfe".as_ptr(), &mut out));
            (abi.destroy)(null);

            let mut info = std::mem::MaybeUninit::<AotcValueInfo>::uninit();
            let n = (abi.input_count)(m);
            for i in [-1, n, i64::MAX, i64::MIN] {
                tally.expect_refused(abi, &format!("input_info index {i}"), (abi.input_info)(m, i, info.as_mut_ptr()));
            }
            tally.expect_refused(abi, "input_info: null out", (abi.input_info)(m, 0, std::ptr::null_mut()));
            tally.expect_refused(abi, "input_info: null model", (abi.input_info)(null, 0, info.as_mut_ptr()));
            tally.calls += 2;
            if (abi.input_count)(null) != -1 || abi.message().is_empty() {
                tally.fail("input_count(NULL) is not -1 with a message".into());
            } else {
                tally.refused += 1;
            }
            if !(abi.in_spec)(null).is_null() || abi.message().is_empty() {
                tally.fail("in_spec(NULL) is not NULL with a message".into());
            } else {
                tally.refused += 1;
            }

            let mut inputs = self.fresh_inputs();
            let mut raw: Vec<AotcTensor> = inputs.iter_mut().map(Owned::raw).collect();
            let n_in = raw.len() as i64;
            let n_out = self.n_outputs() as i64;
            let mut outs = vec![placeholder(); self.n_outputs() + 1];
            let o = outs.as_mut_ptr();
            tally.expect_refused(abi, "run: null model", (abi.run)(null, raw.as_ptr(), n_in, o, n_out));
            if n_in > 0 {
                tally.expect_refused(abi, "run: null inputs", (abi.run)(m, std::ptr::null(), n_in, o, n_out));
                tally.expect_refused(abi, "run: one input too few", (abi.run)(m, raw.as_ptr(), n_in - 1, o, n_out));
            }
            if n_out > 0 {
                tally.expect_refused(
                    abi,
                    "run: null outputs",
                    (abi.run)(m, raw.as_ptr(), n_in, std::ptr::null_mut(), n_out),
                );
                tally.expect_refused(abi, "run: one output too few", (abi.run)(m, raw.as_ptr(), n_in, o, n_out - 1));
            }
            tally.expect_refused(abi, "run: one output too many", (abi.run)(m, raw.as_ptr(), n_in, o, n_out + 1));
            for count in [-1, i64::MIN] {
                tally.expect_refused(abi, &format!("run: {count} inputs"), (abi.run)(m, raw.as_ptr(), count, o, n_out));
                tally.expect_refused(abi, &format!("run: {count} outputs"), (abi.run)(m, raw.as_ptr(), n_in, o, count));
            }
            raw.push(raw.first().copied().unwrap_or_else(placeholder));
            tally.expect_refused(abi, "run: one input too many", (abi.run)(m, raw.as_ptr(), n_in + 1, o, n_out));
            // One array as both inputs and outputs: valid, the outputs overwrite it.
            raw.resize(raw.len().max(self.n_outputs()), placeholder());
            tally.expect_ok(
                abi,
                "run: inputs array reused for outputs",
                (abi.run)(m, raw.as_ptr(), n_in, raw.as_mut_ptr(), n_out),
            );

            let mut value = Owned::new(DType::F32, &[1]);
            let t = value.raw();
            for (what, name) in [("unknown", c"no.such.buffer"), ("non-UTF-8", c"\xff"), ("empty", c"")] {
                tally.expect_refused(
                    abi,
                    &format!("buffer_read: {what} name"),
                    (abi.buffer_read)(m, name.as_ptr(), &t),
                );
                tally.expect_refused(
                    abi,
                    &format!("buffer_write: {what} name"),
                    (abi.buffer_write)(m, name.as_ptr(), &t),
                );
            }
            let name = self.manifest.buffers.first().map(|b| b.name.clone()).unwrap_or_default();
            let name = std::ffi::CString::new(name).unwrap_or_default();
            tally.expect_refused(abi, "buffer_read: null model", (abi.buffer_read)(null, name.as_ptr(), &t));
            tally.expect_refused(abi, "buffer_write: null model", (abi.buffer_write)(null, name.as_ptr(), &t));
            tally.expect_refused(abi, "buffer_read: null name", (abi.buffer_read)(m, std::ptr::null(), &t));
            tally.expect_refused(abi, "buffer_write: null name", (abi.buffer_write)(m, std::ptr::null(), &t));
            tally.expect_refused(
                abi,
                "buffer_read: null tensor",
                (abi.buffer_read)(m, name.as_ptr(), std::ptr::null()),
            );
            tally.expect_refused(
                abi,
                "buffer_write: null tensor",
                (abi.buffer_write)(m, name.as_ptr(), std::ptr::null()),
            );
        }
    }

    /// Each input in turn described every way `variants` knows, the others valid.
    fn input_variants(&self, tally: &mut Tally, m: *mut AotcModel) {
        for (i, spec) in self.manifest.inputs.iter().enumerate() {
            let wrong = match spec {
                InputSpec::Tensor(t) => Some(other_dtype(t.dtype)),
                InputSpec::Constant { .. } => None,
            };
            for mut variant in variants(&self.inputs[i].shape, self.inputs[i].dtype, wrong) {
                let mut inputs = self.fresh_inputs();
                let mut raw: Vec<AotcTensor> = inputs.iter_mut().map(Owned::raw).collect();
                raw[i] = variant.apply(raw[i]);
                let (rc, _) = self.abi.run(m, &raw, self.n_outputs());
                tally.expect(self.abi, &format!("input {i} ('{}'): {}", spec.name(), variant.what), variant.valid, rc);
            }
        }
    }

    /// Each buffer read and written through every variant of its descriptor.
    fn buffer_variants(&self, tally: &mut Tally, m: *mut AotcModel) {
        for b in &self.manifest.buffers {
            let name = std::ffi::CString::new(b.name.as_str()).expect("no NUL in names");
            let mut value = Owned::new(b.dtype, &b.sizes);
            for mut variant in variants(&b.sizes, b.dtype, Some(other_dtype(b.dtype))) {
                let t = variant.apply(value.raw());
                // SAFETY: a valid model and name; t is valid or malformed as the variant says.
                let (read, write) = unsafe {
                    ((self.abi.buffer_read)(m, name.as_ptr(), &t), (self.abi.buffer_write)(m, name.as_ptr(), &t))
                };
                tally.expect(self.abi, &format!("buffer_read '{}': {}", b.name, variant.what), variant.valid, read);
                tally.expect(self.abi, &format!("buffer_write '{}': {}", b.name, variant.what), variant.valid, write);
            }
        }
    }

    /// Calls on two instances with the same history: on `a` outputs go back in as the
    /// inputs of the next call (as memory the instance owns), on `b` fresh copies of them.
    /// Outputs and the memory fed in (mutated inputs) must end up the same.
    fn feed_outputs_back(&self, tally: &mut Tally, all: bool) -> Result<(), String> {
        let (a, b) = (self.abi.instance()?, self.abi.instance()?);
        let mut outs_a = self.run_valid(tally, a, "feed back: first call");
        let mut outs_b = self.run_valid(tally, b, "feed back: first call (copies)");
        for round in 1..=3 {
            let mut copies: Vec<Owned> = outs_b.iter().map(copy_output).collect();
            let (mut ins_a, mut ins_b) = (self.fresh_inputs(), self.fresh_inputs());
            let mut raw_a: Vec<AotcTensor> = ins_a.iter_mut().map(Owned::raw).collect();
            let mut raw_b: Vec<AotcTensor> = ins_b.iter_mut().map(Owned::raw).collect();
            let mut fed = vec![];
            for (i, input) in self.inputs.iter().enumerate() {
                let Some(o) =
                    copies.iter().position(|c| c.dtype == input.dtype && c.shape == input.shape && !c.shape.is_empty())
                else {
                    continue;
                };
                if !all && !fed.is_empty() {
                    break;
                }
                raw_a[i] = outs_a[o];
                raw_b[i] = copies[o].raw();
                fed.push(o);
            }
            let held: Vec<AotcTensor> = fed.iter().map(|&o| outs_a[o]).collect();
            let what = format!(
                "feed back ({}) round {round}: {} output(s) as inputs",
                if all { "all" } else { "one" },
                fed.len()
            );
            let (rc_a, next_a) = self.abi.run(a, &raw_a, self.n_outputs());
            let (rc_b, next_b) = self.abi.run(b, &raw_b, self.n_outputs());
            tally.expect_ok(self.abi, &what, rc_a);
            tally.expect_ok(self.abi, &format!("{what} (copies)"), rc_b);
            if rc_a != status::OK || rc_b != status::OK {
                break;
            }
            let same_outputs =
                next_a.iter().zip(&next_b).all(|(x, y)| copy_output(x).bytes() == copy_output(y).bytes());
            let same_fed = held.iter().zip(&fed).all(|(h, &o)| copy_output(h).bytes() == copies[o].bytes());
            if !same_outputs || !same_fed {
                tally.fail(format!(
                    "{what}: outputs equal {same_outputs}, fed inputs equal {same_fed}, compared with fresh copies"
                ));
            }
            (outs_a, outs_b) = (next_a, next_b);
        }
        // SAFETY: created above, destroyed once.
        unsafe {
            (self.abi.destroy)(a);
            (self.abi.destroy)(b)
        };
        Ok(())
    }
}

/// An output (contiguous, of a successful call) copied out of the library.
fn copy_output(t: &AotcTensor) -> Owned {
    let dtype = DType::from_dlpack(t.dtype).expect("outputs have known dtypes");
    // SAFETY: a successful call's output has ndim sizes at shape and its elements at data.
    let shape =
        if t.ndim == 0 { vec![] } else { unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) }.to_vec() };
    let mut copy = Owned::new(dtype, &shape);
    let n = copy.bytes().len();
    // SAFETY: as above: n bytes of contiguous data.
    copy.bytes_mut().copy_from_slice(if n == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(t.data as *const u8, n) }
    });
    copy
}

fn check_library(path: &str, tally: &mut Tally) -> Result<(), String> {
    let abi = Abi::load(path)?;
    let manifest = abi.manifest()?;
    let inputs = Subject::valid_inputs(&manifest)?;
    let subject = Subject { abi: &abi, manifest, inputs };
    let m = abi.instance()?;
    subject.run_valid(tally, m, "valid call");
    subject.misuse_calls(tally, m);
    subject.input_variants(tally, m);
    subject.buffer_variants(tally, m);
    // SAFETY: a valid model.
    tally.expect_ok(&abi, "profile_enable", unsafe { (abi.profile_enable)(m, 1) });
    for repeat in 0..3 {
        subject.run_valid(tally, m, &format!("valid call after misuse, {repeat}, profiled"));
    }
    profile_reads(&abi, tally, m);
    // SAFETY: created above, destroyed once.
    unsafe { (abi.destroy)(m) };
    subject.feed_outputs_back(tally, false)?;
    subject.feed_outputs_back(tally, true)?;
    subject.run_into_checks(tally)
}

/// The profile of the three calls, read into arrays that fit, and misread.
fn profile_reads(abi: &Abi, tally: &mut Tally, m: *mut AotcModel) {
    // SAFETY: a valid model, or null; every pointer is valid or null as its case says.
    unsafe {
        let n = (abi.kernel_count)(m);
        let (mut calls, mut call_ns, mut times) = (0i64, 0f64, vec![0f64; n.max(0) as usize]);
        tally.expect_ok(abi, "profile_read", (abi.profile_read)(m, &mut calls, &mut call_ns, times.as_mut_ptr(), n));
        if calls != 3 || times.iter().any(|t| !(0.0..=call_ns).contains(t)) {
            tally.fail(format!("profile_read: {calls} calls (expected 3), {call_ns} ns, kernels {times:?}"));
        }
        use std::ptr::null_mut as null;
        tally.expect_refused(
            abi,
            "profile_read: null model",
            (abi.profile_read)(null(), &mut calls, &mut call_ns, times.as_mut_ptr(), n),
        );
        tally.expect_refused(
            abi,
            "profile_read: null calls",
            (abi.profile_read)(m, null(), &mut call_ns, times.as_mut_ptr(), n),
        );
        if n > 0 {
            tally.expect_refused(
                abi,
                "profile_read: null kernel_ns",
                (abi.profile_read)(m, &mut calls, &mut call_ns, null(), n),
            );
        }
        tally.expect_refused(
            abi,
            "profile_read: too small",
            (abi.profile_read)(m, &mut calls, &mut call_ns, times.as_mut_ptr(), n - 1),
        );
        tally.expect_refused(abi, "profile_enable: null model", (abi.profile_enable)(null(), 0));
    }
}

fn main() -> ExitCode {
    let libs: Vec<String> = std::env::args().skip(1).collect();
    if libs.is_empty() {
        eprintln!("usage: aotc-abi-misuse LIB.so [LIB.so...]");
        return ExitCode::from(2);
    }
    let mut total = Tally::default();
    for lib in &libs {
        let mut tally = Tally::default();
        if let Err(e) = check_library(lib, &mut tally) {
            tally.fail(format!("{lib}: {e}"));
        }
        println!(
            "{lib}: {} calls, {} refused, {} ok, {} unexpected",
            tally.calls,
            tally.refused,
            tally.ok,
            tally.unexpected.len()
        );
        for u in &tally.unexpected {
            println!("  UNEXPECTED {u}");
        }
        total.calls += tally.calls;
        total.refused += tally.refused;
        total.ok += tally.ok;
        total.unexpected.extend(tally.unexpected);
    }
    println!(
        "abi-misuse: {} calls, {} refused with a clear error, {} ok, {} unexpected",
        total.calls,
        total.refused,
        total.ok,
        total.unexpected.len()
    );
    if total.unexpected.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
