//! A `modelcas mount` child process for the tests (unmounted and reaped on drop), and
//! reading its metrics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{poll_until, wait_until, Env};

pub fn is_mounted(path: &Path) -> bool {
    let want = path.canonicalize().unwrap_or(path.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

/// A `modelcas mount` child process, unmounted and reaped on drop.
pub struct Mount {
    pub child: Option<Child>,
    pub path: PathBuf,
}

impl Mount {
    pub fn start(env: &Env, extra: &[&str]) -> Mount {
        Mount::start_with(env, extra, &[])
    }

    /// A mount with `vars` in its environment.
    pub fn start_with(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Mount {
        let path = env.path(&format!("mnt-{}", rand::random::<u32>()));
        std::fs::create_dir_all(&path).unwrap();
        let mut cmd = env.cmd();
        cmd.envs(vars.iter().copied())
            .arg("mount")
            .arg(&path)
            .args(extra);
        Mount::spawn(cmd, path)
    }

    /// Runs `cmd` (a mount of `path`) and waits until the kernel shows the mount.
    pub fn spawn(mut cmd: Command, path: PathBuf) -> Mount {
        let child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut m = Mount {
            child: Some(child),
            path,
        };
        wait_until("the mount to come up", Duration::from_secs(20), || {
            // Mounted, and answered: the connection is mounted before its server (a child
            // of the mount process) answers it; a stat waits for the server.
            if is_mounted(&m.path) && std::fs::metadata(&m.path).is_ok() {
                return Some(());
            }
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(
                    m.child.as_mut().unwrap().stderr.as_mut().unwrap(),
                    &mut err,
                )
                .unwrap();
                panic!("mount exited early ({st}): {err}");
            }
            None
        });
        m
    }

    /// Stops the mount and returns what it wrote to stderr.
    pub fn stop_stderr(&mut self) -> String {
        let mut stderr = self.child.as_mut().unwrap().stderr.take().unwrap();
        self.stop();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
        err
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        // Killed when it has not exited in 20 s (this runs in Drop too: no panic).
        poll_until(Duration::from_secs(20), || child.try_wait().unwrap()).unwrap_or_else(|| {
            let _ = child.kill();
            child.wait().unwrap()
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        if is_mounted(&self.path) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.path)
                .status();
        }
    }
}

/// Sum of the samples of a metric in a Prometheus text page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| {
            !l.starts_with('#')
                && (l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.0 200"),
        "{out}"
    );
    out
}
