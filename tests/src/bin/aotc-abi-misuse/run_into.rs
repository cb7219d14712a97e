//! `aotc_output_shapes` and `aotc_run_into` under misuse: every output described every
//! way `variants` knows, null pointers and wrong counts; and valid calls, whose outputs
//! must equal `aotc_run`'s on an instance with the same history.

use super::{copy_output, other_dtype, variants, Owned, Subject, Tally};
use aotc_abi::{status, AotcModel, AotcTensor};

impl Subject<'_> {
    /// The outputs' shapes for the valid inputs; `None` when one depends on the data.
    fn valid_output_shapes(&self, tally: &mut Tally, m: *mut AotcModel) -> Option<Vec<Vec<i64>>> {
        let mut inputs = self.fresh_inputs();
        let raw: Vec<AotcTensor> = inputs.iter_mut().map(Owned::raw).collect();
        let ranks: Vec<usize> = self.manifest.outputs.iter().map(|o| o.sizes.len()).collect();
        let mut dims = vec![0i64; ranks.iter().sum()];
        // SAFETY: valid inputs; dims holds every output's dimensions.
        let rc = unsafe {
            (self.abi.output_shapes)(m, raw.as_ptr(), raw.len() as i64, dims.as_mut_ptr(), dims.len() as i64)
        };
        tally.expect_ok(self.abi, "output_shapes", rc);
        let mut rest = dims.as_slice();
        let shapes: Vec<Vec<i64>> = ranks
            .iter()
            .map(|&r| {
                let (shape, tail) = rest.split_at(r);
                rest = tail;
                shape.to_vec()
            })
            .collect();
        (rc == status::OK && shapes.iter().flatten().all(|&n| n >= 0)).then_some(shapes)
    }

    /// Fresh output tensors of `shapes`.
    fn output_tensors(&self, shapes: &[Vec<i64>]) -> Vec<Owned> {
        self.manifest.outputs.iter().zip(shapes).map(|(o, s)| Owned::new(o.dtype, s)).collect()
    }

    /// aotc_run_into of the valid inputs into `outputs` on `m`.
    fn run_into(&self, m: *mut AotcModel, outputs: &[AotcTensor]) -> i32 {
        let mut inputs = self.fresh_inputs();
        let raw: Vec<AotcTensor> = inputs.iter_mut().map(Owned::raw).collect();
        // SAFETY: arrays of the stated lengths; each descriptor is valid, or malformed in a
        // way the library must detect before it reads or writes through it.
        unsafe { (self.abi.run_into)(m, raw.as_ptr(), raw.len() as i64, outputs.as_ptr(), outputs.len() as i64) }
    }

    pub(super) fn run_into_checks(&self, tally: &mut Tally) -> Result<(), String> {
        let (a, b) = (self.abi.instance()?, self.abi.instance()?);
        let Some(shapes) = self.valid_output_shapes(tally, a) else {
            // SAFETY: created above, destroyed once.
            unsafe {
                (self.abi.destroy)(a);
                (self.abi.destroy)(b)
            };
            return Ok(());
        };
        // Same history on both instances: the outputs must be the same bytes.
        for round in 0..2 {
            let want: Vec<Owned> =
                self.run_valid(tally, a, &format!("run, round {round}")).iter().map(copy_output).collect();
            let mut got = self.output_tensors(&shapes);
            let raw: Vec<AotcTensor> = got.iter_mut().map(Owned::raw).collect();
            tally.expect_ok(self.abi, &format!("run_into, round {round}"), self.run_into(b, &raw));
            if want.iter().zip(&got).any(|(w, g)| w.bytes() != g.bytes()) {
                tally.fail(format!("run_into round {round}: outputs differ from aotc_run's"));
            }
        }
        for (o, spec) in self.manifest.outputs.iter().enumerate() {
            for mut variant in variants(&shapes[o], spec.dtype, Some(other_dtype(spec.dtype))) {
                let mut outs = self.output_tensors(&shapes);
                let mut raw: Vec<AotcTensor> = outs.iter_mut().map(Owned::raw).collect();
                raw[o] = variant.apply(raw[o]);
                tally.expect(
                    self.abi,
                    &format!("run_into output {o} ('{}'): {}", spec.name, variant.what),
                    variant.valid,
                    self.run_into(b, &raw),
                );
            }
        }
        let mut outs = self.output_tensors(&shapes);
        let mut raw: Vec<AotcTensor> = outs.iter_mut().map(Owned::raw).collect();
        let n = raw.len() as i64;
        let mut inputs = self.fresh_inputs();
        let ins: Vec<AotcTensor> = inputs.iter_mut().map(Owned::raw).collect();
        let mut dims = vec![0i64; shapes.iter().map(Vec::len).sum::<usize>() + 1];
        let n_dims = dims.len() as i64 - 1;
        let null = std::ptr::null_mut();
        // SAFETY (this block): each call passes null or bad arguments the library checks,
        // and otherwise valid arrays of the stated lengths.
        unsafe {
            tally.expect_refused(
                self.abi,
                "run_into: null model",
                (self.abi.run_into)(null, ins.as_ptr(), ins.len() as i64, raw.as_ptr(), n),
            );
            tally.expect_refused(
                self.abi,
                "run_into: -1 outputs",
                (self.abi.run_into)(b, ins.as_ptr(), ins.len() as i64, raw.as_ptr(), -1),
            );
            tally.expect_refused(
                self.abi,
                "run_into: one output too many",
                (self.abi.run_into)(
                    b,
                    ins.as_ptr(),
                    ins.len() as i64,
                    {
                        raw.push(raw.first().copied().unwrap_or_else(super::placeholder));
                        raw.as_ptr()
                    },
                    n + 1,
                ),
            );
            if n > 0 {
                tally.expect_refused(
                    self.abi,
                    "run_into: null outputs",
                    (self.abi.run_into)(b, ins.as_ptr(), ins.len() as i64, std::ptr::null(), n),
                );
                tally.expect_refused(
                    self.abi,
                    "run_into: one output too few",
                    (self.abi.run_into)(b, ins.as_ptr(), ins.len() as i64, raw.as_ptr(), n - 1),
                );
            }
            if !ins.is_empty() {
                tally.expect_refused(
                    self.abi,
                    "output_shapes: null inputs",
                    (self.abi.output_shapes)(b, std::ptr::null(), ins.len() as i64, dims.as_mut_ptr(), n_dims),
                );
            }
            tally.expect_refused(
                self.abi,
                "output_shapes: null model",
                (self.abi.output_shapes)(null, ins.as_ptr(), ins.len() as i64, dims.as_mut_ptr(), n_dims),
            );
            if n_dims > 0 {
                tally.expect_refused(
                    self.abi,
                    "output_shapes: null shapes",
                    (self.abi.output_shapes)(b, ins.as_ptr(), ins.len() as i64, std::ptr::null_mut(), n_dims),
                );
                tally.expect_refused(
                    self.abi,
                    "output_shapes: too small",
                    (self.abi.output_shapes)(b, ins.as_ptr(), ins.len() as i64, dims.as_mut_ptr(), n_dims - 1),
                );
            }
            tally.expect_ok(
                self.abi,
                "output_shapes: room to spare",
                (self.abi.output_shapes)(b, ins.as_ptr(), ins.len() as i64, dims.as_mut_ptr(), n_dims + 1),
            );
            (self.abi.destroy)(a);
            (self.abi.destroy)(b);
        }
        Ok(())
    }
}
