//! A concatenation whose only reader copies it in another order writes that order itself.
//!
//! ShuffleNet ends each unit with `cat([x1, branch(x2)], 1)` and a channel shuffle (a view,
//! a transpose and a contiguous copy): two passes over the unit's output, the byte copy of
//! the concatenation (`aotc_abi::concat`) and a pointwise kernel that reorders it by
//! whole planes. When the reorder moves whole runs (its innermost loop copies a contiguous
//! run, each from within one part), the runs in their new order are again "for each outer
//! index, a block of each part", which is what the concatenation call writes: one call
//! with the composed geometry writes the reordered result, and the pointwise copy goes.
//!
//! Only a concatenation of one block per part (a batch of one) whose result the copy alone
//! reads, and a copy of static sizes, are rewritten.

use crate::ir::{BufId, ExprKind, ExternArg, ExternCall, Kernel, Program};
use crate::lower::Lowered;
use aotc_abi::sym::SymExpr;

/// The most runs a reordering copy may move (ShuffleNet's: 48 to 192 planes).
const MAX_RUNS: i64 = 4096;

pub fn fold_reordering_copies(lowered: &mut Lowered) {
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    let mut i = 0;
    while i < prog.kernels.len() {
        match reordered(prog, i).filter(|(_, copy, _)| !keep.contains(&prog.kernels[i].out()) && *copy > i) {
            Some((call, copy, out)) => {
                // The call now writes the copy's result where the concatenation was made.
                let nodes = prog.remove_kernel(copy);
                prog.kernels[i] = Kernel::Extern(Box::new(ExternCall { out, ..call }));
                super::epilogue::merge_nodes(prog, i, nodes);
            }
            None => i += 1,
        }
    }
}

/// For the concatenation at kernel `i` whose result only one later pointwise copy reads,
/// by whole runs: the call that writes the copy's result, the copy's kernel, and its
/// output.
fn reordered(prog: &Program, i: usize) -> Option<(ExternCall, usize, BufId)> {
    let Kernel::Extern(call) = &prog.kernels[i] else { return None };
    let [ExternArg::Bufs(parts), ExternArg::Sizes(geometry)] = call.args.as_slice() else { return None };
    if call.name != aotc_abi::concat::SYMBOL {
        return None;
    }
    let cat = call.out;
    let readers: Vec<usize> =
        (0..prog.kernels.len()).filter(|&k| k != i && prog.kernels[k].inputs().0.contains(&cat)).collect();
    let [copy] = readers[..] else { return None };
    let Kernel::Pointwise { out, ranges, body } = &prog.kernels[copy] else { return None };
    let ExprKind::Load { buf, index } = &body.kind else { return None };
    let elem = prog.buffers[cat].dtype.size() as i64;
    if *buf != cat || body.dtype != prog.buffers[*out].dtype || prog.buffers[*out].dtype != prog.buffers[cat].dtype {
        return None;
    }
    // [outer, block bytes per part, first byte per part, step per part], one block each.
    let g = geometry.iter().map(SymExpr::as_int).collect::<Option<Vec<i64>>>()?;
    let n = parts.len();
    if g.len() != 1 + 3 * n || g[0] != 1 {
        return None;
    }
    let (blocks, firsts) = (&g[1..1 + n], &g[1 + n..1 + 2 * n]);
    // The copy's loops: the innermost copies a run of `run` elements, the others pick runs.
    let sizes = ranges.iter().map(SymExpr::as_int).collect::<Option<Vec<i64>>>()?;
    let coef = |v: usize| index.terms.iter().find(|(w, _)| *w == v).map_or(Some(0), |(_, c)| c.as_int());
    let (&run, outer) = sizes.split_last()?;
    let count: i64 = outer.iter().product();
    // Runs of at least a cache line, and not so many that a call copies element by element.
    if coef(sizes.len() - 1)? != 1 || run * elem < 64 || count > MAX_RUNS {
        return None;
    }
    if prog.buffers[*out].static_bytes()? != (count * run * elem) as u64 {
        return None;
    }
    // Each run's part and its first byte there, in the copy's order.
    let mut runs = vec![];
    for flat in 0..count {
        let (mut rest, mut start) = (flat, index.offset.as_int()?);
        for (v, &size) in outer.iter().enumerate().rev() {
            start += (rest % size) * coef(v)?;
            rest /= size;
        }
        let (bytes, mut part_start) = (start * elem, 0);
        let k = (0..n).find(|&k| {
            let found = bytes >= part_start && bytes + run * elem <= part_start + blocks[k];
            part_start += blocks[k];
            found
        })?;
        let before: i64 = blocks[..k].iter().sum();
        runs.push((k, firsts[k] + bytes - before));
    }
    let (rows, columns) = as_rows(&runs)?;
    let block = SymExpr::Int(run * elem);
    let geometry = std::iter::once(SymExpr::Int(rows))
        .chain(columns.iter().map(|_| block.clone()))
        .chain(columns.iter().map(|c| SymExpr::Int(c.first)))
        .chain(columns.iter().map(|c| SymExpr::Int(c.step)))
        .collect();
    let bufs = columns.iter().map(|c| parts[c.part]).collect();
    let call = ExternCall { args: vec![ExternArg::Bufs(bufs), ExternArg::Sizes(geometry)], ..(**call).clone() };
    Some((call, copy, *out))
}

/// A part's runs in the reordered result: the first at byte `first` of the part, each
/// next one `step` bytes on.
struct Column {
    part: usize,
    first: i64,
    step: i64,
}

/// `runs` (part, first byte), in order, as rows of the same parts, each part's run
/// stepping by a fixed number of bytes from row to row: the row count and the columns.
/// The fewest columns that work.
fn as_rows(runs: &[(usize, i64)]) -> Option<(i64, Vec<Column>)> {
    (1..=runs.len()).filter(|&cols| runs.len().is_multiple_of(cols)).find_map(|cols| {
        let rows = runs.len() / cols;
        let columns: Option<Vec<Column>> = (0..cols)
            .map(|c| {
                let (part, first) = runs[c];
                let step = if rows > 1 { runs[cols + c].1 - first } else { 0 };
                (step >= 0 && (0..rows).all(|r| runs[r * cols + c] == (part, first + r as i64 * step)))
                    .then_some(Column { part, first, step })
            })
            .collect();
        Some((rows as i64, columns?))
    })
}
