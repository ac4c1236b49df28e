//! Uprobes and kprobes on the real kernel: probes resolved from config text
//! are opened through the `uprobe` PMU in cgroup mode, and a child that makes
//! a known number of calls in a fresh cgroup is counted exactly.

mod common;

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use cgperf::events::{EventAttr, PMU_ROOT, ProbeError, ProbeSpec, ResolvedProbe};
use cgperf::perf::{CounterGroup, Target};
use common::*;

/// Calls of the test binary's own function.
const K: u64 = 1234;
/// Calls of libc's `getppid`.
const K2: u64 = 321;

/// The function the uprobe tests probe in this very binary. `no_mangle` keeps
/// its symbol name predictable; `inline(never)` and `black_box` keep every
/// call a real call.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn cgperf_probe_target(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(3).wrapping_add(1)
}

/// This test binary's canonical path: what the uprobe PMU is given.
fn test_binary() -> PathBuf {
    std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .expect("the test binary's path")
}

fn uprobe(text: &str) -> ProbeSpec {
    ProbeSpec::parse_uprobe(text).unwrap_or_else(|e| panic!("{e}"))
}

/// The probe resolved; its attr names the binary while it lives.
fn resolve(text: &str) -> ResolvedProbe {
    uprobe(text)
        .resolve(Path::new(PMU_ROOT))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn resolve_error(text: &str) -> ProbeError {
    match uprobe(text).resolve(Path::new(PMU_ROOT)) {
        Ok(probe) => panic!("`{text}` should not resolve: {probe:?}"),
        Err(e) => e,
    }
}

/// The uprobe PMU's type number on this machine.
fn uprobe_type() -> u32 {
    let path = Path::new(PMU_ROOT).join("uprobe/type");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; these tests need the uprobe PMU", path.display()))
        .trim()
        .parse()
        .expect("a PMU type number")
}

/// Opens `attrs` as one group for `cgroup` on every online CPU, runs `work`
/// in a child inside the cgroup, and returns each member's total over all CPUs.
fn count_in_child(attrs: &[EventAttr], cgroup: &TestCgroup, work: impl FnOnce()) -> Vec<u64> {
    count_around(attrs, cgroup, || in_child(Some(&cgroup.dir), work))
}

/// Opens `attrs` as one group for `cgroup` on every online CPU, calls
/// `run`, and returns each member's total over all CPUs.
fn count_around(attrs: &[EventAttr], cgroup: &TestCgroup, run: impl FnOnce()) -> Vec<u64> {
    let dir = File::open(&cgroup.dir).expect("open the cgroup directory");
    let cpus = cgperf::cpus::online().expect("online CPUs");
    let mut groups: Vec<CounterGroup> = cpus
        .iter()
        .map(|&cpu| {
            CounterGroup::open(attrs, Target::Cgroup(dir.as_fd()), cpu)
                .unwrap_or_else(|e| panic!("opening {attrs:?} on CPU {cpu}: {e}"))
        })
        .collect();
    run();
    let mut totals = vec![0; attrs.len()];
    for group in &mut groups {
        let (read, ids) = group.read().expect("group read");
        for (member, id) in ids.iter().enumerate() {
            totals[member] += read.value_of(*id, member).expect("every member is read");
        }
    }
    totals
}

/// The function's symbol, its file offset given as `0xOFFSET` and its
/// `%return` each count every call, in one group.
#[test]
fn uprobes_on_this_binary_count_every_call() {
    require_root("open uprobes in cgroup mode");
    let exe = test_binary();
    let exe = exe.display();
    let entry = resolve(&format!("{exe}:cgperf_probe_target"));
    let attr = entry.attr;
    assert_eq!((attr.type_, attr.config), (uprobe_type(), 0));
    let by_offset = resolve(&format!("{exe}:{:#x}", attr.config2));
    assert_eq!(by_offset, entry, "same file (held once) and same offset");
    let ret = resolve(&format!("{exe}:cgperf_probe_target%return")).attr;
    assert_eq!(
        (ret.config, ret.config1, ret.config2),
        (1, attr.config1, attr.config2),
        "format/retprobe is config:0"
    );
    let inside = resolve(&format!("{exe}:cgperf_probe_target+1")).attr;
    assert_eq!(inside.config2, attr.config2 + 1);

    let cgroup = TestCgroup::create("cgperf-uprobe-self");
    let totals = count_in_child(&[attr, by_offset.attr, ret], &cgroup, || {
        for i in 0..K {
            std::hint::black_box(cgperf_probe_target(std::hint::black_box(i)));
        }
    });
    assert_eq!(totals, [K, K, K]);
}

/// Runs `binary K` in `cgroup` and waits for it to exit 0.
fn run_program(binary: &Path, cgroup: &TestCgroup) {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(binary.as_os_str().as_bytes()).expect("no NUL");
    let count = std::ffi::CString::new(K.to_string()).expect("no NUL");
    let argv = [path.as_ptr(), count.as_ptr(), std::ptr::null()];
    in_child(Some(&cgroup.dir), || {
        // SAFETY: NUL-terminated strings and a null-terminated argv, built
        // before the fork; execv and _exit are async-signal-safe.
        unsafe {
            libc::execv(path.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
    });
}

/// A binary upgraded by rename after its probe was resolved: events opened
/// later (a new cgroup) still probe the file whose symbols were resolved,
/// never the new file at the old offset, where another function now is.
#[test]
fn a_probe_stays_on_the_file_it_was_resolved_in_after_a_rename() {
    require_root("open uprobes in cgroup mode");
    let dir = tempfile::tempdir().unwrap();
    let app = probe_program(dir.path(), "app", false);
    // The original file, still reachable after the rename.
    let original = dir.path().join("original");
    std::fs::hard_link(&app, &original).unwrap();
    let probe = resolve(&format!("{}:cgperf_work", app.display()));

    let upgrade = probe_program(dir.path(), "app.new", true);
    std::fs::rename(&upgrade, &app).unwrap();
    let cgroup = TestCgroup::create("cgperf-uprobe-renamed");
    let totals = count_around(&[probe.attr], &cgroup, || {
        // The upgrade calls cgperf_decoy, at the old offset, 2K times: not
        // counted. The original file's K calls are.
        run_program(&app, &cgroup);
        run_program(&original, &cgroup);
    });
    assert_eq!(totals, [K]);

    // Resolved again, the probe is on the upgrade, at its new offset.
    let again = resolve(&format!("{}:cgperf_work", app.display()));
    assert_ne!(again.attr.config2, probe.attr.config2);
    let cgroup = TestCgroup::create("cgperf-uprobe-upgraded");
    let totals = count_around(&[again.attr], &cgroup, || {
        run_program(&original, &cgroup);
        run_program(&app, &cgroup);
    });
    assert_eq!(totals, [K]);
}

/// libc's `getppid` wrapper, which `libc::getppid` calls: a probe in a
/// shared library counts the calls of the child in the cgroup only.
#[test]
fn uprobe_on_libc_counts_every_call() {
    require_root("open uprobes in cgroup mode");
    let libc = shared_object_of(libc::getppid as *const ());
    assert!(
        libc.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libc.so")),
        "libc::getppid should be glibc's wrapper, found in {}",
        libc.display()
    );
    let probe = resolve(&format!("{}:getppid", libc.display()));
    let cgroup = TestCgroup::create("cgperf-uprobe-libc");
    let totals = count_in_child(&[probe.attr], &cgroup, || {
        for _ in 0..K2 {
            // SAFETY: getppid has no preconditions and is async-signal-safe.
            std::hint::black_box(unsafe { libc::getppid() });
        }
    });
    assert_eq!(totals, [K2]);
}

/// The canonical path of the shared object holding `function`, asked of the
/// dynamic loader: this proves which library's code a call runs.
fn shared_object_of(function: *const ()) -> PathBuf {
    // SAFETY: Dl_info is plain pointers, for which all zeroes (null) is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(function.cast(), &mut info) };
    assert!(
        found != 0 && !info.dli_fname.is_null(),
        "dladdr found no shared object"
    );
    // SAFETY: dladdr set dli_fname to a NUL-terminated path owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Path::new(name.to_str().expect("UTF-8 path"))
        .canonicalize()
        .expect("the shared object exists")
}

/// On this machine, kprobes either resolve to the kprobe PMU or say exactly
/// why they cannot be counted.
#[test]
fn kprobe_on_this_kernel() {
    let root = Path::new(PMU_ROOT);
    let spec = ProbeSpec::parse_kprobe("do_sys_openat2").expect("valid kprobe");
    match std::fs::read_to_string(root.join("kprobe/type")) {
        Ok(type_) => {
            let attr = spec
                .resolve(root)
                .expect("do_sys_openat2 is a kernel function")
                .attr;
            assert_eq!(attr.type_.to_string(), type_.trim());
            assert_ne!(attr.config1, 0, "the function name is passed by pointer");
        }
        Err(_) => assert_eq!(
            spec.resolve(root).unwrap_err().to_string(),
            "this kernel has no kprobe PMU (built without CONFIG_KPROBE_EVENTS): kprobe `do_sys_openat2` cannot be counted; uprobes and tracepoints still work"
        ),
    }
}

#[test]
fn resolution_errors_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().display();

    let e = resolve_error(&format!("{dir_path}/missing:main"));
    assert!(matches!(e, ProbeError::Unreadable { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "uprobe `{dir_path}/missing:main`: cannot open {dir_path}/missing: No such file or directory"
        )),
        "{e}"
    );

    let text_file = dir.path().join("script.sh");
    std::fs::write(&text_file, "#!/bin/sh\necho hello\n").unwrap();
    let e = resolve_error(&format!("{}:main", text_file.display()));
    assert!(matches!(e, ProbeError::NotElf { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "uprobe `{0}:main`: {0} is not an ELF executable or shared library (",
            text_file.display()
        )),
        "{e}"
    );

    let exe = test_binary();
    let exe = exe.display();
    let e = resolve_error(&format!("{exe}:cgperf_probe_targt"));
    let ProbeError::NoSuchFunction { suggestions, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(
        suggestions.first().map(String::as_str),
        Some("cgperf_probe_target")
    );
    assert!(
        e.to_string().starts_with(&format!(
            "uprobe `{exe}:cgperf_probe_targt`: no function `cgperf_probe_targt` in {exe}; did you mean `cgperf_probe_target`"
        )),
        "{e}"
    );

    let e = resolve_error(&format!("{exe}:cgperf_probe_target+0x100000"));
    assert!(
        matches!(
            e,
            ProbeError::PastEnd {
                offset: 0x100000,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("+0x100000 is past the end of `cgperf_probe_target`"),
        "{e}"
    );
}

/// A stripped copy of this binary has no symbol to look up: the error says
/// to give a file offset, and that offset works.
#[test]
fn stripped_binaries_need_a_file_offset() {
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("stripped");
    let status = Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(test_binary())
        .status()
        .expect("strip (binutils, which links Rust binaries) is installed");
    assert!(status.success(), "strip failed");
    let stripped = stripped.display();
    let e = resolve_error(&format!("{stripped}:cgperf_probe_target"));
    assert!(matches!(e, ProbeError::NoSymbolTable { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "uprobe `{stripped}:cgperf_probe_target`: {stripped} has no symbol table; give a file offset instead: {stripped}:0xOFFSET"
        )
    );
    let probe = resolve(&format!("{stripped}:0x1000"));
    assert_eq!(probe.attr.config2, 0x1000);
}

/// glibc's `strlen` is an IFUNC: probing its symbol would probe the resolver.
#[test]
fn indirect_functions_are_refused() {
    let libc = shared_object_of(libc::getppid as *const ());
    let e = resolve_error(&format!("{}:strlen", libc.display()));
    assert!(matches!(e, ProbeError::IndirectFunction { .. }), "{e:?}");
    let expected = format!(
        "`strlen` in {} is an indirect function (IFUNC)",
        libc.display()
    );
    assert!(e.to_string().contains(&expected), "{e}");
}

#[test]
fn the_daemon_calls_a_probe_it_cannot_count_a_probe() {
    require_root("run the exporter with a uprobe");
    // With a group that counts: were nothing countable, the one error line
    // would stand for every refusal, and this one would be at debug level.
    let cfg = config_file(&format!(
        "groups:\n  sw: [task-clock]\n\
         probes: [{{uprobe: \"{}:cgperf_no_such_function\", as: missing_fn}}]\n",
        test_binary().display()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .arg(format!("--config.file={}", cfg.path().display()))
        .args(["--web.listen-address=127.0.0.1:0", "--log.level=info"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cgperf starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("[cgperf] {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut log = Vec::new();
    while !log.iter().any(|l: &String| l.contains("serving http://")) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => log.push(line),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let disabled: Vec<&String> = log.iter().filter(|l| l.contains("disabled:")).collect();
    assert!(
        disabled
            .iter()
            .any(|l| l.contains("probe `missing_fn` disabled:")),
        "{log:#?}"
    );
    assert!(
        !disabled.iter().any(|l| l.contains("tracepoint")),
        "a probe is no tracepoint: {disabled:#?}"
    );
}
