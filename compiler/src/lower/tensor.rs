//! A tensor value during lowering: either a strided view of a buffer, or a lazy pointwise
//! body not yet written anywhere. View ops remap indices and never copy.
//!
//! A complex64 value is a float32 value with a hidden trailing dimension of 2 holding
//! (re, im), torch's `view_as_real` layout, and `complex` set; only the lowerings of
//! `aten::complex` see such values.
//!
//! A lazy body carries its origin: the graph nodes whose computation it holds, so that
//! the kernel it ends up in can name them (profiles, the text IR).

use super::origin;
use crate::ir::expr::{self, substitute, Affine, E};
use crate::ir::{BufId, StridedRef};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::rc::Rc;

/// The graph nodes whose computation a lazy body holds: indices into `Program::nodes`,
/// ascending. A body a lowering makes gets the current node when it becomes a result
/// (`Lowerer::stamp`) or a kernel.
pub type Origin = Rc<[usize]>;

#[derive(Clone, Debug)]
pub enum Repr {
    View(StridedRef),
    /// A body over loop variables `0..rank`.
    Lazy(E, Origin),
}

#[derive(Clone, Debug)]
pub struct TensorValue {
    pub dtype: DType,
    /// The sizes of the stored values: a complex value's include the hidden dimension.
    pub sizes: Vec<SymExpr>,
    pub repr: Repr,
    /// complex64 as (re, im) float32 pairs along the last of `sizes`.
    pub complex: bool,
}

/// Whether two sizes are provably equal: as integers, or as the same expression.
pub fn same_size(a: &SymExpr, b: &SymExpr) -> bool {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

pub fn contiguous_strides(sizes: &[SymExpr]) -> Vec<SymExpr> {
    let mut strides = vec![SymExpr::Int(1); sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        strides[d] = SymExpr::mul([strides[d + 1].clone(), sizes[d + 1].clone()]);
    }
    strides
}

pub fn vars(rank: usize) -> Vec<Affine> {
    (0..rank).map(Affine::var).collect()
}

/// The element offset `offset + sum(stride * index)` of a view at `index`.
fn element_index(r: &StridedRef, index: &[Affine]) -> Affine {
    index.iter().zip(&r.strides).fold(Affine::constant(r.offset.clone()), |acc, (i, s)| acc.plus(&i.scale(s)))
}

/// Wraps a negative dimension index the python way.
pub fn norm_dim(d: i64, rank: usize) -> Result<usize, String> {
    let r = rank.max(1) as i64;
    let n = if d < 0 { d + r } else { d };
    if n < 0 || n >= r {
        return Err(format!("dimension {d} out of range for rank {rank}"));
    }
    Ok(n as usize)
}

impl TensorValue {
    pub fn view_of(buf: BufId, dtype: DType, sizes: Vec<SymExpr>) -> TensorValue {
        let strides = contiguous_strides(&sizes);
        TensorValue {
            dtype,
            sizes,
            repr: Repr::View(StridedRef { buf, offset: SymExpr::Int(0), strides }),
            complex: false,
        }
    }

    pub fn lazy(dtype: DType, sizes: Vec<SymExpr>, body: E) -> TensorValue {
        let origin = origin::of_body(&body);
        TensorValue { dtype, sizes, repr: Repr::Lazy(expr::cast(body, dtype), origin), complex: false }
    }

    pub fn rank(&self) -> usize {
        self.sizes.len()
    }

    /// The sizes torch sees: without a complex value's hidden (re, im) dimension.
    pub fn logical_sizes(&self) -> &[SymExpr] {
        &self.sizes[..self.sizes.len() - self.complex as usize]
    }

    /// The dtype torch sees, for messages.
    pub fn type_name(&self) -> String {
        if self.complex {
            "complex64".into()
        } else {
            self.dtype.to_string()
        }
    }

    /// The element at `index` (one affine index per dimension).
    pub fn load(&self, index: &[Affine]) -> E {
        debug_assert_eq!(index.len(), self.rank(), "wrong number of indices");
        match &self.repr {
            Repr::View(r) => expr::load(r.buf, self.dtype, element_index(r, index)),
            Repr::Lazy(body, origin) => origin::loaded(substitute(body, index), origin),
        }
    }

    /// A new value of `sizes` whose element at index `i` is this one's element at `map(i)`.
    /// Stays a view when this is one: composing affine maps never copies.
    pub fn remap(&self, sizes: Vec<SymExpr>, map: &dyn Fn(&[Affine]) -> Vec<Affine>) -> TensorValue {
        let old_index = map(&vars(sizes.len()));
        let repr = match &self.repr {
            Repr::View(r) => {
                let at = element_index(r, &old_index);
                Repr::View(StridedRef {
                    buf: r.buf,
                    offset: at.offset.clone(),
                    strides: (0..sizes.len()).map(|v| at.coef(v)).collect(),
                })
            }
            Repr::Lazy(body, origin) => Repr::Lazy(substitute(body, &old_index), origin.clone()),
        };
        TensorValue { dtype: self.dtype, sizes, repr, complex: self.complex }
    }

    pub fn permute(&self, dims: &[usize]) -> Result<TensorValue, String> {
        let mut seen = vec![false; self.rank()];
        if dims.len() != self.rank() || dims.iter().any(|&d| d >= self.rank() || std::mem::replace(&mut seen[d], true))
        {
            return Err(format!("{dims:?} is not a permutation of {} dimensions", self.rank()));
        }
        let sizes = dims.iter().map(|&d| self.sizes[d].clone()).collect();
        let dims = dims.to_vec();
        Ok(self.remap(sizes, &|v| {
            let mut old = vec![Affine::constant(SymExpr::Int(0)); dims.len()];
            for (j, &d) in dims.iter().enumerate() {
                old[d] = v[j].clone();
            }
            old
        }))
    }

    /// Broadcasts to `sizes` (numpy rules; `-1` in torch's expand arrives resolved).
    pub fn expand(&self, sizes: &[SymExpr]) -> Result<TensorValue, String> {
        if sizes.len() < self.rank() {
            return Err(format!("cannot expand rank {} to rank {}", self.rank(), sizes.len()));
        }
        let lead = sizes.len() - self.rank();
        for (d, s) in self.sizes.iter().enumerate() {
            let same = *s == sizes[lead + d] || aotc_abi::sym::equal_in_scope(s, &sizes[lead + d]) == Some(true);
            if !same && *s != SymExpr::Int(1) {
                return Err(format!("cannot expand size {s} to {} at dimension {}", sizes[lead + d], lead + d));
            }
        }
        let old_sizes = self.sizes.clone();
        let target = sizes.to_vec();
        Ok(self.remap(sizes.to_vec(), &|v| {
            old_sizes
                .iter()
                .enumerate()
                .map(|(d, s)| {
                    if *s == SymExpr::Int(1) && target[lead + d] != SymExpr::Int(1) {
                        Affine::constant(SymExpr::Int(0))
                    } else {
                        v[lead + d].clone()
                    }
                })
                .collect()
        }))
    }

    pub fn unsqueeze(&self, dim: usize) -> TensorValue {
        let mut sizes = self.sizes.clone();
        sizes.insert(dim, SymExpr::Int(1));
        self.remap(sizes, &|v| v.iter().enumerate().filter(|(j, _)| *j != dim).map(|(_, a)| a.clone()).collect())
    }

    /// Removes the given dimensions, which must have size 1 (others are kept, as torch does).
    pub fn squeeze(&self, dims: &[usize]) -> TensorValue {
        let drop: Vec<bool> = (0..self.rank()).map(|d| dims.contains(&d) && self.sizes[d] == SymExpr::Int(1)).collect();
        let sizes = self.sizes.iter().zip(&drop).filter(|(_, &x)| !x).map(|(s, _)| s.clone()).collect();
        self.remap(sizes, &|v| {
            let mut it = v.iter();
            drop.iter()
                .map(|&x| if x { Affine::constant(SymExpr::Int(0)) } else { it.next().expect("kept dims").clone() })
                .collect()
        })
    }

    pub fn select(&self, dim: usize, index: SymExpr) -> TensorValue {
        let mut sizes = self.sizes.clone();
        sizes.remove(dim);
        self.remap(sizes, &|v| {
            let mut old: Vec<Affine> = v.to_vec();
            old.insert(dim, Affine::constant(index.clone()));
            old
        })
    }

    /// Elements `start, start+step, ...` of `dim`, `len` of them.
    pub fn slice(&self, dim: usize, start: SymExpr, len: SymExpr, step: i64) -> TensorValue {
        let mut sizes = self.sizes.clone();
        sizes[dim] = len;
        self.remap(sizes, &|v| {
            let mut old = v.to_vec();
            old[dim] = Affine::constant(start.clone()).plus(&v[dim].scale(&SymExpr::Int(step)));
            old
        })
    }

    /// The same memory seen with `sizes`, when the view's layout allows it (contiguous,
    /// or strides torch's `view` would accept: a column slice of a matrix seen as a
    /// batch of rows); `None` when the layout needs a copy first.
    pub fn reshape_view(&self, sizes: &[SymExpr]) -> Option<TensorValue> {
        let Repr::View(r) = &self.repr else { return None };
        let strides =
            if r.strides == contiguous_strides(&self.sizes) || self.sizes.iter().all(|s| *s == SymExpr::Int(1)) {
                contiguous_strides(sizes)
            } else {
                view_strides(&self.sizes, &r.strides, sizes)?
            };
        let repr = Repr::View(StridedRef { buf: r.buf, offset: r.offset.clone(), strides });
        Some(TensorValue { dtype: self.dtype, sizes: sizes.to_vec(), repr, complex: self.complex })
    }
}

/// The strides with which memory laid out as `(sizes, strides)` reads as `new_sizes` in
/// row-major order, as torch's `view` computes them (ATen's `computeStride`): each run
/// of old dimensions that are contiguous with each other splits into new dimensions
/// covering exactly its elements. Static sizes and strides only, and at least one
/// element; `None` where no strides do (or they are not known).
fn view_strides(sizes: &[SymExpr], strides: &[SymExpr], new_sizes: &[SymExpr]) -> Option<Vec<SymExpr>> {
    let ints = |xs: &[SymExpr]| xs.iter().map(SymExpr::as_int).collect::<Option<Vec<i64>>>();
    let (old, old_strides, new) = (ints(sizes)?, ints(strides)?, ints(new_sizes)?);
    if old.is_empty() || old.contains(&0) {
        return None;
    }
    let mut out = vec![0i64; new.len()];
    let mut view_d = new.len() as isize - 1;
    let mut chunk_stride = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for d in (0..old.len()).rev() {
        tensor_numel = tensor_numel.checked_mul(old[d])?;
        // A run ends where the next outer dimension is not contiguous with it.
        if d == 0 || (old[d - 1] != 1 && old_strides[d - 1] != tensor_numel.checked_mul(chunk_stride)?) {
            while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                out[view_d as usize] = view_numel.checked_mul(chunk_stride)?;
                view_numel = view_numel.checked_mul(new[view_d as usize])?;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_stride = old_strides[d - 1];
                (tensor_numel, view_numel) = (1, 1);
            }
        }
    }
    (view_d == -1).then(|| out.into_iter().map(SymExpr::Int).collect())
}

/// The broadcast shape of several operands (numpy rules). Two sizes match when the
/// symbols' ranges prove them equal (`aotc_abi::sym::equal_in_scope`); where the ranges
/// leave it open they are assumed equal, as torch.export assumed when it traced, and the
/// lowering turns the assumption into a run-time guard (`Lowerer::lower_node`).
pub fn broadcast_shapes(shapes: &[&[SymExpr]]) -> Result<Vec<SymExpr>, String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![SymExpr::Int(1); rank];
    for s in shapes {
        let lead = rank - s.len();
        for (d, x) in s.iter().enumerate() {
            let o = &mut out[lead + d];
            if *o == SymExpr::Int(1) {
                *o = x.clone();
            } else if *x != SymExpr::Int(1) {
                match aotc_abi::sym::equal_in_scope(x, o) {
                    Some(true) => {}
                    None => aotc_abi::sym::assume_equal(o, x),
                    Some(false) => {
                        return Err(format!(
                            "shapes {:?} do not broadcast (dimension {}: {o} vs {x})",
                            shapes
                                .iter()
                                .map(|s| s.iter().map(|e| e.to_string()).collect::<Vec<_>>())
                                .collect::<Vec<_>>(),
                            lead + d
                        ))
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The element offsets of `(sizes, strides)` in row-major order of its indices.
    fn addresses(sizes: &[i64], strides: &[i64]) -> Vec<i64> {
        let mut out = vec![0i64];
        for (&n, &s) in sizes.iter().zip(strides) {
            out = out.iter().flat_map(|&a| (0..n).map(move |i| a + i * s)).collect();
        }
        out
    }

    fn syms(xs: &[i64]) -> Vec<SymExpr> {
        xs.iter().map(|&x| SymExpr::Int(x)).collect()
    }

    fn strides_of(sizes: &[i64], strides: &[i64], new: &[i64]) -> Option<Vec<i64>> {
        view_strides(&syms(sizes), &syms(strides), &syms(new)).map(|s| s.iter().map(|x| x.as_int().unwrap()).collect())
    }

    #[test]
    fn views_of_strided_memory_read_the_same_elements_in_order() {
        // (old sizes, old strides, new sizes, whether torch's view accepts it)
        type Case = (&'static [i64], &'static [i64], &'static [i64], bool);
        let cases: &[Case] = &[
            (&[16, 32], &[96, 1], &[2, 8, 32], true), // a column slice (q of a fused qkv)
            (&[4, 6], &[12, 1], &[2, 2, 6], true),
            (&[4, 6], &[12, 1], &[4, 2, 3], true),
            (&[4, 6], &[12, 1], &[24], false),
            (&[3, 4], &[1, 3], &[12], false),     // a transpose
            (&[3, 4], &[1, 3], &[3, 2, 2], true), // a dimension split in place
            (&[3, 4], &[1, 3], &[3, 4, 1], true),
            (&[2, 4, 8, 8], &[256, 8, 32, 1], &[8, 8, 8], false), // heads of a permute
            (&[2, 4, 8, 8], &[256, 8, 32, 1], &[2, 4, 64], false),
            (&[2, 4, 8, 8], &[256, 8, 32, 1], &[2, 4, 8, 2, 4], true),
            (&[1, 4], &[999, 2], &[4, 1], true),
            (&[1, 4], &[999, 2], &[2, 2], true),
            (&[5, 1, 3], &[6, 7, 2], &[5, 3], true),
            (&[5, 1, 3], &[6, 7, 2], &[15], true), // every second element
            (&[5, 1, 3], &[7, 1, 2], &[15], false),
        ];
        for &(sizes, strides, new, viewable) in cases {
            let got = strides_of(sizes, strides, new);
            assert_eq!(got.is_some(), viewable, "{sizes:?} strides {strides:?} as {new:?}: {got:?}");
            if let Some(s) = got {
                assert_eq!(
                    addresses(new, &s),
                    addresses(sizes, strides),
                    "{sizes:?} strides {strides:?} as {new:?} with strides {s:?}"
                );
            }
        }
        // Sizes not known at compile time, and empty views, take the copy.
        let dynamic = view_strides(
            &[SymExpr::Sym(0), SymExpr::Int(4)],
            &syms(&[8, 1]),
            &[SymExpr::Sym(0), SymExpr::Int(2), SymExpr::Int(2)],
        );
        assert!(dynamic.is_none());
        assert!(strides_of(&[0, 4], &[8, 1], &[4, 0]).is_none());
    }
}
