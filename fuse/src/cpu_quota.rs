//! Whether this process runs under a CPU quota (a pod's CPU limit: cgroup v2 `cpu.max`, or
//! v1 `cpu.cfs_quota_us`, on its cgroup or any parent), which decides the default of
//! [`crate::MountOptions::spin_wait`]: a FUSE worker looking for the next request spends
//! the quota, and a throttled mount is slower than one that sleeps (the hostile review of
//! issue 40 measured a cold walk 30-50% slower under a 0.5-core quota).

use std::path::Path;

/// Whether this process's cgroup, or a parent of it, limits its CPU time. Unreadable
/// cgroup files count as no quota.
pub fn under_cpu_quota() -> bool {
    let Ok(cgroup) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    quota_in(&cgroup, Path::new("/sys/fs/cgroup"))
}

/// [`under_cpu_quota`] for the contents of `/proc/self/cgroup` and the cgroup file system
/// mounted at `root`.
pub fn quota_in(cgroup: &str, root: &Path) -> bool {
    cgroup.lines().any(|line| {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let rel = path.trim_start_matches('/');
        if Path::new(rel)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return false;
        }
        if controllers.is_empty() {
            // v2: the unified hierarchy.
            return limited(&root.join(rel), root, "cpu.max", |v| {
                v.split_whitespace()
                    .next()
                    .is_some_and(|q| q.parse::<u64>().is_ok())
            });
        }
        if !controllers.split(',').any(|c| c == "cpu") {
            return false;
        }
        // v1: the cpu controller's own mount, alone or shared with cpuacct.
        ["cpu", "cpu,cpuacct", "cpuacct,cpu"].iter().any(|m| {
            let base = root.join(m);
            limited(&base.join(rel), &base, "cpu.cfs_quota_us", |v| {
                v.trim().parse::<i64>().is_ok_and(|q| q > 0)
            })
        })
    })
}

/// Whether `file` in `dir` or in a parent of it up to `top` says a limit.
fn limited(dir: &Path, top: &Path, file: &str, says_limit: impl Fn(&str) -> bool) -> bool {
    let mut at = Some(dir);
    while let Some(d) = at {
        if !d.starts_with(top) {
            return false;
        }
        if std::fs::read_to_string(d.join(file)).is_ok_and(|v| says_limit(&v)) {
            return true;
        }
        at = d.parent();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn v2_limits_on_the_cgroup_or_a_parent_count() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        write(root, "cpu.max", "max 100000\n");
        write(root, "kubepods/pod1/c1/cpu.max", "max 100000\n");
        assert!(!quota_in("0::/kubepods/pod1/c1\n", root));
        write(root, "kubepods/pod1/cpu.max", "50000 100000\n");
        assert!(quota_in("0::/kubepods/pod1/c1\n", root));
        // Inside a cgroup namespace the container's own cgroup is the root.
        write(root, "cpu.max", "200000 100000\n");
        assert!(quota_in("0::/\n", root));
    }

    #[test]
    fn v1_quotas_count_and_minus_one_is_none() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let cgroup = "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n";
        write(root, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
        write(root, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
        assert!(!quota_in(cgroup, root));
        write(root, "cpu,cpuacct/docker/cpu.cfs_quota_us", "150000\n");
        assert!(quota_in(cgroup, root));
        // The cpu controller mounted alone.
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "cpu/job/cpu.cfs_quota_us", "50000\n");
        assert!(quota_in("1:cpu:/job\n", d.path()));
        assert!(!quota_in("1:cpuacct:/job\n", d.path()));
    }

    #[test]
    fn unreadable_or_strange_files_are_no_quota() {
        let d = tempfile::tempdir().unwrap();
        assert!(!quota_in("0::/nowhere\n", d.path()));
        assert!(!quota_in("garbage\n\n::\n", d.path()));
        write(d.path(), "a/cpu.max", "lots\n");
        assert!(!quota_in("0::/a\n", d.path()), "a quota is a number");
        // A path climbing out of the root is not followed.
        assert!(!quota_in("0::/../../etc\n", d.path()));
    }
}
