//! Seeded random inputs: moved to [`crate::inputs`] (below the suite, the layer and the bench);
//! re-exported here so existing imports keep working.

pub use crate::inputs::*;
