//! Shared by the integration tests: loading the PTX kernels (assembled by `ptxas` first
//! when `AOTC_PTXAS` names one), a small deterministic random generator, and reference
//! float16/bfloat16 rounding written independently of the interpreter's.

#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use aotc_ptx_interp::Module;

pub fn kernel_source(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kernels").join(format!("{name}.ptx"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks `source` with `ptxas -arch=sm_80` when `AOTC_PTXAS` is set, so hand-written
/// PTX is known to be valid PTX, not just PTX this interpreter accepts.
pub fn assemble(label: &str, source: &str) {
    static NOTE: Once = Once::new();
    let Some(ptxas) = std::env::var_os("AOTC_PTXAS") else {
        NOTE.call_once(|| eprintln!("note: AOTC_PTXAS is unset; the test kernels are not checked with ptxas"));
        return;
    };
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let unique = format!("aotc-ptx-interp-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let dir = std::env::temp_dir();
    let ptx = dir.join(format!("{unique}.ptx"));
    let cubin = dir.join(format!("{unique}.cubin"));
    std::fs::write(&ptx, source).unwrap();
    let output = Command::new(&ptxas).arg("-arch=sm_80").arg(&ptx).arg("-o").arg(&cubin).output().unwrap();
    let _ = std::fs::remove_file(&ptx);
    let _ = std::fs::remove_file(&cubin);
    assert!(output.status.success(), "ptxas rejects {label}:\n{}", String::from_utf8_lossy(&output.stderr));
}

/// The kernel file `name`, assembled (if possible) and parsed.
pub fn module(name: &str) -> Module {
    module_from(name, &kernel_source(name))
}

pub fn module_from(label: &str, source: &str) -> Module {
    assemble(label, source);
    Module::parse(source).unwrap_or_else(|e| panic!("{label}: {e}"))
}

/// xorshift64*: deterministic test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in [low, high).
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        low + (high - low) * unit
    }
}

/// A 16-bit float format for the reference: decode by formula, encode by searching the
/// nearest representable value (ties to even bits), independent of the interpreter.
pub struct Half {
    pub mantissa_bits: u32,
    pub bias: i32,
    /// The largest finite value's bits.
    pub max_finite: u16,
}

pub const F16: Half = Half { mantissa_bits: 10, bias: 15, max_finite: 0x7bff };
pub const BF16: Half = Half { mantissa_bits: 7, bias: 127, max_finite: 0x7f7f };

impl Half {
    /// The value of finite bits (sign ignored: `magnitude`).
    fn magnitude(&self, bits: u16) -> f64 {
        let exponent = (bits >> self.mantissa_bits) as i32;
        let fraction = (bits & ((1 << self.mantissa_bits) - 1)) as f64;
        let m = self.mantissa_bits as i32;
        if exponent == 0 {
            fraction * 2f64.powi(1 - self.bias - m)
        } else {
            ((1u64 << m) as f64 + fraction) * 2f64.powi(exponent - self.bias - m)
        }
    }

    pub fn decode(&self, bits: u16) -> f32 {
        let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let magnitude = bits & 0x7fff;
        if magnitude > self.max_finite {
            let infinity = self.max_finite + 1;
            return if magnitude == infinity { sign as f32 * f32::INFINITY } else { f32::NAN };
        }
        (sign * self.magnitude(magnitude)) as f32
    }

    /// Round to nearest even; NaN as the canonical 0x7fff.
    pub fn encode(&self, x: f32) -> u16 {
        if x.is_nan() {
            return 0x7fff;
        }
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let target = (x as f64).abs();
        // The value just past the largest finite one, where rounding goes to infinity.
        let top = self.magnitude(self.max_finite);
        let beyond = 2.0 * top - self.magnitude(self.max_finite - 1);
        let value = |bits: u16| {
            if bits > self.max_finite {
                beyond
            } else {
                self.magnitude(bits)
            }
        };
        // The largest bits whose value is <= target (values grow with the bits).
        let (mut low, mut high) = (0u16, self.max_finite + 1);
        while low < high {
            let mid = (low + high).div_ceil(2);
            if value(mid) <= target {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        let below = low;
        if below > self.max_finite {
            return sign | below;
        }
        let above = below + 1;
        let (down, up) = (target - value(below), value(above) - target);
        let chosen = if down < up || (down == up && below % 2 == 0) { below } else { above };
        sign | chosen
    }
}
