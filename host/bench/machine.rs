//! What a run records about where it ran: date, commit, GPU, driver, SM clock, L2 size.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The commit: `RGDN_GIT_COMMIT` at build time (`RGDN_GIT_COMMIT=$(git rev-parse HEAD) cargo
/// build …`), else `git` at run time when run inside the repository, else "unknown".
pub fn commit() -> String {
    if let Some(c) = option_env!("RGDN_GIT_COMMIT").filter(|c| !c.is_empty()) {
        return format!("{c} (embedded at build time)");
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            format!("{hash}{} (git at run time: the working tree, not necessarily the build)", if dirty { "+uncommitted" } else { "" })
        }
        None => "unknown (build with RGDN_GIT_COMMIT=$(git rev-parse HEAD) to embed it)".into(),
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    utc(secs)
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` for GPU 0, split on commas.
pub fn nvidia_smi(fields: &str) -> Option<Vec<String>> {
    let out =
        Command::new("nvidia-smi").args([&format!("--query-gpu={fields}"), "--format=csv,noheader,nounits", "-i", "0"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let line = String::from_utf8_lossy(&out.stdout).lines().next()?.to_string();
    Some(line.split(',').map(|s| s.trim().to_string()).collect())
}

/// Samples `clocks.sm` with nvidia-smi every half second while the run goes on (never sets
/// anything: a query only).
pub struct ClockSampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<f64>>>,
}

impl ClockSampler {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match nvidia_smi("clocks.sm").and_then(|v| v.first().and_then(|x| x.parse::<f64>().ok())) {
                    Some(mhz) => samples.push(mhz),
                    None => break, // no nvidia-smi: stop trying
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            samples
        });
        ClockSampler { stop, handle: Some(handle) }
    }

    /// Stops sampling; the samples (MHz) taken.
    pub fn finish(mut self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_798_113_906), "2026-12-24T12:05:06Z");
    }

    #[test]
    fn commit_is_always_some_text() {
        assert!(!commit().is_empty());
    }
}
