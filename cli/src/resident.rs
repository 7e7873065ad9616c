//! Keeps the code of the long-running readers (the mount, serve) in memory. After the
//! kernel drops the page cache (memory pressure on a busy node, or `drop_caches`), the first
//! read through the mount faulted the read path's code back in from the binary, a few major
//! page faults of a millisecond or more each, before any byte of the model was read. So
//! they lock the read-only mappings of their executable (code and constants, about 30 MB)
//! with `mlock`. Without the privilege (`CAP_IPC_LOCK`, or an `RLIMIT_MEMLOCK` that large)
//! they say so once and run as before.

use std::fs;

/// [`lock_code`], logged: a debug line when it worked, one info line saying what is lost
/// when it did not.
pub fn keep_code_resident() {
    match lock_code() {
        Ok(bytes) => tracing::debug!("locked {} MiB of code in memory", bytes >> 20),
        Err(e) => tracing::info!(
            "cannot lock this process's code in memory ({e}): after the page cache is \
             dropped, the first reads fault it back in"
        ),
    }
}

/// Locks the read-only mappings of this executable into memory; returns the bytes locked,
/// or why not.
pub fn lock_code() -> Result<u64, String> {
    let exe = fs::read_link("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let maps =
        fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
    let mut locked = 0u64;
    for (start, end) in code_ranges(&maps, &exe) {
        let len = (end - start) as usize;
        // SAFETY: mlock only pins pages of a range this process has mapped; it changes no
        // memory.
        let r = unsafe { libc::mlock(start as *const libc::c_void, len) };
        if r != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        locked += len as u64;
    }
    Ok(locked)
}

/// The address ranges of `exe`'s mappings that are readable and not writable, from the
/// text of `/proc/self/maps`.
fn code_ranges(maps: &str, exe: &str) -> Vec<(u64, u64)> {
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let path = f.nth(3)?;
            if path != exe || !perms.starts_with('r') || perms.as_bytes().get(1) == Some(&b'w') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_read_only_mappings_of_the_executable() {
        let maps = "\
5600-5700 r--p 00000000 08:01 12 /usr/bin/modelcas
5700-5900 r-xp 00100000 08:01 12 /usr/bin/modelcas
5900-5a00 rw-p 00300000 08:01 12 /usr/bin/modelcas
7000-7100 r-xp 00000000 08:01 99 /usr/lib/libc.so.6
7200-7300 rw-p 00000000 00:00 0
";
        assert_eq!(
            code_ranges(maps, "/usr/bin/modelcas"),
            vec![(0x5600, 0x5700), (0x5700, 0x5900)]
        );
    }
}
