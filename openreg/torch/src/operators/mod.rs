//! The Rust side of the operators (book part "Operators"): the fallback's counters and the
//! kernels. The registrations and the C++ wrappers that call these are in `csrc/operators/`.

pub(crate) mod fallback;
pub(crate) mod kernels;
