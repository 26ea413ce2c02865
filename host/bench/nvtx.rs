//! NVTX ranges (forward, layer, kernel) for `nsys profile` / `ncu --nvtx`, through libnvToolsExt
//! loaded at run time. Silently absent when the library is not there: every call is then a
//! no-op. (`RGDN_NVTX=/path/to/libnvToolsExt.so` picks a library.)

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

#[cfg(test)]
mod tests {
    #[test]
    fn ranges_are_harmless_without_the_library() {
        let _outer = super::range("forward");
        let _inner = super::range("layer\0with nul");
    }
}
