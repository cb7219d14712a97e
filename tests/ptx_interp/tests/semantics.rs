//! Small inline kernels for the rules that are easy to get wrong: shuffle modes with
//! clamps and segments, 3-D indices and lanes, vector and packed moves, setp/selp,
//! directed rounding, NaN rules, atomics.

mod common;

use aotc_ptx_interp::{Arg, Launch, Memory};
use common::module_from;

/// An entry `k(.param .u64 out, .param .u64 in)` with `body` after the usual registers.
fn kernel(body: &str) -> String {
    format!(
        ".version 7.8\n.target sm_80\n.address_size 64\n\
         .visible .entry k(.param .u64 out, .param .u64 in)\n{{\n\
         .reg .pred %p<8>;\n.reg .b32 %r<32>;\n.reg .f32 %f<16>;\n.reg .b64 %rd<16>;\n\
         ld.param.u64 %rd1, [out];\nld.param.u64 %rd2, [in];\n{body}\nret;\n}}\n"
    )
}

/// Runs `k` and returns `out` (`words` u32 per thread) as u32s.
fn run(body: &str, grid: [u32; 3], block: [u32; 3], input: &[u32], words: usize) -> Vec<u32> {
    let module = module_from("inline kernel", &kernel(body));
    let threads = (grid.iter().product::<u32>() * block.iter().product::<u32>()) as usize;
    let mut memory = Memory::new();
    let out = memory.upload(&vec![u32::MAX; threads * words]).unwrap();
    let input = memory.upload(input).unwrap();
    let launch = Launch::new(grid, block).with_race_check();
    module.launch(&mut memory, "k", &launch, &[Arg::U64(out), Arg::U64(input)]).unwrap();
    memory.download::<u32>(out, threads * words).unwrap()
}

#[test]
fn shuffle_modes_clamps_and_segments() {
    // Lane l holds 10 l + 1; each shuffle stores its value and predicate.
    let shuffles = [
        "shfl.sync.down.b32 %r3|%p1, %r2, 1, 0x1f, -1;",
        "shfl.sync.up.b32 %r3|%p1, %r2, 2, 0, -1;",
        "shfl.sync.idx.b32 %r3|%p1, %r2, 5, 0x1f, -1;",
        "shfl.sync.idx.b32 %r3|%p1, %r2, 3, 0x181f, -1;",
        "shfl.sync.bfly.b32 %r3|%p1, %r2, 1, 0x181f, -1;",
        "shfl.sync.down.b32 %r3|%p1, %r2, 4, 0x181f, -1;",
        "shfl.sync.up.b32 %r3|%p1, %r2, 1, 0x1800, -1;",
    ];
    let mut body = String::from(
        "mov.u32 %r1, %laneid;\nmad.lo.s32 %r2, %r1, 10, 1;\nmul.wide.u32 %rd3, %r1, 56;\nadd.s64 %rd3, %rd1, %rd3;\n",
    );
    for (i, shuffle) in shuffles.iter().enumerate() {
        body += &format!(
            "{shuffle}\nselp.u32 %r4, 1, 0, %p1;\nst.global.u32 [%rd3+{}], %r3;\nst.global.u32 [%rd3+{}], %r4;\n",
            8 * i,
            8 * i + 4
        );
    }
    let out = run(&body, [1, 1, 1], [32, 1, 1], &[0], 14);
    let value = |lane: usize| 10 * lane as u32 + 1;
    for lane in 0..32 {
        let within = lane & 7;
        let expected: [(u32, bool); 7] = [
            if lane < 31 { (value(lane + 1), true) } else { (value(lane), false) },
            if lane >= 2 { (value(lane - 2), true) } else { (value(lane), false) },
            (value(5), true),
            (value((lane & 24) | 3), true),
            (value(lane ^ 1), true),
            if within < 4 { (value(lane + 4), true) } else { (value(lane), false) },
            if within >= 1 { (value(lane - 1), true) } else { (value(lane), false) },
        ];
        for (i, (v, p)) in expected.iter().enumerate() {
            assert_eq!(
                (out[lane * 14 + 2 * i], out[lane * 14 + 2 * i + 1]),
                (*v, *p as u32),
                "lane {lane}: {}",
                shuffles[i]
            );
        }
    }
}

#[test]
fn three_dimensional_indices_lanes_and_warps() {
    let body = "\
        mov.u32 %r1, %tid.x;\nmov.u32 %r2, %tid.y;\nmov.u32 %r3, %tid.z;\n\
        mov.u32 %r4, %ntid.x;\nmov.u32 %r5, %ntid.y;\nmov.u32 %r6, %ntid.z;\n\
        mov.u32 %r7, %ctaid.x;\nmov.u32 %r8, %ctaid.y;\nmov.u32 %r9, %ctaid.z;\n\
        mov.u32 %r10, %nctaid.x;\nmov.u32 %r11, %nctaid.y;\n\
        mad.lo.s32 %r12, %r11, %r9, %r8;\nmad.lo.s32 %r12, %r12, %r10, %r7;\n\
        mad.lo.s32 %r13, %r5, %r3, %r2;\nmad.lo.s32 %r13, %r13, %r4, %r1;\n\
        mul.lo.s32 %r14, %r4, %r5;\nmul.lo.s32 %r14, %r14, %r6;\n\
        mad.lo.s32 %r15, %r12, %r14, %r13;\n\
        mov.u32 %r16, %laneid;\nmov.u32 %r17, %warpid;\nmad.lo.s32 %r16, %r17, 32, %r16;\n\
        mad.lo.s32 %r18, %r3, 100, %r2;\nmad.lo.s32 %r18, %r18, 100, %r1;\n\
        mad.lo.s32 %r19, %r9, 100, %r8;\nmad.lo.s32 %r19, %r19, 100, %r7;\n\
        mul.wide.u32 %rd3, %r15, 16;\nadd.s64 %rd3, %rd1, %rd3;\n\
        st.global.v2.u32 [%rd3], {%r16, %r18};\nst.global.u32 [%rd3+8], %r19;";
    let (grid, block) = ([3, 2, 2], [5, 4, 3]);
    let out = run(body, grid, block, &[0], 4);
    let mut seen = 0;
    for (cz, cy, cx) in (0..2).flat_map(|z| (0..2).flat_map(move |y| (0..3).map(move |x| (z, y, x)))) {
        for (tz, ty, tx) in (0..3).flat_map(|z| (0..4).flat_map(move |y| (0..5).map(move |x| (z, y, x)))) {
            let linear_thread = tx + 5 * (ty + 4 * tz);
            let g = (cx + 3 * (cy + 2 * cz)) * 60 + linear_thread;
            assert_eq!(
                out[4 * g..4 * g + 3],
                [linear_thread as u32, (tx + 100 * ty + 10000 * tz) as u32, (cx + 100 * cy + 10000 * cz) as u32]
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 720);
}

#[test]
fn moves_predicates_rounding_and_nan_rules() {
    let body = "\
        ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd2];\n\
        mov.b64 %rd3, {%r1, %r2};\nmov.b64 {%r5, %r6}, %rd3;\n\
        st.global.v2.u32 [%rd1], {%r6, %r5};\n\
        setp.lt.u32 %p1, %r1, %r2;\nsetp.gt.and.u32 %p2, %r3, %r4, !%p1;\nsetp.lt.or.u32 %p3, %r3, %r1, %p1;\n\
        selp.u32 %r7, 7, 8, %p2;\nselp.u32 %r8, 7, 8, %p3;\nst.global.v2.u32 [%rd1+8], {%r7, %r8};\n\
        add.rz.f32 %f1, 0f3F800000, 0f33800000;\nadd.rp.f32 %f2, 0f3F800000, 0f33800000;\n\
        max.NaN.f32 %f3, 0f7FC00000, 0f3F800000;\nmin.f32 %f4, 0f7FC00000, 0f3F800000;\n\
        cvt.rmi.f32.f32 %f5, 0fBFC00000;\ncopysign.f32 %f6, 0fBF800000, 0f40000000;\n\
        testp.subnormal.f32 %p4, 0f00000001;\nselp.u32 %r9, 1, 0, %p4;\n\
        setp.nan.f32 %p5, %f3, %f3;\nselp.u32 %r10, 1, 0, %p5;\n\
        mul.rn.f32 %f7, %f6, 0f00000000;\nsetp.equ.f32 %p6, %f3, 0f3F800000;\nselp.u32 %r11, 1, 0, %p6;\n\
        mov.b64 %rd4, 0d3FF0000000000000;\nmov.b64 %rd5, 0d3C90000000000000;\n\
        mov.b64 {%r12, %r13}, %rd4;\n\
        st.global.v4.f32 [%rd1+16], {%f1, %f2, %f3, %f4};\nst.global.v4.f32 [%rd1+32], {%f5, %f6, %f7, %f5};\n\
        st.global.v4.u32 [%rd1+48], {%r9, %r10, %r11, %r13};";
    let out = run(body, [1, 1, 1], [1, 1, 1], &[1, 2, 3, 4], 16);
    assert_eq!(out[..4], [2, 1, 8, 7]);
    assert_eq!(out[4..8], [0x3f80_0000, 0x3f80_0001, 0x7fff_ffff, 0x3f80_0000]);
    assert_eq!(out[8..11], [(-2.0f32).to_bits(), (-2.0f32).to_bits(), 0x8000_0000]);
    assert_eq!(out[12..16], [1, 1, 1, 0x3ff0_0000]);
}

#[test]
fn atomics_are_exempt_from_race_checks() {
    let body = "\
        mov.u32 %r1, %tid.x;\nmov.u32 %r2, %ctaid.x;\nmad.lo.s32 %r3, %r2, 64, %r1;\n\
        atom.global.add.u32 %r4, [%rd2], 1;\natom.global.max.s32 %r5, [%rd2+4], %r3;\n\
        atom.global.add.f32 %f1, [%rd2+8], 0f3F000000;\n\
        add.s32 %r7, %r3, 1;\natom.global.cas.b32 %r6, [%rd2+12], 0, %r7;\n\
        setp.eq.u32 %p1, %r3, 0;\n@%p1 st.global.u32 [%rd1], %r4;";
    let module = module_from("atomics", &kernel(body));
    let mut memory = Memory::new();
    let out = memory.upload(&vec![0u32; 256]).unwrap();
    let counters = memory.upload(&[0u32, 0, 0, 0]).unwrap();
    let launch = Launch::new([4, 1, 1], [64, 1, 1]).with_race_check();
    module.launch(&mut memory, "k", &launch, &[Arg::U64(out), Arg::U64(counters)]).unwrap();
    let result = memory.download::<u32>(counters, 4).unwrap();
    assert_eq!(result[..3], [256, 255, 128.0f32.to_bits()]);
    assert_eq!(result[3], 1, "the first compare-and-swap stores 1, every later one fails");
}
