//! Row-major layouts of `i64` sizes and element strides, shared by the compiler (dense
//! weights from strided storage) and the support library (strided inputs and outputs).

/// The strides of the contiguous (row-major) layout of `sizes`.
pub fn contiguous_strides(sizes: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * sizes[d + 1].max(1);
    }
    strides
}

/// True when `strides` describe the row-major layout of `sizes`; strides of size-1
/// dimensions do not matter.
pub fn is_contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1i64;
    for (&n, &s) in sizes.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected *= n;
    }
    true
}

/// Calls `f(linear, offset)` for every element in row-major order: `linear` is its
/// position in the contiguous layout, `offset` its element offset under `strides`.
pub fn for_each_offset(sizes: &[i64], strides: &[i64], mut f: impl FnMut(usize, i64)) {
    let count: i64 = sizes.iter().product();
    let mut index = vec![0i64; sizes.len()];
    for linear in 0..count.max(0) as usize {
        f(linear, index.iter().zip(strides).map(|(i, s)| i * s).sum());
        for d in (0..sizes.len()).rev() {
            index[d] += 1;
            if index[d] < sizes[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_of_a_transpose() {
        let mut seen = vec![];
        for_each_offset(&[2, 3], &[1, 2], |l, o| seen.push((l, o)));
        assert_eq!(seen, vec![(0, 0), (1, 2), (2, 4), (3, 1), (4, 3), (5, 5)]);
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert!(is_contiguous(&[2, 1, 4], &[4, 99, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
    }
}
