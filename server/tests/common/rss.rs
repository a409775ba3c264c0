//! Resident memory of a process, from Linux's `/proc/<pid>/statm`; shared
//! by the test binaries that measure it (each includes this file by path).

/// Resident bytes of the process whose `/proc` entry is `proc_entry`
/// (`"self"`, or a pid). statm counts pages; they are 4 KiB on the
/// machines this runs on (x86-64 Linux).
pub fn resident_bytes(proc_entry: &str) -> u64 {
    let path = format!("/proc/{proc_entry}/statm");
    let statm = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm's resident field");
    pages * 4096
}
