//! NVTX ranges (forward, layer, kernel) for `nsys profile` / `ncu --nvtx`.
//!
//! No libnvToolsExt is needed: a profiler that wants NVTX names its injection library in
//! `NVTX_INJECTION64_PATH`, and rgdn speaks NVTX v3's injection protocol itself (what the
//! header-only NVTX v3 does in C, `nvtxDetail/nvtxInit.h`): it loads that library, calls its
//! `InitializeInjectionNvtx2` with rgdn's export-table getter, and the tool fills rgdn's
//! function tables with its own `nvtxRangePushA` / `nvtxRangePop`. Without an injection it falls
//! back to libnvToolsExt loaded at run time (`RGDN_NVTX=/path/to/libnvToolsExt.so` picks one);
//! without either every call is a no-op.

use std::ffi::{CString, c_char, c_int};
use std::path::PathBuf;
use std::sync::OnceLock;

struct Api {
    push: unsafe extern "C" fn(*const c_char) -> c_int,
    pop: unsafe extern "C" fn() -> c_int,
    path: PathBuf,
}

static API: OnceLock<Option<Api>> = OnceLock::new();

fn candidates() -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = std::env::var_os("RGDN_NVTX").map(PathBuf::from).into_iter().collect();
    c.extend(["libnvToolsExt.so.1", "libnvToolsExt.so"].map(PathBuf::from));
    for root in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"] {
        c.extend(["libnvToolsExt.so.1", "libnvToolsExt.so"].map(|n| PathBuf::from(root).join(n)));
    }
    c
}

fn load() -> Option<Api> {
    if let Some(api) = injection::attach() {
        return Some(api);
    }
    for path in candidates() {
        // SAFETY: loading libnvToolsExt runs no code that touches this program's state.
        let Ok(lib) = (unsafe { libloading::Library::new(&path) }) else { continue };
        // SAFETY: nvtxRangePushA(const char*) -> int and nvtxRangePop(void) -> int (nvToolsExt.h).
        let api = unsafe {
            let push = lib.get::<unsafe extern "C" fn(*const c_char) -> c_int>(b"nvtxRangePushA").map(|s| *s);
            let pop = lib.get::<unsafe extern "C" fn() -> c_int>(b"nvtxRangePop").map(|s| *s);
            match (push, pop) {
                (Ok(push), Ok(pop)) => Some(Api { push, pop, path: path.clone() }),
                _ => None,
            }
        };
        if api.is_some() {
            // The functions must stay valid for the whole program.
            std::mem::forget(lib);
            return api;
        }
    }
    None
}

fn api() -> Option<&'static Api> {
    API.get_or_init(load).as_ref()
}

/// The library in use, if any.
pub fn library() -> Option<PathBuf> {
    api().map(|a| a.path.clone())
}

/// An NVTX range, popped on drop.
#[must_use = "the range ends when this value is dropped"]
pub struct Range(bool);

/// Opens a range named `name` (no-op without libnvToolsExt).
pub fn range(name: &str) -> Range {
    match api() {
        Some(a) => {
            let c = CString::new(name.replace('\0', " ")).unwrap_or_default();
            // SAFETY: a valid NUL-terminated string, copied by NVTX before it returns.
            unsafe { (a.push)(c.as_ptr()) };
            Range(true)
        }
        None => Range(false),
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if self.0
            && let Some(a) = api()
        {
            // SAFETY: pops the range this value pushed.
            unsafe { (a.pop)() };
        }
    }
}

/// NVTX v3's tool-injection protocol, host side: the export tables a tool asks for and the
/// function-pointer slots it fills. Constants from NVTX v3's `nvtxDetail/nvtxTypes.h`.
mod injection {
    use super::Api;
    use std::ffi::{c_char, c_int, c_uint, c_void};
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// `NVTX_CBID_<module>_SIZE` of the callback modules 1..=6 (`NvtxCallbackModule`: CORE,
    /// CUDA, OPENCL, CUDART, CORE2, SYNC). Every module gets a table, as in the C
    /// implementation; rgdn only ever calls two CORE slots.
    const MODULE_SIZES: [usize; 6] = [16, 9, 15, 7, 16, 7];
    pub(super) const MODULE_CORE: c_int = 1;
    pub(super) const CBID_CORE_RANGE_PUSH_A: usize = 9;
    pub(super) const CBID_CORE_RANGE_POP: usize = 11;
    pub(super) const ETID_CALLBACKS: u32 = 1;
    pub(super) const ETID_VERSIONINFO: u32 = 3;
    const NVTX_VERSION: u32 = 3;

    /// One module: its slots (each holds a function pointer the tool writes, 0 until then) and
    /// the table the tool receives — `[null, &slot[1], …, &slot[n-1], null]`, as
    /// `functionTable_<module>` in the C implementation.
    struct Module {
        slots: Box<[AtomicUsize]>,
        table: Box<[*mut c_void]>,
    }

    struct Tables(Vec<Module>);
    // SAFETY: the raw pointers only point into the `slots` of the same, never-freed `Tables`;
    // the slots are atomics (a tool writes them during `InitializeInjectionNvtx2`, before any
    // range is pushed).
    unsafe impl Sync for Tables {}
    // SAFETY: as above.
    unsafe impl Send for Tables {}

    static TABLES: OnceLock<Tables> = OnceLock::new();

    fn tables() -> &'static Tables {
        TABLES.get_or_init(|| {
            Tables(
                MODULE_SIZES
                    .iter()
                    .map(|&n| {
                        let slots: Box<[AtomicUsize]> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                        let mut table = vec![std::ptr::null_mut::<c_void>(); n + 1];
                        for (entry, slot) in table.iter_mut().zip(slots.iter()).skip(1) {
                            *entry = slot.as_ptr() as *mut c_void;
                        }
                        Module { slots, table: table.into_boxed_slice() }
                    })
                    .collect(),
            )
        })
    }

    #[repr(C)]
    pub(super) struct ExportTableCallbacks {
        pub(super) struct_size: usize,
        pub(super) get_module_function_table: unsafe extern "C" fn(c_int, *mut *mut *mut c_void, *mut c_uint) -> c_int,
    }

    #[repr(C)]
    pub(super) struct ExportTableVersionInfo {
        pub(super) struct_size: usize,
        pub(super) version: u32,
        pub(super) reserved0: u32,
        pub(super) set_injection_nvtx_version: extern "C" fn(u32),
    }

    static CALLBACKS: ExportTableCallbacks =
        ExportTableCallbacks { struct_size: std::mem::size_of::<ExportTableCallbacks>(), get_module_function_table };
    static VERSION_INFO: ExportTableVersionInfo = ExportTableVersionInfo {
        struct_size: std::mem::size_of::<ExportTableVersionInfo>(),
        version: NVTX_VERSION,
        reserved0: 0,
        set_injection_nvtx_version,
    };

    /// `NvtxExportTableCallbacks::GetModuleFunctionTable`: the table of `module` and its entry
    /// count less one (the C implementation's convention), or 0 for an unknown module.
    ///
    /// # Safety
    /// `out_table` and `out_size` are null or valid for one write (the tool's contract).
    unsafe extern "C" fn get_module_function_table(module: c_int, out_table: *mut *mut *mut c_void, out_size: *mut c_uint) -> c_int {
        let Some(m) = usize::try_from(module).ok().and_then(|m| m.checked_sub(1)).and_then(|i| tables().0.get(i)) else {
            return 0;
        };
        if !out_size.is_null() {
            // SAFETY: non-null, valid for a write by the caller's contract; at most 17 entries.
            unsafe { *out_size = (m.table.len() - 1) as c_uint };
        }
        if !out_table.is_null() {
            // SAFETY: as above; the table lives for the whole program (a static OnceLock).
            unsafe { *out_table = m.table.as_ptr() as *mut *mut c_void };
        }
        1
    }

    /// `NvtxGetExportTableFunc_t`: the tables NVTX v3 exports to tools.
    pub(super) extern "C" fn get_export_table(id: u32) -> *const c_void {
        match id {
            ETID_CALLBACKS => &CALLBACKS as *const ExportTableCallbacks as *const c_void,
            ETID_VERSIONINFO => &VERSION_INFO as *const ExportTableVersionInfo as *const c_void,
            _ => std::ptr::null(),
        }
    }

    extern "C" fn set_injection_nvtx_version(_version: u32) {}

    /// Loads the tool named by `NVTX_INJECTION64_PATH` and lets it attach; the range functions
    /// when it provided both.
    pub(super) fn attach() -> Option<Api> {
        let path = PathBuf::from(std::env::var_os("NVTX_INJECTION64_PATH")?);
        // SAFETY: the profiler's own injection library, loaded as NVTX itself would load it.
        let lib = unsafe { libloading::Library::new(&path) }.ok()?;
        type Init = unsafe extern "C" fn(extern "C" fn(u32) -> *const c_void) -> c_int;
        // SAFETY: `int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t)` (nvtxTypes.h).
        let init = unsafe { lib.get::<Init>(b"InitializeInjectionNvtx2") }.ok().map(|s| *s)?;
        tables();
        // SAFETY: the tool reads the export tables and writes function pointers into the slots.
        if unsafe { init(get_export_table) } == 0 {
            return None;
        }
        // The tool's functions must stay valid for the whole program.
        std::mem::forget(lib);
        core_range_functions().map(|(push, pop)| Api { push, pop, path })
    }

    type Push = unsafe extern "C" fn(*const c_char) -> c_int;
    type Pop = unsafe extern "C" fn() -> c_int;

    /// What a tool wrote into the CORE slots of `nvtxRangePushA` and `nvtxRangePop`.
    pub(super) fn core_range_functions() -> Option<(Push, Pop)> {
        let core = &tables().0[(MODULE_CORE - 1) as usize];
        let push = core.slots[CBID_CORE_RANGE_PUSH_A].load(Ordering::Acquire);
        let pop = core.slots[CBID_CORE_RANGE_POP].load(Ordering::Acquire);
        if push == 0 || pop == 0 {
            return None;
        }
        // SAFETY: a tool wrote these slots with its `nvtxRangePushA` (int(const char*)) and
        // `nvtxRangePop` (int(void)) implementations; non-zero, so function pointers.
        Some(unsafe { (std::mem::transmute::<usize, Push>(push), std::mem::transmute::<usize, Pop>(pop)) })
    }
}

#[cfg(test)]
mod tests {
    use super::injection::*;
    use std::ffi::{c_char, c_int, c_uint, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn ranges_are_harmless_without_the_library() {
        let _outer = super::range("forward");
        let _inner = super::range("layer\0with nul");
    }

    static PUSHED: AtomicUsize = AtomicUsize::new(0);
    static POPPED: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn fake_push(_: *const c_char) -> c_int {
        PUSHED.fetch_add(1, Ordering::SeqCst) as c_int
    }
    unsafe extern "C" fn fake_pop() -> c_int {
        POPPED.fetch_add(1, Ordering::SeqCst) as c_int
    }

    /// Plays the tool's side of the protocol as ncu's injection does: export tables by id, the
    /// CORE module's table, its two range slots written; rgdn must then call those functions.
    #[test]
    fn a_tool_attaches_through_the_export_tables() {
        assert!(get_export_table(2).is_null() && get_export_table(0).is_null());
        let version = get_export_table(ETID_VERSIONINFO) as *const ExportTableVersionInfo;
        // SAFETY: the static version-info table.
        assert_eq!(unsafe { ((*version).struct_size, (*version).version) }, (24, 3));
        let callbacks = get_export_table(ETID_CALLBACKS) as *const ExportTableCallbacks;
        // SAFETY: the static callbacks table.
        let (size, get) = unsafe { ((*callbacks).struct_size, (*callbacks).get_module_function_table) };
        assert_eq!(size, 16);
        let (mut table, mut n): (*mut *mut c_void, c_uint) = (std::ptr::null_mut(), 0);
        // SAFETY: valid out-pointers.
        assert_eq!(unsafe { get(0, &mut table, &mut n) }, 0, "module 0 is INVALID");
        // SAFETY: valid out-pointers.
        assert_eq!(unsafe { get(7, &mut table, &mut n) }, 0, "no module 7");
        // SAFETY: valid out-pointers.
        assert_eq!(unsafe { get(MODULE_CORE, &mut table, &mut n) }, 1);
        assert_eq!(n, 16, "NVTX_CBID_CORE_SIZE");
        // SAFETY: the table has n + 1 = 17 entries: null, 15 slot pointers, null.
        unsafe {
            assert!((*table).is_null() && (*table.add(16)).is_null());
            assert!((1..16).all(|i| !(*table.add(i)).is_null()));
            *((*table.add(9)) as *mut usize) = fake_push as unsafe extern "C" fn(*const c_char) -> c_int as usize;
            *((*table.add(11)) as *mut usize) = fake_pop as unsafe extern "C" fn() -> c_int as usize;
        }
        let (push, pop) = core_range_functions().expect("both range slots were written");
        // SAFETY: the fake functions ignore their argument.
        unsafe {
            push(c"x".as_ptr());
            pop();
        }
        assert_eq!((PUSHED.load(Ordering::SeqCst), POPPED.load(Ordering::SeqCst)), (1, 1));
    }
}
