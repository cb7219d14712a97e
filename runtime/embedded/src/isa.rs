//! The vector instruction sets the support library's kernels are compiled for, and the
//! one this process runs: the best the CPU has, whatever CPU the library was compiled
//! for (`aotc compile --cpu` chooses the generated code's target, not these kernels'), or
//! a lower one named by `AOTC_ISA` (`portable`, `avx2`, `avx512`), to measure or check
//! the kernels another kind of machine would run. Every kernel family asks here, so one
//! place chooses.

use std::sync::atomic::{AtomicU8, Ordering};

/// The instruction sets, slowest first (a CPU that runs one runs those before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Scalar or SSE code (any x86-64, or another architecture).
    Portable,
    /// AVX2 + FMA (x86-64-v3).
    Avx2,
    /// AVX-512F with AVX2 + FMA (x86-64-v4's AVX-512 part).
    Avx512,
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2, Isa::Avx512];

    /// Whether this CPU runs the kernels of `self`.
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Isa::Avx2.available() && is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The set this process's kernels use: the best available, at most `AOTC_ISA`'s
    /// (read once); in tests, the one [`Isa::forced`] forces.
    pub fn best() -> Isa {
        #[cfg(test)]
        if let i @ 0..3 = FORCED.load(Ordering::Relaxed) {
            return Isa::ALL[i as usize];
        }
        static CHOSEN: AtomicU8 = AtomicU8::new(u8::MAX);
        match CHOSEN.load(Ordering::Relaxed) {
            u8::MAX => {
                let isa = Isa::choose(std::env::var("AOTC_ISA").ok().as_deref());
                CHOSEN.store(isa as u8, Ordering::Relaxed);
                isa
            }
            i => Isa::ALL[i as usize],
        }
    }

    /// The best available set no faster than `cap` (a name of [`Isa::parse`]; none or an
    /// unknown name caps nothing).
    fn choose(cap: Option<&str>) -> Isa {
        let cap = cap.and_then(Isa::parse).unwrap_or(Isa::Avx512);
        Isa::ALL.into_iter().rev().find(|&isa| isa <= cap && isa.available()).unwrap_or(Isa::Portable)
    }

    fn parse(name: &str) -> Option<Isa> {
        match name {
            "portable" => Some(Isa::Portable),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }
}

/// [`Isa::best`]'s answer while a test runs [`Isa::forced`]: an index of [`Isa::ALL`], or
/// `u8::MAX` for none forced.
#[cfg(test)]
static FORCED: AtomicU8 = AtomicU8::new(u8::MAX);

#[cfg(test)]
impl Isa {
    /// Every set this CPU runs, slowest first: the tests run each kernel on all of them.
    pub fn every_available() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.available())
    }

    /// Runs `f` with [`Isa::best`] answering `self` (which this CPU must run), so that a
    /// test covers each set through the entry points. The tests that force one take
    /// turns; the others meanwhile run on the forced set, which computes the same.
    pub fn forced<R>(self, f: impl FnOnce() -> R) -> R {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        /// Ends the forcing, also when `f` panics.
        struct Unforce;
        impl Drop for Unforce {
            fn drop(&mut self) {
                FORCED.store(u8::MAX, Ordering::Relaxed);
            }
        }
        assert!(self.available(), "{self:?} forced on a CPU without it");
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        FORCED.store(self as u8, Ordering::Relaxed);
        let _unforce = Unforce;
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::Isa;

    #[test]
    fn a_cap_lowers_the_choice_and_never_raises_it() {
        let best = Isa::choose(None);
        assert!(best.available());
        assert_eq!(Isa::choose(Some("portable")), Isa::Portable);
        assert_eq!(Isa::choose(Some("avx2")), if Isa::Avx2.available() { Isa::Avx2 } else { Isa::Portable });
        assert_eq!(Isa::choose(Some("avx512")), best);
        assert_eq!(Isa::choose(Some("sse9")), best, "an unknown name caps nothing");
    }
}
