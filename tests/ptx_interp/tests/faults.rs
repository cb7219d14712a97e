//! Kernels that are wrong on purpose, and bad launches: each is reported with the
//! kernel, line, instruction and thread, never run to a silent result or a panic.

mod common;

use aotc_ptx_interp::{Arg, ErrorKind, ExecError, Launch, Memory, Module};
use common::{kernel_source, module};

fn launch(name: &str, block: u32, args: &[Arg], memory: &mut Memory) -> Result<(), ExecError> {
    let launch = Launch::new([1, 1, 1], [block, 1, 1]).with_race_check();
    module("faults").launch(memory, name, &launch, args).map(|_| ())
}

#[test]
fn bar_sync_in_a_divergent_branch() {
    let error = launch("divergent_barrier", 64, &[], &mut Memory::new()).unwrap_err();
    let ErrorKind::BarrierDivergence(why) = &error.kind else { panic!("{error}") };
    assert!(why.contains("thread [16, 0, 0] exited"), "{error}");
    let site = error.site.as_ref().unwrap();
    assert_eq!(site.instruction, "bar.sync 0;");
    assert_eq!(error.kernel, "divergent_barrier");
}

#[test]
fn shfl_sync_with_absent_lanes() {
    let mut memory = Memory::new();
    let out = memory.alloc(4 * 32, 4).unwrap();
    let error = launch("divergent_shuffle", 32, &[Arg::U64(out)], &mut memory).unwrap_err();
    let ErrorKind::ShuffleDivergence(why) = &error.kind else { panic!("{error}") };
    assert!(why.contains("lane 16"), "{error}");
    // A partial warp cannot satisfy a full membermask either.
    let error = launch("divergent_shuffle", 8, &[Arg::U64(out)], &mut memory).unwrap_err();
    assert!(matches!(error.kind, ErrorKind::ShuffleDivergence(_)), "{error}");
}

#[test]
fn out_of_bounds_store_names_address_and_thread() {
    let module = module("elementwise_f32");
    let mut memory = Memory::new();
    let x = memory.upload(&[1.0f32; 100]).unwrap();
    let out = memory.upload(&[0.0f32; 99]).unwrap(); // one element short
    let args = [Arg::U64(out), Arg::U64(x), Arg::S64(100), Arg::F32(1.0), Arg::F32(0.0)];
    let error = module.launch(&mut memory, "scale_relu", &Launch::new([2, 1, 1], [64, 1, 1]), &args).unwrap_err();
    assert_eq!(error.kind, ErrorKind::OutOfBounds { address: out + 4 * 99, bytes: 4 });
    let site = error.site.as_ref().unwrap();
    assert_eq!((site.cta, site.thread), ([1, 0, 0], [35, 0, 0]));
    assert_eq!(site.instruction, "st.global.f32 [%rd9], %f5;");
    let line = kernel_source("elementwise_f32").lines().position(|l| l.contains("st.global.f32")).unwrap() + 1;
    assert_eq!(site.line, line as u32);
    let shown = error.to_string();
    assert!(
        shown.contains("scale_relu") && shown.contains(&format!("line {line}")) && shown.contains("[35, 0, 0]"),
        "{shown}"
    );
}

#[test]
fn misaligned_and_shared_overflow() {
    let mut memory = Memory::new();
    let out = memory.alloc(64, 4).unwrap();
    let error = launch("misaligned", 1, &[Arg::U64(out)], &mut memory).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Misaligned { address: out + 2, bytes: 4 });
    let error = launch("shared_overflow", 32, &[], &mut memory).unwrap_err();
    assert_eq!(error.kind, ErrorKind::SharedOutOfBounds { address: 64, bytes: 4, shared_bytes: 64 });
    assert_eq!(error.site.unwrap().thread, [16, 0, 0]);
}

#[test]
fn uninitialised_register() {
    let mut memory = Memory::new();
    let out = memory.alloc(64, 4).unwrap();
    let error = launch("uninitialised", 1, &[Arg::U64(out)], &mut memory).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Uninitialised { register: "%r2".into() });
}

#[test]
fn division_by_zero_and_step_limit() {
    let mut memory = Memory::new();
    let out = memory.alloc(4, 4).unwrap();
    launch("divide", 1, &[Arg::U64(out), Arg::U32(7)], &mut memory).unwrap();
    assert_eq!(memory.download::<u32>(out, 1).unwrap(), [14]);
    let error = launch("divide", 1, &[Arg::U64(out), Arg::U32(0)], &mut memory).unwrap_err();
    assert_eq!(error.kind, ErrorKind::DivisionByZero);
    let mut spin = Launch::new([1, 1, 1], [2, 1, 1]);
    spin.step_limit = 10_000;
    let error = module("faults").launch(&mut memory, "spin", &spin, &[]).unwrap_err();
    assert_eq!(error.kind, ErrorKind::StepLimit { limit: 10_000 });
}

#[test]
fn global_write_write_race_between_threads() {
    let mut memory = Memory::new();
    let out = memory.alloc(4, 4).unwrap();
    let error = launch("same_address", 2, &[Arg::U64(out)], &mut memory).unwrap_err();
    let ErrorKind::GlobalRace { address, other_thread, other_wrote, .. } = error.kind else { panic!("{error}") };
    assert_eq!((address, other_thread, other_wrote), (out, [0, 0, 0], true));
    assert_eq!(error.site.unwrap().thread, [1, 0, 0]);
    // One thread alone does not race with itself.
    launch("same_address", 1, &[Arg::U64(out)], &mut memory).unwrap();
}

#[test]
fn arguments_are_checked_against_the_params() {
    let module = module("elementwise_f32");
    let mut memory = Memory::new();
    let launch = Launch::new([1, 1, 1], [32, 1, 1]);
    let run =
        |memory: &mut Memory, args: &[Arg]| module.launch(memory, "scale_relu", &launch, args).unwrap_err().to_string();
    assert!(run(&mut memory, &[Arg::U64(0)]).contains("1 arguments for 5 parameters"));
    let wrong_type = [Arg::U64(0), Arg::U64(0), Arg::S64(1), Arg::F64(1.0), Arg::F32(0.0)];
    assert!(run(&mut memory, &wrong_type).contains("parameter `a` is .f32"));
    let wrong_kind = [Arg::U64(0), Arg::U64(0), Arg::S64(1), Arg::U32(1), Arg::F32(0.0)];
    assert!(run(&mut memory, &wrong_kind).contains("parameter `a`"));
    let error = module.launch(&mut memory, "nope", &launch, &[]).unwrap_err();
    assert!(error.to_string().contains("no entry named `nope`"));
    let too_big = Launch::new([1, 1, 1], [2048, 1, 1]);
    assert!(module.launch(&mut memory, "scale_relu", &too_big, &[]).is_err());
    let gemm = common::module("sgemm_tiled");
    let error = gemm.launch(&mut memory, "sgemm_tiled", &Launch::new([1, 1, 1], [32, 16, 1]), &[]).unwrap_err();
    assert!(error.to_string().contains(".maxntid"), "{error}");
}

#[test]
fn unsupported_instructions_are_parse_errors_naming_the_line() {
    let source = kernel_source("elementwise_f32");
    let with_vote = source.replacen(
        "    setp.ge.s64 %p1, %rd4, %rd3;\n",
        "    setp.ge.s64 %p1, %rd4, %rd3;\n    vote.sync.any.pred %p1, %p1, -1;\n",
        1,
    );
    let line = with_vote.lines().position(|l| l.contains("vote.sync")).unwrap() as u32 + 1;
    let error = Module::parse(&with_vote).unwrap_err();
    assert_eq!(error.line, line);
    assert!(error.message.contains("vote.sync.any.pred"), "{error}");
    for (bad, why) in [
        ("add.sat.s32 %r1, %r1, %r1;", ".sat"),
        ("fma.rz.f32 %f1, %f1, %f1, %f1;", "needs .rn"),
        ("cvt.s32.f32 %r1, %f1;", "integral rounding"),
        ("ld.local.u32 %r1, [%rd1];", "state space"),
        ("mov.u32 %r1, %nope;", "not a declared register"),
        ("bra NOWHERE;", "no label"),
        ("mov.f32 %f1, 1.5;", "bad immediate"),
    ] {
        let text = source.replacen("    ret;\n", &format!("    {bad}\n    ret;\n"), 1);
        let error = Module::parse(&text).unwrap_err();
        assert!(error.message.contains(why), "{bad}: {error}");
    }
}

#[test]
fn malformed_ptx_is_an_error_not_a_panic() {
    let source = kernel_source("row_sum");
    // Every prefix of a real kernel must parse or fail cleanly.
    for end in (0..source.len()).step_by(7) {
        let _ = Module::parse(&source[..end]);
    }
    for junk in [
        "",
        "}",
        ".entry",
        ".entry k(",
        ".entry k() { @ }",
        ".entry k() { mov.u32 }",
        ".entry k() { ld.param.u32 %r1, [x+]; }",
        "\u{e9}",
    ] {
        let _ = Module::parse(junk);
    }
}
