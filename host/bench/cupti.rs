//! CUPTI kernel activity records, with libcupti loaded at run time (the build needs no CUDA).
//!
//! Why not cudarc's `cupti` feature: it exists in cudarc 0.19 (and pulls in `runtime`), but its
//! loader only tries sonames derived from the build's CUDA version (`libcupti.so`,
//! `libcupti.so.12`, …), never `libcupti.so.13`, and never the toolkit's
//! `extras/CUPTI/lib64`, which is not on the loader path. On the H200 machine (CUDA 13) it
//! would find nothing. This module uses five CUPTI functions through `libloading`, searching
//! the usual places (or `RGDN_CUPTI=/path/to/libcupti.so`), and reads only the common prefix of
//! the kernel record (`CUpti_ActivityKernel4` … `13`: identical up to `name`).
//!
//! Records arrive through CUPTI's buffer callbacks, possibly on CUPTI's own thread; they are
//! collected in a process-wide list and taken by [`Cupti::take`] after a forced flush.

use std::ffi::{CStr, c_char, c_void};
use std::path::PathBuf;
use std::sync::Mutex;

const CUPTI_SUCCESS: u32 = 0;
const CUPTI_ERROR_MAX_LIMIT_REACHED: u32 = 12;
const CUPTI_ACTIVITY_KIND_KERNEL: u32 = 3;
const CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: u32 = 10;
const CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: u32 = 1;
const BUFFER_BYTES: usize = 8 << 20;
const BUFFER_ALIGN: usize = 8;

/// One kernel execution as CUPTI saw it (GPU timestamps in ns).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRecord {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The launch API call's id: one per kernel launch, shared by every node of one graph launch.
    pub correlation_id: u32,
}

impl KernelRecord {
    pub fn duration_us(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e3
    }
}

/// The prefix every CUpti_ActivityKernelN (N = 4 … 13) shares, as laid out in cupti_activity.h
/// (`#pragma pack(8)`).
#[repr(C, packed(8))]
#[derive(Clone, Copy)]
struct KernelPrefix {
    kind: u32,
    cache_config: u8,
    shared_memory_config: u8,
    registers_per_thread: u16,
    partitioned_cache_requested: u32,
    partitioned_cache_executed: u32,
    start: u64,
    end: u64,
    completed: u64,
    device_id: u32,
    context_id: u32,
    stream_id: u32,
    grid: [i32; 3],
    block: [i32; 3],
    static_shared_memory: i32,
    dynamic_shared_memory: i32,
    local_memory_per_thread: u32,
    local_memory_total: u32,
    correlation_id: u32,
    grid_id: i64,
    name: *const c_char,
}

// The offsets of cupti_activity.h (checked against cudarc's bindgen output of
// CUpti_ActivityKernel9/10/13).
const _: () = {
    assert!(std::mem::offset_of!(KernelPrefix, start) == 16);
    assert!(std::mem::offset_of!(KernelPrefix, end) == 24);
    assert!(std::mem::offset_of!(KernelPrefix, correlation_id) == 92);
    assert!(std::mem::offset_of!(KernelPrefix, grid_id) == 96);
    assert!(std::mem::offset_of!(KernelPrefix, name) == 104);
};

type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

struct Api {
    register_callbacks: unsafe extern "C" fn(Option<RequestFn>, Option<CompleteFn>) -> u32,
    enable: unsafe extern "C" fn(u32) -> u32,
    disable: unsafe extern "C" fn(u32) -> u32,
    flush_all: unsafe extern "C" fn(u32) -> u32,
    next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> u32,
}

static RECORDS: Mutex<Vec<KernelRecord>> = Mutex::new(Vec::new());

fn records() -> std::sync::MutexGuard<'static, Vec<KernelRecord>> {
    RECORDS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The loaded library's `cuptiActivityGetNextRecord`, for the completion callback.
static NEXT_RECORD: Mutex<Option<unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> u32>> = Mutex::new(None);

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("constant layout");
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed in `buffer_completed`, which
    // CUPTI calls for every buffer it requested. A null buffer (allocation failure) tells CUPTI
    // to drop records.
    unsafe {
        *buffer = std::alloc::alloc(layout);
        *size = if (*buffer).is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(_ctx: *mut c_void, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    let next = *NEXT_RECORD.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(next) = next {
        let mut got = Vec::new();
        let mut record: *mut c_void = std::ptr::null_mut();
        // SAFETY: `buffer` holds `valid` bytes of records written by CUPTI; each record CUPTI
        // returns starts with its kind, and kernel kinds have the KernelPrefix layout. The name
        // is a NUL-terminated string owned by CUPTI, copied at once.
        unsafe {
            while next(buffer, valid, &mut record) == CUPTI_SUCCESS {
                let kind = *(record as *const u32);
                if kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || kind == CUPTI_ACTIVITY_KIND_KERNEL {
                    let k = std::ptr::read_unaligned(record as *const KernelPrefix);
                    let name = if k.name.is_null() { String::new() } else { CStr::from_ptr(k.name).to_string_lossy().into_owned() };
                    got.push(KernelRecord { name, start_ns: k.start, end_ns: k.end, correlation_id: k.correlation_id });
                }
            }
        }
        records().extend(got);
    }
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("constant layout");
    // SAFETY: allocated in `buffer_requested` with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };
}

/// Kernel activity collection, enabled from [`Cupti::start`] until drop.
pub struct Cupti {
    api: Api,
    path: PathBuf,
    /// Never unloaded: CUPTI's threads may outlive this value.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

/// Where libcupti may live: `RGDN_CUPTI`, the loader path, then CUDA toolkit directories.
fn candidates() -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("RGDN_CUPTI") {
        c.push(PathBuf::from(p));
    }
    for name in ["libcupti.so", "libcupti.so.13", "libcupti.so.12"] {
        c.push(PathBuf::from(name));
    }
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    roots.extend(["/usr/local/cuda", "/opt/cuda", "/usr/lib/cuda"].map(PathBuf::from));
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut versioned: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cuda-")))
            .collect();
        versioned.sort();
        roots.extend(versioned.into_iter().rev());
    }
    for root in roots {
        for sub in ["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64", "lib"] {
            let dir = root.join(sub);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            let mut libs: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libcupti.so")))
                .collect();
            libs.sort();
            c.extend(libs);
        }
    }
    c
}

/// A function of `lib`.
///
/// # Safety
/// `T` must be the symbol's true function-pointer type.
unsafe fn sym<T: Copy>(lib: &libloading::Library, name: &[u8]) -> Result<T, String> {
    // SAFETY: forwarded to the caller.
    unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|e| format!("{}: {e}", String::from_utf8_lossy(name)))
}

impl Cupti {
    /// Loads libcupti and enables kernel activity records; `Err` says why not (the caller then
    /// times with CUDA events).
    pub fn start() -> Result<Self, String> {
        let mut tried = Vec::new();
        for path in candidates() {
            // SAFETY: loading libcupti runs its initialisers, which only register with the
            // CUDA driver; no symbol is used before it is checked to exist.
            let lib = match unsafe { libloading::Library::new(&path) } {
                Ok(lib) => lib,
                Err(_) => {
                    tried.push(path.display().to_string());
                    continue;
                }
            };
            // SAFETY: the symbol types are CUPTI's documented signatures (cupti_activity.h).
            let api = unsafe {
                Api {
                    register_callbacks: sym(&lib, b"cuptiActivityRegisterCallbacks")?,
                    enable: sym(&lib, b"cuptiActivityEnable")?,
                    disable: sym(&lib, b"cuptiActivityDisable")?,
                    flush_all: sym(&lib, b"cuptiActivityFlushAll")?,
                    next_record: sym(&lib, b"cuptiActivityGetNextRecord")?,
                }
            };
            *NEXT_RECORD.lock().unwrap_or_else(|p| p.into_inner()) = Some(api.next_record);
            // SAFETY: the callbacks have CUPTI's signatures and live for the whole program.
            let rc = unsafe { (api.register_callbacks)(Some(buffer_requested), Some(buffer_completed)) };
            // SAFETY (both calls): plain CUPTI calls.
            let failed = if rc != CUPTI_SUCCESS {
                Some(format!("cuptiActivityRegisterCallbacks returned {rc}"))
            } else {
                let rc = unsafe { (api.enable)(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) };
                (rc != CUPTI_SUCCESS).then(|| format!("cuptiActivityEnable(CONCURRENT_KERNEL) returned {rc}"))
            };
            if let Some(why) = failed {
                // Leave the library mapped: its callbacks may already be registered.
                std::mem::forget(lib);
                return Err(format!("{}: {why}", path.display()));
            }
            records().clear();
            return Ok(Cupti { api, path, _lib: std::mem::ManuallyDrop::new(lib) });
        }
        Err(format!("libcupti not found (tried {}; set RGDN_CUPTI=/path/to/libcupti.so)", tried.join(", ")))
    }

    /// The library in use.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Flushes CUPTI's buffers (call after the stream is synchronised) and takes every kernel
    /// record collected so far, in correlation-id order (launch order).
    pub fn take(&self) -> Result<Vec<KernelRecord>, String> {
        // SAFETY: a plain CUPTI call; completion callbacks run before it returns.
        let rc = unsafe { (self.api.flush_all)(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) };
        if rc != CUPTI_SUCCESS && rc != CUPTI_ERROR_MAX_LIMIT_REACHED {
            return Err(format!("cuptiActivityFlushAll returned {rc}"));
        }
        let mut r = std::mem::take(&mut *records());
        r.sort_by_key(|k| (k.correlation_id, k.start_ns));
        Ok(r)
    }
}

impl Drop for Cupti {
    fn drop(&mut self) {
        // SAFETY: plain CUPTI calls; the library stays loaded (the callbacks may still run).
        unsafe {
            (self.api.disable)(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
            (self.api.flush_all)(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        }
    }
}

/// Groups records by correlation id (one graph launch = one id): the span (first start to
/// last end, µs) and kernel count of each group, in launch order.
pub fn spans_by_launch(records: &[KernelRecord]) -> Vec<(f64, usize)> {
    let mut out: Vec<(u32, u64, u64, usize)> = Vec::new();
    for r in records {
        match out.last_mut() {
            Some((id, start, end, n)) if *id == r.correlation_id => {
                *start = (*start).min(r.start_ns);
                *end = (*end).max(r.end_ns);
                *n += 1;
            }
            _ => out.push((r.correlation_id, r.start_ns, r.end_ns, 1)),
        }
    }
    out.into_iter().map(|(_, s, e, n)| (e.saturating_sub(s) as f64 / 1e3, n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u32, start: u64, end: u64) -> KernelRecord {
        KernelRecord { name: "k".into(), start_ns: start, end_ns: end, correlation_id: id }
    }

    #[test]
    fn spans_group_graph_nodes_by_correlation_id() {
        let r = [rec(7, 1000, 3000), rec(7, 3500, 9000), rec(7, 9100, 9900), rec(8, 20_000, 21_500)];
        assert_eq!(spans_by_launch(&r), vec![(8.9, 3), (1.5, 1)]);
        assert!(spans_by_launch(&[]).is_empty());
        assert_eq!(rec(1, 2000, 4500).duration_us(), 2.5);
    }

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        // This machine has no libcupti (and no GPU): start() must say so.
        if candidates().iter().all(|p| unsafe { libloading::Library::new(p) }.is_err()) {
            let e = Cupti::start().err().expect("no libcupti here");
            assert!(e.contains("libcupti not found"), "{e}");
        }
    }
}
