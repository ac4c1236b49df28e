//! The programs of `count.bpf.c`: where each is attached, and the flush
//! that cgperf test-runs on a CPU.

use super::sys::{failed, failed_errno};
use super::unavailable::Unavailable;
use crate::perf::Errno;
use aya::programs::{BtfTracePoint, ProgramError, RawTracePoint, RawTracePointRunOptions, TestRun};
use aya::{Btf, BtfError, Ebpf};

/// The program that charges at context switches, as named in
/// `count.bpf.c`.
const PROGRAM: &str = "charge";
/// Where it runs, with typed arguments: the task switched out is still
/// `current` there.
const TRACEPOINT: &str = "sched_switch";
/// The same charge with no task switched to, test-run to flush a CPU (a
/// typed program cannot be test-run on a CPU); never attached.
const FLUSH: &str = "flush";
/// The program that takes the reading at a move a task makes itself.
const MOVED: &str = "moved";
/// Where that one runs: after a move, in the mover's context.
const ATTACH: &str = "cgroup_attach_task";
/// The program that takes the reading at a move made from another CPU.
const MOVED_AWAY: &str = "moved_away";
/// Where that one runs: on the moved task's CPU, before each function
/// another CPU asks it to run.
const CALLED: &str = "csd_function_entry";
/// Every program, for their statistics.
pub(super) const NAMES: [&str; 4] = [PROGRAM, FLUSH, MOVED, MOVED_AWAY];

/// The program `name` of `ebpf`, of the type `P` it has in `count.bpf.c`.
fn program<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P, Unavailable>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| Unavailable::broken(&format!("the object lacks the program {name}")))?
        .try_into()
        .map_err(|e| Unavailable::from_kernel(failed("the BPF program", &e)))
}

/// Why a program could not be attached to `tracepoint`.
fn not_attached(tracepoint: &str, e: &ProgramError) -> Unavailable {
    Unavailable::from_kernel(failed(&format!("attaching to {tracepoint}"), e))
}

/// Why `moved_away` could not be loaded: first of all that the kernel
/// lacks its tracepoint.
fn not_loaded(e: &ProgramError) -> String {
    match e {
        ProgramError::Btf(BtfError::UnknownBtfTypeName { .. }) => {
            format!("this kernel has no tracepoint csd:{CALLED} (it came with Linux 6.3)")
        }
        e => failed(&format!("loading the program for {CALLED}"), e).0,
    }
}

/// Attaches `moved_away`, where the kernel has its tracepoint (Linux 6.3),
/// or says why not (then a task moved by another while it runs has what
/// its CPU counted since its last reading there charged to the cgroup it
/// enters).
pub(super) fn watch_moves_away(ebpf: &mut Ebpf, btf: &Btf) -> Result<(), String> {
    let moved_away: &mut BtfTracePoint = program(ebpf, MOVED_AWAY).map_err(|e| e.to_string())?;
    moved_away.load(CALLED, btf).map_err(|e| not_loaded(&e))?;
    if let Err(e) = moved_away.attach() {
        let _ = moved_away.unload();
        return Err(not_attached(CALLED, &e).to_string());
    }
    Ok(())
}

/// Times a flush that found a run in progress on its CPU is tried again.
/// The run it interrupted (a move's reading, in the mover's context) ends
/// within microseconds once the interrupt returns; a CPU still busy after
/// this many tries is reported as `EBUSY`, and its interval in progress is
/// charged at its next run instead.
const FLUSH_TRIES: u32 = 1000;

/// Runs `ebpf`'s flush on `cpu` ([`Kernel::flush_one`]), again while it
/// finds that it interrupted a run there (it then did nothing).
pub(super) fn flush_one(ebpf: &Ebpf, cpu: u32) -> Result<(), Errno> {
    let Some(program) = ebpf.program(FLUSH) else {
        return Err(Errno(libc::ENOENT));
    };
    let Ok(program) = <&RawTracePoint>::try_from(program) else {
        return Err(Errno(libc::EINVAL));
    };
    for _ in 0..FLUSH_TRIES {
        let opts = RawTracePointRunOptions {
            cpu: Some(cpu),
            ..RawTracePointRunOptions::new()
        };
        match program.test_run(opts) {
            Ok(run) if run.return_value == 0 => return Ok(()),
            Ok(_) => std::thread::yield_now(),
            Err(e) => {
                return match failed_errno(&e).1 {
                    Some(libc::ENXIO) => Ok(()),
                    errno => Err(Errno(errno.unwrap_or(libc::EIO))),
                };
            }
        }
    }
    Err(Errno(libc::EBUSY))
}

/// Runs `ebpf`'s counting program on each of the `cpus` possible CPUs:
/// no run that began before is still in progress then. Says whether every
/// CPU could be run on (or was offline).
pub(super) fn wait_all(ebpf: &Ebpf, cpus: u32) -> bool {
    (0..cpus).all(|cpu| flush_one(ebpf, cpu).is_ok())
}

/// Whether the running kernel is built with `PREEMPT_RT`, whose
/// tracepoints run BPF programs preemptible: a switch could then come in
/// the middle of `moved`'s reading.
pub(super) fn realtime() -> bool {
    std::fs::read_to_string("/sys/kernel/realtime").is_ok_and(|s| s.trim() == "1")
}

/// Loads the programs cgperf cannot count without and attaches those that
/// run at the kernel's tracepoints: the charge at each context switch and
/// the reading of a task that moves itself (`moves`: not on a `PREEMPT_RT`
/// kernel, [`realtime`]); the flush is only loaded.
pub(super) fn attach(ebpf: &mut Ebpf, btf: &Btf, moves: bool) -> Result<(), Unavailable> {
    let charge: &mut BtfTracePoint = program(ebpf, PROGRAM)?;
    charge
        .load(TRACEPOINT, btf)
        .map_err(|e| Unavailable::from_kernel(failed("loading the BPF program", &e)))?;
    charge.attach().map_err(|e| not_attached(TRACEPOINT, &e))?;
    let moved = if moves { Some(ATTACH) } else { None };
    for (name, tracepoint) in [(FLUSH, None), (MOVED, moved)] {
        let program: &mut RawTracePoint = program(ebpf, name)?;
        program
            .load()
            .map_err(|e| Unavailable::from_kernel(failed("loading the BPF program", &e)))?;
        if let Some(tracepoint) = tracepoint {
            program
                .attach(tracepoint)
                .map_err(|e| not_attached(tracepoint, &e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_the_tracepoint_is_told_apart_from_a_refused_program() {
        let missing = ProgramError::Btf(BtfError::UnknownBtfTypeName {
            type_name: format!("btf_trace_{CALLED}"),
        });
        assert_eq!(
            not_loaded(&missing),
            "this kernel has no tracepoint csd:csd_function_entry (it came with Linux 6.3)"
        );
        let refused = ProgramError::IOError(std::io::Error::from_raw_os_error(libc::EACCES));
        let said = not_loaded(&refused);
        assert!(
            said.starts_with("loading the program for csd_function_entry"),
            "{said}"
        );
    }
}
