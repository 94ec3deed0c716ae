//! Procedural macros for [`leasehold`](https://docs.rs/leasehold).
//!
//! Users depend on `leasehold`, which re-exports everything here.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
