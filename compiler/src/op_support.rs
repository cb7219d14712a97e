//! `aotc ops`: which of the Core ATen operators aotc lowers, and the operators outside
//! Core ATen it lowers too (those `torch.export.export` leaves without `run_decompositions()`).

use crate::lower::aten::{registry, signatures};
use aotc_abi::DType;

/// One line per Core ATen operator ("supported" or "not supported"), the dtypes the
/// backend computes in, and the count; then the supported operators outside Core ATen.
pub fn report() -> String {
    // The CPU backend computes every dtype aotc knows (16-bit floats in float32).
    let dtypes: Vec<String> = DType::all().map(|d| d.to_string()).collect();
    let mut out = String::new();
    let mut supported = 0;
    let core: Vec<String> = signatures::core_operators().collect();
    for op in &core {
        // Size queries (sym_size...) are bookkeeping: their values are the program's symbols.
        let target = format!("torch.ops.aten.{op}");
        let lowered = registry::lookup(&target).is_some() || crate::lower::is_bookkeeping(&target);
        supported += lowered as usize;
        out.push_str(&format!("{op:<48} {}\n", if lowered { "supported" } else { "not supported" }));
    }
    out.push_str(&format!(
        "\nsupported operators take every dtype PyTorch defines them for among: {}\n",
        dtypes.join(", ")
    ));
    out.push_str(
        "except the FFTs (_fft_r2c, _fft_c2r): float32 and complex64 only, complex values only inside the graph\n",
    );
    out.push_str(&format!("{supported}/{} Core ATen operators supported\n", core.len()));
    let mut extra: Vec<&str> = registry::operators().filter(|op| !core.iter().any(|c| c == op)).collect();
    extra.sort_unstable();
    out.push_str(&format!("\n{} operators outside Core ATen supported:\n", extra.len()));
    for op in extra {
        out.push_str(&format!("{op:<48} supported\n"));
    }
    out.push_str("\ncontrol flow and checks:\n");
    for target in crate::lower::structural_targets() {
        let name = target.trim_start_matches("torch.ops.");
        out.push_str(&format!("{name:<48} supported\n"));
    }
    out.push_str(&format!("{:<48} not supported (a loop in the generated code)\n", "higher_order.while_loop"));
    out.push_str(&format!("{:<48} not supported (a loop in the generated code)\n", "higher_order.scan"));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_the_operators_outside_core_aten_apart() {
        let report = super::report();
        let (core, extra) = report.split_once("operators outside Core ATen supported:").expect("a second section");
        assert!(core.contains("addmm.default") && !extra.contains("addmm.default"));
        assert!(extra.contains("linear.default") && extra.contains("scaled_dot_product_attention.default"));
        assert!(extra.contains("higher_order.cond") && extra.contains("aten._assert_async.msg"));
    }
}
