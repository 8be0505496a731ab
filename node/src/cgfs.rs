//! Every change the agent and the restore path make inside a cgroup tree (mkdir, rmdir, and a
//! write to a control file or to `cgroup.procs`/`tasks`) goes through these three functions. In
//! the binary they are the plain system calls. Under `cfg(test)` a thread can install a model of
//! the kernel's cgroup v2 file semantics over a temp directory (`fake::Kernel`), so the v2
//! file-protocol tests exercise the agent's real plan/apply/readback/restore code without root
//! and without a cgroup2 `cpu` controller.

use std::io;
use std::path::Path;

/// `mkdir` of a cgroup.
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    #[cfg(test)]
    if let Some(r) = fake::with(|k| k.mkdir(path)) {
        return r;
    }
    std::fs::create_dir(path)
}

/// `rmdir` of a cgroup.
pub(crate) fn remove_dir(path: &Path) -> io::Result<()> {
    #[cfg(test)]
    if let Some(r) = fake::with(|k| k.rmdir(path)) {
        return r;
    }
    std::fs::remove_dir(path)
}

/// One `write(2)` of `value` to a cgroup file.
pub(crate) fn write(path: &Path, value: &str) -> io::Result<()> {
    #[cfg(test)]
    if let Some(r) = fake::with(|k| k.write(path, value)) {
        return r;
    }
    std::fs::write(path, value)
}

#[cfg(test)]
pub(crate) mod fake {
    //! A model of the cgroup v2 interface files, after Documentation/admin-guide/cgroup-v2.rst:
    //! a controller's files appear in a child only when the parent's `cgroup.subtree_control`
    //! enables it; enabling needs the controller in the cgroup's own `cgroup.controllers`
    //! (ENOENT) and, below the root, no processes in the cgroup (no internal processes: EBUSY);
    //! disabling fails while a child still enables it (EBUSY); a process can only be moved into
    //! the root or a cgroup that enables no controllers for children (EBUSY), and it leaves its
    //! old cgroup; `rmdir` fails while the cgroup has processes or children (EBUSY);
    //! `cpu.weight` takes 1..=10000, `cpu.idle` 0 or 1, `cpuset.cpus` a CPU list (EINVAL);
    //! writing a file that does not exist fails (ENOENT). Every call is logged. It models the
    //! documented protocol, not the kernel's scheduling.

    use std::cell::RefCell;
    use std::io;
    use std::path::{Path, PathBuf};

    use crate::config::parse_cpu_list;
    use crate::journal::Entry;

    thread_local! {
        static KERNEL: RefCell<Option<Kernel>> = const { RefCell::new(None) };
    }

    /// Runs `f` on this thread's fake kernel, if one is installed.
    pub(crate) fn with<T>(f: impl FnOnce(&mut Kernel) -> T) -> Option<T> {
        KERNEL.with(|k| k.borrow_mut().as_mut().map(f))
    }

    /// Installs a fake kernel on this thread (replacing any other).
    pub(crate) fn install(kernel: Kernel) {
        KERNEL.with(|k| *k.borrow_mut() = Some(kernel));
    }

    /// Removes this thread's fake kernel and returns it (with its log).
    pub(crate) fn uninstall() -> Option<Kernel> {
        KERNEL.with(|k| k.borrow_mut().take())
    }

    /// Controllers in the kernel's print order.
    const ORDER: [&str; 8] = ["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"];

    /// One call into the tree.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Op {
        Mkdir(PathBuf),
        Rmdir(PathBuf),
        /// (file, value written, the file's content just before, the result's errno or 0).
        Write {
            path: PathBuf,
            value: String,
            before: String,
            errno: i32,
        },
    }

    /// The model, rooted at a temp directory that stands for the cgroup2 mount.
    pub(crate) struct Kernel {
        pub root: PathBuf,
        pub log: Vec<Op>,
        /// When set, every mkdir/control-file write/move must already be in this journal
        /// (the agent's apply phase); a violation panics with the call.
        pub journal_check: Option<PathBuf>,
    }

    fn err(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    fn ordered(set: &[String]) -> String {
        ORDER.iter().filter(|c| set.iter().any(|s| s == *c)).copied().collect::<Vec<_>>().join(" ")
    }

    /// The interface files a controller adds to a non-root cgroup, with their defaults.
    fn controller_files(controller: &str) -> &'static [(&'static str, &'static str)] {
        match controller {
            "cpu" => &[("cpu.weight", "100"), ("cpu.weight.nice", "0"), ("cpu.idle", "0"), ("cpu.max", "max 100000")],
            "cpuset" => &[
                ("cpuset.cpus", ""),
                ("cpuset.mems", ""),
                ("cpuset.cpus.effective", ""),
                ("cpuset.mems.effective", ""),
                ("cpuset.cpus.partition", "member"),
            ],
            _ => &[],
        }
    }

    fn format_cpu_list(cpus: &[usize]) -> String {
        let mut out = Vec::new();
        let mut i = 0;
        while i < cpus.len() {
            let mut j = i;
            while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
                j += 1;
            }
            out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
            i = j + 1;
        }
        out.join(",")
    }

    fn journal_entries(path: &Path) -> Vec<Entry> {
        read(path).lines().filter_map(|l| crate::journal::parse_line(l).ok()).collect()
    }

    impl Kernel {
        /// Creates the root of a fake cgroup2 mount: `controllers` available, `enabled` already
        /// in the root's `cgroup.subtree_control`, `procs` in the root.
        pub(crate) fn new(root: &Path, controllers: &str, enabled: &str, procs: &[u32]) -> Kernel {
            std::fs::create_dir_all(root).unwrap();
            let files = [
                ("cgroup.controllers", controllers.to_string()),
                ("cgroup.subtree_control", enabled.to_string()),
                ("cgroup.procs", procs.iter().map(|p| format!("{p}\n")).collect()),
                ("cgroup.threads", String::new()),
                ("cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n".into()),
                ("cpuset.cpus.effective", "0-1\n".into()),
                ("cpuset.mems.effective", "0\n".into()),
            ];
            for (name, value) in files {
                std::fs::write(root.join(name), value).unwrap();
            }
            Kernel { root: root.to_path_buf(), log: Vec::new(), journal_check: None }
        }

        fn is_cgroup(&self, dir: &Path) -> bool {
            dir.starts_with(&self.root) && dir.join("cgroup.procs").is_file()
        }

        fn children(dir: &Path) -> Vec<PathBuf> {
            let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
            entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect()
        }

        fn all_cgroups(&self) -> Vec<PathBuf> {
            let mut out = vec![self.root.clone()];
            let mut i = 0;
            while i < out.len() {
                let more = Self::children(&out[i]);
                out.extend(more);
                i += 1;
            }
            out
        }

        fn check_journal(&self, what: &str, ok: impl Fn(&Entry) -> bool) {
            if let Some(j) = &self.journal_check {
                let entries = journal_entries(j);
                assert!(entries.iter().any(ok), "{what} happened before it was journaled; journal: {entries:?}");
            }
        }

        pub(crate) fn mkdir(&mut self, path: &Path) -> io::Result<()> {
            self.log.push(Op::Mkdir(path.to_path_buf()));
            let parent = path.parent().unwrap_or(path);
            if !self.is_cgroup(parent) {
                return Err(err(libc::ENOENT));
            }
            if path.exists() {
                return Err(err(libc::EEXIST));
            }
            self.check_journal(
                &format!("mkdir {}", path.display()),
                |e| matches!(e, Entry::CreatedDir { path: p, .. } if p == path),
            );
            std::fs::create_dir(path)?;
            for (name, value) in [
                ("cgroup.procs", ""),
                ("cgroup.threads", ""),
                ("cgroup.subtree_control", ""),
                ("cgroup.type", "domain"),
                ("cgroup.events", "populated 0\nfrozen 0\n"),
                ("cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            ] {
                std::fs::write(path.join(name), value)?;
            }
            self.refresh(path);
            Ok(())
        }

        /// Makes a child's `cgroup.controllers` and controller files follow its parent's
        /// `cgroup.subtree_control`.
        fn refresh(&self, child: &Path) {
            let parent = child.parent().unwrap();
            let enabled = words(&read(&parent.join("cgroup.subtree_control")));
            let before = words(&read(&child.join("cgroup.controllers")));
            std::fs::write(child.join("cgroup.controllers"), ordered(&enabled)).unwrap();
            for c in ORDER {
                let (was, is) = (before.iter().any(|b| b == c), enabled.iter().any(|e| e == c));
                for (name, default) in controller_files(c) {
                    let file = child.join(name);
                    if is && (!was || !file.exists()) {
                        std::fs::write(&file, default).unwrap();
                    } else if !is {
                        let _ = std::fs::remove_file(&file);
                    }
                }
            }
        }

        pub(crate) fn rmdir(&mut self, path: &Path) -> io::Result<()> {
            self.log.push(Op::Rmdir(path.to_path_buf()));
            if !self.is_cgroup(path) || path == self.root {
                return Err(err(libc::ENOENT));
            }
            if !Self::children(path).is_empty() || !read(&path.join("cgroup.procs")).trim().is_empty() {
                return Err(err(libc::EBUSY));
            }
            std::fs::remove_dir_all(path)
        }

        pub(crate) fn write(&mut self, path: &Path, value: &str) -> io::Result<()> {
            let before = read(path);
            let result = self.write_inner(path, value);
            let errno = result.as_ref().err().and_then(|e| e.raw_os_error()).unwrap_or(0);
            self.log.push(Op::Write { path: path.to_path_buf(), value: value.to_string(), before, errno });
            result
        }

        fn write_inner(&mut self, path: &Path, value: &str) -> io::Result<()> {
            let dir = path.parent().unwrap_or(path).to_path_buf();
            if !self.is_cgroup(&dir) || !path.is_file() {
                return Err(err(libc::ENOENT));
            }
            let is_root = dir == self.root;
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            match name {
                "cgroup.procs" => {
                    let pid: u32 = value.trim().parse().map_err(|_| err(libc::EINVAL))?;
                    self.check_journal(
                        &format!("move of {pid} to {}", dir.display()),
                        |e| matches!(e, Entry::MovedProcess { pid: p, .. } if *p == pid),
                    );
                    if !is_root && !read(&dir.join("cgroup.subtree_control")).trim().is_empty() {
                        return Err(err(libc::EBUSY));
                    }
                    for cg in self.all_cgroups() {
                        let file = cg.join("cgroup.procs");
                        let kept: String = read(&file)
                            .lines()
                            .filter(|l| l.trim() != pid.to_string())
                            .map(|l| format!("{l}\n"))
                            .collect();
                        std::fs::write(&file, kept)?;
                    }
                    let mut now = read(path);
                    now.push_str(&format!("{pid}\n"));
                    std::fs::write(path, now)
                }
                "cgroup.subtree_control" => {
                    let available = words(&read(&dir.join("cgroup.controllers")));
                    let mut enabled = words(&read(path));
                    for token in value.split_whitespace() {
                        let (on, c) = match token.split_at(1) {
                            ("+", c) => (true, c),
                            ("-", c) => (false, c),
                            _ => return Err(err(libc::EINVAL)),
                        };
                        if !available.iter().any(|a| a == c) {
                            return Err(err(libc::ENOENT));
                        }
                        let has = enabled.iter().any(|e| e == c);
                        if on && !has {
                            if !is_root && !read(&dir.join("cgroup.procs")).trim().is_empty() {
                                return Err(err(libc::EBUSY));
                            }
                            enabled.push(c.to_string());
                        } else if !on && has {
                            let used = Self::children(&dir)
                                .iter()
                                .any(|ch| words(&read(&ch.join("cgroup.subtree_control"))).iter().any(|x| x == c));
                            if used {
                                return Err(err(libc::EBUSY));
                            }
                            enabled.retain(|e| e != c);
                        }
                    }
                    self.check_journal(
                        &format!("write {value:?} to {}", path.display()),
                        |e| matches!(e, Entry::WroteFile { path: p, .. } if p == path),
                    );
                    std::fs::write(path, ordered(&enabled))?;
                    for child in Self::children(&dir) {
                        self.refresh(&child);
                    }
                    Ok(())
                }
                "cgroup.controllers"
                | "cgroup.events"
                | "cgroup.type"
                | "cpu.pressure"
                | "cpuset.cpus.effective"
                | "cpuset.mems.effective" => Err(err(libc::EACCES)),
                _ => {
                    let stored = match name {
                        "cpu.weight" => match value.trim().parse::<u64>() {
                            Ok(w) if (1..=10_000).contains(&w) => w.to_string(),
                            _ => return Err(err(libc::EINVAL)),
                        },
                        "cpu.idle" => match value.trim() {
                            v @ ("0" | "1") => v.to_string(),
                            _ => return Err(err(libc::EINVAL)),
                        },
                        "cpuset.cpus" | "cpuset.mems" => {
                            format_cpu_list(&parse_cpu_list(value).map_err(|_| err(libc::EINVAL))?)
                        }
                        _ => value.trim().to_string(),
                    };
                    self.check_journal(
                        &format!("write {value:?} to {}", path.display()),
                        |e| matches!(e, Entry::WroteFile { path: p, .. } if p == path),
                    );
                    std::fs::write(path, format!("{stored}\n"))
                }
            }
        }

        /// The writes that succeeded, as (path relative to the root, value).
        pub(crate) fn writes(&self) -> Vec<(String, String)> {
            self.log
                .iter()
                .filter_map(|op| match op {
                    Op::Write { path, value, errno: 0, .. } => Some((self.rel(path), value.clone())),
                    _ => None,
                })
                .collect()
        }

        /// The failed calls.
        pub(crate) fn failures(&self) -> Vec<&Op> {
            self.log.iter().filter(|op| matches!(op, Op::Write { errno, .. } if *errno != 0)).collect()
        }

        pub(crate) fn rel(&self, path: &Path) -> String {
            path.strip_prefix(&self.root)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| path.display().to_string())
        }
    }
}
