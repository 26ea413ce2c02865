//! Is there a CUDA driver and a device? Answered before cudarc is touched: cudarc's
//! dynamic loader panics when libcuda is missing, so the library's presence is checked first.

use crate::error::{Error, Result};
use cudarc::driver::{result, sys};

/// What the probe found.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    /// The device name the driver reports.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// As `cuDriverGetVersion` reports it, e.g. 13000 for CUDA 13.0.
    pub driver_api_version: i32,
    /// Devices the driver sees.
    pub device_count: i32,
}

impl std::fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (maj, min) = self.compute_capability;
        let v = self.driver_api_version;
        write!(f, "{} (sm_{maj}{min}), CUDA driver API {}.{}, {} device(s)", self.name, v / 1000, (v % 1000) / 10, self.device_count)
    }
}

/// Finds device 0, or says why there is none. Never panics.
pub fn probe() -> Result<GpuInfo> {
    probe_device(0)
}

/// [`probe`] for device `ordinal` (the device of a caller's context). Never panics.
pub fn probe_device(ordinal: usize) -> Result<GpuInfo> {
    // SAFETY: only tries to dlopen the driver library under its known names; no symbol is used.
    // (Linked against libcuda — feature `cuda-dynamic-linking` — the program cannot start
    // without it, so there is nothing to check.)
    #[cfg(not(feature = "cuda-dynamic-linking"))]
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoGpu { reason: "libcuda (the CUDA driver library) is not installed or not on the loader path".into() });
    }
    let no_gpu = |what: &str, e: cudarc::driver::DriverError| Error::NoGpu { reason: format!("{what}: {e}") };
    result::init().map_err(|e| no_gpu("cuInit failed", e))?;
    let device_count = result::device::get_count().map_err(|e| no_gpu("cuDeviceGetCount failed", e))?;
    if device_count < 1 || ordinal >= device_count as usize {
        return Err(Error::NoGpu { reason: format!("the CUDA driver reports {device_count} device(s), no device {ordinal}") });
    }
    // `ordinal < device_count`, an i32.
    let dev = result::device::get(ordinal as i32).map_err(|e| no_gpu("cuDeviceGet failed", e))?;
    let name = result::device::get_name(dev).map_err(|e| no_gpu("cuDeviceGetName failed", e))?;
    let attr = |a| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet; the attribute is an int.
        unsafe { result::device::get_attribute(dev, a) }.map_err(|e| no_gpu("cuDeviceGetAttribute failed", e))
    };
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let mut driver_api_version = 0;
    // SAFETY: writes one int through a valid pointer.
    unsafe { sys::cuDriverGetVersion(&mut driver_api_version) }.result().map_err(|e| no_gpu("cuDriverGetVersion failed", e))?;
    Ok(GpuInfo { name, compute_capability: (major, minor), driver_api_version, device_count })
}
