//! Kernels launched through the C API: results, argument widths, execution errors
//! reported by the launch and the next synchronisation, refused configurations.

mod common;

use common::{arg, rerun_with, session, HEADER};

/// out[i] = alpha * x[i] + y[i] for i < n: 8-, 4-byte integer and float parameters.
const AXPY: &str = r#"
.visible .entry axpy(.param .u64 out, .param .u64 x, .param .u64 y, .param .f32 alpha, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [x];
    ld.param.u64 %rd3, [y];
    ld.param.f32 %f1, [alpha];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.f32 %f2, [%rd5];
    add.s64 %rd6, %rd3, %rd4;
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    add.s64 %rd7, %rd1, %rd4;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}

// Every thread writes its index to out[0]: a race.
.visible .entry same_slot(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    st.global.u32 [%rd1], %r1;
    ret;
}
"#;

#[test]
fn vector_add_runs_on_the_interpreter() {
    let s = session();
    let module = s.load(&format!("{HEADER}{AXPY}"), 1024).unwrap();
    let axpy = s.function(module, "axpy").unwrap();
    let n = 1000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let (mut x, mut y) = (s.device.upload(&xs).unwrap(), s.device.upload(&ys).unwrap());
    let mut out = s.device.alloc(4 * n).unwrap();
    let (mut alpha, mut count) = (3.0f32, n as u32);
    let before = s.device.stats();
    let code = s.launch(axpy, 4, 256, &mut [arg(&mut out), arg(&mut x), arg(&mut y), arg(&mut alpha), arg(&mut count)]);
    assert_eq!(code, 0, "{:?}", s.device.last_error());
    assert_eq!(s.sync(), 0);
    let expected: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| 3.0f32.mul_add(*x, *y)).collect();
    assert_eq!(s.device.download::<f32>(out, n).unwrap(), expected);
    let after = s.device.stats();
    assert_eq!(after.launches, before.launches + 1);
    // 1000 threads run 20 instructions; the 24 past the end leave after 12.
    assert_eq!(after.instructions - before.instructions, 1000 * 20 + 24 * 12);
    for address in [out, x, y] {
        s.device.free(address).unwrap();
    }
}

#[test]
fn out_of_bounds_store_fails_the_launch_and_the_next_sync() {
    let s = session();
    let module = s.load(&format!("{HEADER}{AXPY}"), 1024).unwrap();
    let axpy = s.function(module, "axpy").unwrap();
    let (mut x, mut y) = (s.device.upload(&[1.0f32; 100]).unwrap(), s.device.upload(&[2.0f32; 100]).unwrap());
    let mut out = s.device.upload(&[0.0f32; 99]).unwrap(); // one element short
    let (mut alpha, mut count) = (1.0f32, 100u32);
    let code = s.launch(axpy, 1, 128, &mut [arg(&mut out), arg(&mut x), arg(&mut y), arg(&mut alpha), arg(&mut count)]);
    assert_eq!(code, 719);
    let message = s.device.last_error().unwrap();
    let address = format!("{:#x}", out + 4 * 99);
    assert!(message.starts_with("cuLaunchKernel: kernel axpy: "), "{message}");
    assert!(message.contains(&address) && message.contains("thread [99, 0, 0]"), "{message}");
    // Reported once more, as an asynchronous failure would be, then cleared.
    assert_eq!(s.sync(), 719);
    assert!(s.device.last_error().unwrap().contains(&address));
    assert_eq!(s.sync(), 0);
    // The threads before the faulting one stored their results.
    assert_eq!(s.device.download::<f32>(out, 99).unwrap(), vec![3.0; 99]);
}

#[test]
fn races_fail_unless_the_race_check_is_off() {
    let race_check_off = std::env::var("AOTC_FAKE_CUDA_RACECHECK").is_ok_and(|v| v == "0");
    let s = session();
    let module = s.load(&format!("{HEADER}{AXPY}"), 1024).unwrap();
    let same_slot = s.function(module, "same_slot").unwrap();
    let mut out = s.device.alloc(4).unwrap();
    let code = s.launch(same_slot, 1, 64, &mut [arg(&mut out)]);
    if race_check_off {
        assert_eq!((code, s.sync()), (0, 0));
        return;
    }
    assert_eq!(code, 719);
    assert!(s.device.last_error().unwrap().contains("global-memory race"));
    assert_eq!(s.sync(), 719);
    rerun_with("races_fail_unless_the_race_check_is_off", &[("AOTC_FAKE_CUDA_RACECHECK", "0")]);
}

#[test]
fn bad_configurations_are_refused_and_not_pending() {
    let s = session();
    let api = s.api();
    let module = s.load(&format!("{HEADER}{AXPY}"), 1024).unwrap();
    let same_slot = s.function(module, "same_slot").unwrap();
    let mut out = s.device.alloc(4).unwrap();
    let mut args = [arg(&mut out)];
    assert_eq!(s.launch(same_slot, 1, 2048, &mut args), 1);
    assert!(s.device.last_error().unwrap().contains("exceeds the CUDA limits"));
    assert_eq!(s.launch(same_slot, 0, 1, &mut args), 1);
    let (null, no_args) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the arguments are live; the driver refuses dynamic shared memory, a null
    // kernelParams and `extra` before reading them.
    unsafe {
        assert_eq!((api.launch_kernel)(same_slot, 1, 1, 1, 1, 1, 1, 16, null, args.as_mut_ptr(), no_args), 1);
        assert_eq!((api.launch_kernel)(same_slot, 1, 1, 1, 1, 1, 1, 0, null, no_args, no_args), 1);
        assert_eq!((api.launch_kernel)(same_slot, 1, 1, 1, 1, 1, 1, 0, null, no_args, args.as_mut_ptr()), 1);
        assert_eq!((api.launch_kernel)(null, 1, 1, 1, 1, 1, 1, 0, null, args.as_mut_ptr(), no_args), 400);
    }
    assert_eq!(s.sync(), 0, "a refused launch leaves nothing pending");
    assert_eq!(s.launch(same_slot, 1, 1, &mut args), 0);
    assert_eq!(s.device.download::<u32>(out, 1).unwrap(), vec![0]);
    // SAFETY: a loaded module, unloaded once.
    assert_eq!(unsafe { (api.module_unload)(module) }, 0);
    assert_eq!(s.launch(same_slot, 1, 1, &mut args), 400, "a function of an unloaded module");
    // SAFETY: as above, now unknown.
    assert_eq!(unsafe { (api.module_unload)(module) }, 400);
}
