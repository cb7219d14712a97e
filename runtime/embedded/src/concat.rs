//! torch.cat as byte copies (`aotc_abi::concat::SYMBOL`): each part is `outer` blocks
//! equally spaced, and block `o` of the output is block `o` of every part, in order. One
//! `memcpy` per block and part, spread over the call's threads when there is enough to
//! copy, instead of a generated kernel choosing the part of every element.

use crate::guards::refuse_extern_call;
use crate::pool;

/// # Safety
/// `parts` holds `count` pointers and `sizes` `len` = `1 + 3 count` sizes as
/// `aotc_abi::concat` lays them out; each part's blocks lie in its buffer, `out` holds
/// `outer` times the sum of their sizes, and `out` overlaps no part.
#[no_mangle]
pub unsafe extern "C" fn __aotc_concat(out: *mut u8, parts: *const *const u8, count: i64, sizes: *const i64, len: i64) {
    // SAFETY: the generated code passes its lists and their lengths.
    let (parts, sizes) = unsafe {
        (
            std::slice::from_raw_parts(parts, count.max(0) as usize),
            std::slice::from_raw_parts(sizes, len.max(0) as usize),
        )
    };
    let Some((&outer, lists)) = sizes.split_first() else { return refuse_extern_call("__aotc_concat") };
    if lists.len() != 3 * parts.len() || sizes.iter().any(|&s| s < 0) {
        return refuse_extern_call("__aotc_concat");
    }
    let (bytes, rest) = lists.split_at(parts.len());
    let (offsets, strides) = rest.split_at(parts.len());
    // Sizes in bytes, non-negative (checked above).
    let size = |k: usize| bytes[k] as usize;
    let (outer, row) = (outer as usize, (0..bytes.len()).map(size).sum::<usize>());
    // Piece i copies block i / count of part i % count.
    let pieces = outer * parts.len();
    let (out_addr, part_addrs) = (out as usize, parts.as_ptr() as usize);
    let copy = |range: std::ops::Range<usize>| {
        for i in range {
            let (o, k) = (i / bytes.len(), i % bytes.len());
            let start: usize = (0..k).map(size).sum();
            // SAFETY: the caller's contract: block `o` of part k and its place in block `o`
            // of `out` are inside their buffers, which do not overlap.
            unsafe {
                let part = (*(part_addrs as *const *const u8).add(k)).add(offsets[k] as usize);
                let n = size(k);
                let block = part.add(o * strides[k] as usize);
                std::ptr::copy_nonoverlapping(block, (out_addr as *mut u8).add(o * row + start), n);
            }
        }
    };
    pool::for_ranges(pieces, outer * row, &copy);
}
