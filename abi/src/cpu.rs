//! The CPU a library's generated code is compiled for (`aotc compile --cpu`): a named
//! x86-64 level or the compiling machine's own features, as the x86 feature names that
//! both Cranelift (its `has_*` settings) and the library's check at load time
//! ([`host_has`]) understand. The support library's own kernels pick AVX2/FMA at run time
//! whatever the target; only the generated code is bound to it.

use serde::{Deserialize, Serialize};

/// The features the generated code may use: (x86 feature name, Cranelift setting).
pub const FEATURES: &[(&str, &str)] = &[
    ("sse3", "has_sse3"),
    ("ssse3", "has_ssse3"),
    ("sse4.1", "has_sse41"),
    ("sse4.2", "has_sse42"),
    ("popcnt", "has_popcnt"),
    ("cmpxchg16b", "has_cmpxchg16b"),
    ("avx", "has_avx"),
    ("avx2", "has_avx2"),
    ("fma", "has_fma"),
    ("bmi1", "has_bmi1"),
    ("bmi2", "has_bmi2"),
    ("lzcnt", "has_lzcnt"),
    ("avx512f", "has_avx512f"),
    ("avx512dq", "has_avx512dq"),
    ("avx512vl", "has_avx512vl"),
];

/// The x86-64 psABI levels, each with the features it adds (of [`FEATURES`]).
const LEVELS: &[(&str, &[&str])] = &[
    ("x86-64", &[]),
    ("x86-64-v2", &["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cmpxchg16b"]),
    ("x86-64-v3", &["avx", "avx2", "fma", "bmi1", "bmi2", "lzcnt"]),
    ("x86-64-v4", &["avx512f", "avx512dq", "avx512vl"]),
];

/// The target `aotc compile` uses unless told otherwise: the x86-64 baseline every
/// 64-bit x86 CPU runs.
pub const DEFAULT: &str = "x86-64";

/// What a library's generated code needs: its target's name (`x86-64-v3`, `native`) and
/// the features that implies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTarget {
    pub name: String,
    pub features: Vec<String>,
}

impl CpuTarget {
    /// A named level, or `native`: the features of this machine.
    pub fn parse(name: &str) -> Result<CpuTarget, String> {
        let features: Vec<&str> = if name == "native" {
            FEATURES.iter().map(|(f, _)| *f).filter(|f| host_has(f)).collect()
        } else {
            let at = LEVELS.iter().position(|(level, _)| *level == name).ok_or_else(|| {
                let names: Vec<&str> = LEVELS.iter().map(|(l, _)| *l).chain(["native"]).collect();
                format!("unknown CPU target '{name}': expected one of {}", names.join(", "))
            })?;
            LEVELS[..=at].iter().flat_map(|(_, adds)| adds.iter().copied()).collect()
        };
        Ok(CpuTarget { name: name.to_string(), features: features.into_iter().map(String::from).collect() })
    }

    /// The first feature the target needs that this machine lacks.
    pub fn missing_on_host(&self) -> Option<&str> {
        self.features.iter().map(String::as_str).find(|f| !host_has(f))
    }
}

/// Whether this machine has x86 feature `name` (one of [`FEATURES`]); false for any other
/// name, and on other architectures.
pub fn host_has(name: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match name {
            "sse3" => std::is_x86_feature_detected!("sse3"),
            "ssse3" => std::is_x86_feature_detected!("ssse3"),
            "sse4.1" => std::is_x86_feature_detected!("sse4.1"),
            "sse4.2" => std::is_x86_feature_detected!("sse4.2"),
            "popcnt" => std::is_x86_feature_detected!("popcnt"),
            "cmpxchg16b" => std::is_x86_feature_detected!("cmpxchg16b"),
            "avx" => std::is_x86_feature_detected!("avx"),
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "fma" => std::is_x86_feature_detected!("fma"),
            "bmi1" => std::is_x86_feature_detected!("bmi1"),
            "bmi2" => std::is_x86_feature_detected!("bmi2"),
            "lzcnt" => std::is_x86_feature_detected!("lzcnt"),
            "avx512f" => std::is_x86_feature_detected!("avx512f"),
            "avx512dq" => std::is_x86_feature_detected!("avx512dq"),
            "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = name;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_include_the_ones_below() {
        assert!(CpuTarget::parse("x86-64").unwrap().features.is_empty());
        let v3 = CpuTarget::parse("x86-64-v3").unwrap().features;
        assert!(v3.contains(&"sse4.2".to_string()) && v3.contains(&"fma".to_string()), "{v3:?}");
        assert!(!v3.contains(&"avx512f".to_string()));
        assert!(CpuTarget::parse("x86-64-v4").unwrap().features.contains(&"avx2".to_string()));
        let e = CpuTarget::parse("haswell").unwrap_err();
        assert!(e.contains("x86-64-v2") && e.contains("native"), "{e}");
    }

    #[test]
    fn every_feature_is_detectable_and_native_runs_here() {
        let native = CpuTarget::parse("native").unwrap();
        assert_eq!(native.missing_on_host(), None);
        assert!(FEATURES.iter().all(|(f, flag)| flag.starts_with("has_") && LEVELS.iter().any(|(_, l)| l.contains(f))));
    }
}
