//! A model of leasehold's lease protocol (work in progress).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
