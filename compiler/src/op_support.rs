//! `aotc ops`: which of the Core ATen operators aotc lowers.

use crate::lower::aten::{registry, signatures};
use aotc_abi::DType;

/// One line per Core ATen operator ("supported" or "not supported"), the dtypes the
/// backend computes in, and the count.
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
    out
}
