//! CPU time and memory of the processes a load runs on, read from /proc.

use std::{collections::BTreeMap, sync::OnceLock};

/// A process (or group of processes) the report names.
#[derive(Debug, Clone)]
pub struct Watched {
    pub name: String,
    pub pids: Vec<u32>,
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User + system CPU seconds of one process (0 when it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name is in parentheses and may hold spaces: fields are
    // counted after the last ')'. utime and stime are fields 14 and 15.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // `after` starts at field 3 (state).
    (tick(11) + tick(12)) / clock_ticks()
}

fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident memory now, in KiB.
pub fn rss_kb(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:")
}

/// Peak resident memory since the last [`reset_peak`], in KiB.
pub fn peak_rss_kb(pid: u32) -> u64 {
    status_kb(pid, "VmHWM:")
}

/// Resets the peak RSS (`VmHWM`) to the current RSS.
pub fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Open file descriptors of a process.
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Every process whose executable's file name is `name` (from argv[0]).
pub fn pids_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .ok()
                .and_then(|c| {
                    let argv0 = c.split(|b| *b == 0).next()?.to_vec();
                    let argv0 = String::from_utf8(argv0).ok()?;
                    Some(
                        argv0.rsplit('/').next()? == name || argv0.starts_with(&format!("{name}:")),
                    )
                })
                .unwrap_or(false)
        })
        .collect()
}

/// CPU seconds of every watched group at one moment.
#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot(BTreeMap<String, f64>);

pub fn snapshot(watched: &[Watched]) -> CpuSnapshot {
    CpuSnapshot(
        watched
            .iter()
            .map(|w| (w.name.clone(), w.pids.iter().map(|p| cpu_seconds(*p)).sum()))
            .collect(),
    )
}

impl CpuSnapshot {
    /// CPU seconds each group used since `earlier`.
    pub fn since(&self, earlier: &CpuSnapshot) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v - earlier.0.get(k).copied().unwrap_or(0.0)))
            .collect()
    }
}

/// Resets the peak RSS of every watched process.
pub fn reset_peaks(watched: &[Watched]) {
    for w in watched {
        for pid in &w.pids {
            reset_peak(*pid);
        }
    }
}

/// Peak RSS (MiB) of each watched group since the reset (summed over its
/// processes).
pub fn peaks_mib(watched: &[Watched]) -> BTreeMap<String, f64> {
    watched
        .iter()
        .map(|w| {
            let kb: u64 = w.pids.iter().map(|p| peak_rss_kb(*p)).sum();
            (w.name.clone(), kb as f64 / 1024.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_seconds(me) >= 0.0);
        let rss = rss_kb(me);
        assert!(rss > 0);
        assert!(peak_rss_kb(me) >= rss);
        assert!(fds(me) >= 3);
    }
}
